// Internal to kv: the body of a kivi2 blob in format version 2 (codec.h, "kivi2",
// ENCODED FORMAT). Keys: 3-bit codes per channel over chunks of 16 tokens; values: 2-bit
// codes per token in groups of 16 channels. Each group's min and max are stored as int8
// steps of A/127, where A is the largest |x| of the chunk (keys) or of the token (values),
// stored once in the source dtype. Scalar loops; deterministic; pure functions, thread-safe.
//
// SLAB RECORDS (m quantized tokens of d channels, see codec.h for the blob around them):
//   key slab: for each chunk of rows = min(16, m - 16c) tokens:
//     u16 A (source dtype bits) | i8 min_code[d] | i8 max_code[d] |
//     per channel, ceil(3 * rows / 8) bytes: the code of row i at bit 3i (lowest first,
//     trailing bits 0)
//   value slab: for each token:
//     u16 A | i8 min_code[ceil(d/16)] | i8 max_code[ceil(d/16)] |
//     ceil(d/4) bytes: channel c at bit 2 * (c % 4) of byte c / 4 (trailing bits 0)
//   A group's range is lo = min_code * u, hi = max_code * u with u = A / 127 (float), its
//   step s = (hi - lo) / qmax (qmax = 7 for keys, 3 for values), and it decodes as
//   lo + code * s. The encoder picks min_code = floor(min / u), max_code = ceil(max / u),
//   both in [-127, 127], and code = clamp(floor((x - lo) / s + 0.5), 0, qmax).
#ifndef KVTIER_KV_CODEC_KIVI2_H_
#define KVTIER_KV_CODEC_KIVI2_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kv/layout.h"

namespace kvtier::kv::internal {

inline constexpr uint32_t kKivi2KeyChunk = 16;   // tokens per key group
inline constexpr uint32_t kKivi2ValueGroup = 16; // channels per value group
inline constexpr uint32_t kKivi2KeyBits = 3;
inline constexpr uint32_t kKivi2ValueBits = 2;

// Bytes of a key / value slab record of m tokens of d channels.
uint64_t Kivi2KeySlabBytes(uint32_t d, uint32_t m);
uint64_t Kivi2ValueSlabBytes(uint32_t d, uint32_t m);

// Encode x[m][d] (finite values of `dtype`, converted to float) into a slab record at
// `out` (exactly the bytes above).
void EncodeKivi2Keys(Dtype dtype, const float* x, uint32_t d, uint32_t m, uint8_t* out);
void EncodeKivi2Values(Dtype dtype, const float* x, uint32_t d, uint32_t m, uint8_t* out);

// Decode a slab record into x[m][d] (floats within the finite range of `dtype`).
// DATA_LOSS if an A is negative or not finite, a min/max code is -128, or a min code
// exceeds its max code.
absl::Status DecodeKivi2Keys(Dtype dtype, const uint8_t* in, uint32_t d, uint32_t m, float* x);
absl::Status DecodeKivi2Values(Dtype dtype, const uint8_t* in, uint32_t d, uint32_t m,
                               float* x);

}  // namespace kvtier::kv::internal

#endif  // KVTIER_KV_CODEC_KIVI2_H_
