// Internal to kv: the inner loops of the quantizing codecs (float domain) and the
// byte-plane split of the lossless codec. Each kernel set is compiled twice (baseline
// x86-64 and AVX2) from codec_kernels.inc; the codec picks one at run time. Both sets
// produce identical bits. Pure functions; thread-safe.
//
// Vocabulary: a "slab" is the data of one (layer, k|v, kv_head): `rows` tokens of `d`
// channels, row-major. "Row groups" are runs of 32 channels of one token (last one
// shorter); "column groups" are one channel over a chunk of up to 32 tokens.
#ifndef KVTIER_KV_CODEC_KERNELS_H_
#define KVTIER_KV_CODEC_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "kv/layout.h"

namespace kvtier::kv::internal {

inline constexpr uint32_t kGroupSize = 32;

struct CodecKernels {
  // Per row group of x[rows][d]: min and max into mn/mx[rows * ceil(d/32)].
  void (*min_max_rows)(const float* x, uint32_t rows, uint32_t d, float* mn, float* mx);
  // Per channel of x[rows][d] over all rows: min and max into mn/mx[d].
  void (*min_max_cols)(const float* x, uint32_t rows, uint32_t d, float* mn, float* mx);
  // codes = round(clamp((x - mn) * inv, 0, qmax)) with per-row-group mn/inv.
  void (*quant_rows)(const float* x, uint32_t rows, uint32_t d, const float* mn,
                     const float* inv, uint32_t qmax, uint8_t* q);
  // Same with per-channel mn/inv[d] shared by all rows.
  void (*quant_cols)(const float* x, uint32_t rows, uint32_t d, const float* mn,
                     const float* inv, uint32_t qmax, uint8_t* q);
  // out = min(q * scale + mn, limit), per row group / per channel. REQUIRES: scale >= 0 and
  // |mn| <= limit (the codec checks params), so with `limit` the largest finite value of
  // the source dtype every output is in [-limit, limit] and converts to a finite value.
  void (*dequant_rows)(const uint8_t* q, uint32_t rows, uint32_t d, const float* scale,
                       const float* mn, float limit, float* out);
  void (*dequant_cols)(const uint8_t* q, uint32_t rows, uint32_t d, const float* scale,
                       const float* mn, float limit, float* out);
  // Packs each row of q[rows][d] (b-bit codes, b = 2 or 4) into ceil(d*b/8) bytes,
  // channel c at bit (c % (8/b)) * b of byte c / (8/b). And back.
  void (*pack_rows)(const uint8_t* q, uint32_t rows, uint32_t d, uint32_t bits,
                    uint8_t* out);
  void (*unpack_rows)(const uint8_t* in, uint32_t rows, uint32_t d, uint32_t bits,
                      uint8_t* q);
  // Packs q[rows][d] along tokens: byte (j, c) at out[j * d + c] holds the codes of
  // tokens j*(8/b) + i (i < 8/b, missing tokens are 0) of channel c at bit i * b. And back.
  void (*pack_cols)(const uint8_t* q, uint32_t rows, uint32_t d, uint32_t bits,
                    uint8_t* out);
  void (*unpack_cols)(const uint8_t* in, uint32_t rows, uint32_t d, uint32_t bits,
                      uint8_t* q);
  // E4M3FN codes of x[i] * inv_scale (RNE, saturating, NaN -> 0x7F|sign).
  void (*encode_fp8)(const float* x, size_t n, float inv_scale, uint8_t* out);
  // out[i] = clamp(e4m3(codes[i]) * scale, -limit, limit); NaN codes give NaN.
  void (*decode_fp8)(const uint8_t* codes, size_t n, float scale, float limit, float* out);
  // Max over the n little-endian uint16 values at `raw` (any alignment) of (v & 0x7fff),
  // counting only values whose (v & 0x7fff) < limit (others count as 0).
  uint16_t (*max_abs_bits)(const uint8_t* raw, size_t n, uint16_t limit);
  // From per-group min/max: scale = (mx - mn) / qmax rounded UP to `dtype` (so
  // mn + qmax * scale >= mx; a nonzero bf16 scale is at least 2^-126 so that its
  // reciprocal is finite) as codes and as float, its reciprocal (0 for scale 0), and mn as
  // `dtype` codes (exact when mn is a dtype value).
  void (*make_params)(Dtype dtype, size_t groups, uint32_t qmax, const float* mn,
                      const float* mx, float* scale, float* inv, uint16_t* scale_codes,
                      uint16_t* min_codes);
  // Splits n little-endian 16-bit values at `raw` (any alignment) into the planes of
  // their high bytes and their low bytes (n bytes each). And back.
  void (*split_planes)(const uint8_t* raw, size_t n, uint8_t* hi, uint8_t* lo);
  void (*merge_planes)(const uint8_t* hi, const uint8_t* lo, size_t n, uint8_t* raw);
};

const CodecKernels& BaselineKernels();
const CodecKernels& Avx2Kernels();  // REQUIRES: the CPU has AVX2.
// The fastest set this CPU supports.
const CodecKernels& ActiveKernels();

}  // namespace kvtier::kv::internal

#endif  // KVTIER_KV_CODEC_KERNELS_H_
