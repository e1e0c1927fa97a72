// KV block codecs: pure functions that turn a raw block (source dtype, see layout.h) into
// a self-describing encoded blob and back. No I/O. All functions are thread-safe (no
// shared state); the hot loops use AVX2/F16C when the CPU has them, chosen at run time,
// with identical output on the scalar path.
//
// Every encoded blob starts with a fixed header (magic, format version, codec id, the
// layout dimensions, token count, number of unquantized sink tokens, body size), so a blob
// can be decoded or validated without any other context. Sizes always count scales, mins
// and padding.
//
// Codecs (docs/design.md §2 Data model):
//   fp16, bf16  raw source-dtype elements (must match layout.dtype).
//   lossless    fp16 or bf16 split into a high-byte and a low-byte plane, each stored as a
//               zstd frame when that is smaller (codec_lossless.h). Bit-exact for every
//               16-bit pattern, NaN and inf included. Size depends on the data.
//   fp8_e4m3    OCP E4M3FN (max +-448, saturating, round-to-nearest-even), fp32 scale per
//               (layer, k|v, kv_head) = amax / 448 unless calibrated scales are given.
//   int8, int4  asymmetric min-max per token, groups of 32 channels, 16-bit scale and min.
//   kivi4       keys per channel grouped over tokens (chunks of 32 tokens), values per
//               token in groups of 32 channels, 16-bit scale and min, codes packed lowest
//               bits first.
//   kivi2       (format version 2) keys 3-bit per channel over chunks of 16 tokens,
//               values 2-bit per token in groups of 16 channels; each group's min and
//               max are int8 steps of A/127 with A (16-bit) the largest |x| of the key
//               chunk or value token (codec_kivi2.h). 3.63 bits per value for head_dim 64
//               and 16-token blocks (docs/kivi2.md: why, measured on SmolLM2-135M).
// With sink protection, the first min(layout.sink_tokens, tokens) tokens of block 0 are
// stored in the source dtype and decode bit-exactly.
//
// FINITE DECODE. Decode never produces inf or NaN from a blob Encode made of finite input
// (fp8_e4m3 gives NaN only where the input was NaN): every decoded value is clamped to the
// finite range of the source dtype (+-65504 for fp16, +-(2 - 2^-7) * 2^127 for bf16)
// before rounding, whatever the blob says.
//
// ERROR BOUND (checked element by element for both kernel sets by codec_property_test).
//   int8, int4, kivi4, and kivi2 in format version 1: for a group (see "Row groups" /
//     "kivi K" below) with min mn,
//     max mx and stored scale s, every decoded element y of a source element x satisfies
//       |y - x| <= s/2 + ulp(a)/2 + 2^-20 * a,     a = max(|mn|, |mx|) + s,
//     where ulp(a) is the spacing of the source dtype at magnitude min(a, its max finite
//     value) (fp16: 2^-24 below 2^-14; bf16: 2^-133 below 2^-126), the middle term is the
//     final rounding to the source dtype and the last one covers float arithmetic. The
//     scale is s = 0 for a constant group (which decodes exactly), else
//       s <= (mx - mn) / qmax * (1 + 2^-p + 2^-22) + s_min,   qmax = 2^bits - 1,
//     with p = 10, s_min = 2^-24 for fp16 and p = 7, s_min = 2^-126 for bf16 (a bf16 scale
//     is at least 2^-126 so that its reciprocal is finite).
//   kivi2 (format version 2): for a group (codec_kivi2.h) with min mn and max mx, in a key
//     chunk or value token whose largest |x| is A:
//       |y - x| <= s/2 + ulp(a)/2 + 2^-18 * a,   s = (mx - mn + 2 * A / 127) / qmax,
//     a = A + s, qmax = 7 for keys and 3 for values.
//   fp8_e4m3 with the default scale s = max(amax / 448, FLT_MIN) (amax: largest finite |x|
//     of the slab): |y - x| <= |x| * 2^-4 + s * 2^-10 + ulp(a)/2 + 2^-20 * amax with
//     a = 1.125 * |x| + s.
//     Calibrated scales saturate values above 448 * scale.
//   fp16, bf16, lossless, and sink tokens of any codec: bit-exact.
//
// ENCODED FORMAT. All fields little-endian, no implicit padding. Format version 1 is
// every codec's body below; version 2 exists for kivi2 only (its new body,
// codec_kivi2.h). Encode writes version 2 for kivi2 and version 1 for every other codec;
// Decode reads both, so kivi2 blobs stored before version 2 still decode. Any other
// version, or version 2 with another codec, is INVALID_ARGUMENT.
//   Header (kEncodedHeaderBytes = 40 bytes):
//     0  u8[4] magic "KVTB"          4  u16 format version (1, or 2 for kivi2)
//     6  u8    codec id (CodecId)    7  u8  source dtype (Dtype)
//     8  u32   num_layers            12 u32 num_kv_heads
//     16 u32   head_dim              20 u32 num_tokens (n)
//     24 u32   raw_tokens (r)        28 u32 reserved, must be 0
//     32 u64   body bytes (= blob size - 40)
//   Body of fp16/bf16: the raw payload as given (r == n).
//   Body of fp8_e4m3, int8, int4, kivi2, kivi4 (kivi2: the slab records of its format
//   version, below for version 1, codec_kivi2.h for version 2):
//     1. raw section: for each slab (layer, k|v, kv_head) in payload order, its first r
//        tokens in the source dtype (r * head_dim * 2 bytes);
//     2. quantized section, for the remaining m = n - r tokens: for each slab in payload
//        order, the slab record below. Nothing when m == 0.
//   Body of lossless: the plane directory and the two planes (codec_lossless.h); r == n.
//   "Params" are G scales followed by G mins, each 16-bit in the SOURCE dtype (fp16 for
//   fp16 KV, bf16 for bf16 KV, so any source value is representable and the stored min is
//   exact). Scales are rounded up so min + qmax * scale covers the group's max. Decoding
//   is x = code * scale + min in float, clamped to the source dtype's finite range, then
//   rounded (RNE) to the source dtype. Codes are round-half-up of
//   clamp((x - min) / scale, 0, qmax).
//   Row groups: channels [32g, min(32g + 32, head_dim)) of one token; G = m * ceil(d/32),
//   ordered by (token, group).
//     fp8_e4m3   f32 scale, then m * d E4M3FN codes (token-major). x = e4m3(code) * scale.
//     int8       params (row groups), then m * d u8 codes.
//     int4       params (row groups), then per token ceil(d/2) bytes: channel c in byte
//                c/2 at bit 4 * (c % 2).
//     kivi V     (kivi4; kivi2 version 1) params (row groups), then per token ceil(d*b/8) bytes (b = 2 or 4):
//                channel c in byte c/(8/b) at bit b * (c % (8/b)); trailing bits zero.
//     kivi K     (kivi4; kivi2 version 1) params per (chunk, channel), G = ceil(m/32) * d, chunk c covering the
//                quantized tokens [32c, min(32c + 32, m)) (counted from token r; a block
//                of fewer than 32 tokens is one chunk); then ceil(m/(8/b)) rows of d
//                bytes: byte (j, channel) holds the codes of quantized tokens j*(8/b) + i
//                of that channel at bit b * i (lowest bits first; missing trailing
//                tokens are 0).
//   Note: the original design said "fp16 scale and min"; for fp16 KV they are fp16. bf16
//   KV keeps them in bf16 because bf16 values can exceed the fp16 range. Same size either
//   way.
//   Bits per element (body only, head_dim a multiple of 32, m a multiple of 32 for kivi
//   keys): int8 9, int4 5, kivi4 5, kivi2 version 1: 3 (+ 320 header bits per blob).
//   kivi2 version 2 with head_dim 64: 3.633 for m a multiple of 16 (keys 4.016, values
//   3.25); head_dim 128: 3.566.
// Encoded size (EncodedSize) counts everything above; for lossless it is an upper bound.
#ifndef KVTIER_KV_CODEC_H_
#define KVTIER_KV_CODEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/layout.h"

namespace kvtier::kv {

// Stable on disk and on the wire: never renumber.
enum class CodecId : uint8_t {
  kFp16 = 1,
  kBf16 = 2,
  kFp8E4M3 = 3,
  kInt8 = 4,
  kInt4 = 5,
  kKivi2 = 6,
  kKivi4 = 7,
  kLossless = 8,
};

// Size of the fixed header that starts every encoded blob.
inline constexpr uint64_t kEncodedHeaderBytes = 40;

// All codecs, in id order.
std::span<const CodecId> AllCodecs();

// Returns "fp16", "bf16", "fp8_e4m3", "int8", "int4", "kivi2", "kivi4", "lossless".
const char* CodecName(CodecId codec);

// Parses a name returned by CodecName. INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<CodecId> ParseCodecName(std::string_view name);

// Writes the kEncodedHeaderBytes-byte header of the ENCODED FORMAT above into `out`:
// the format version Encode writes for `codec` (2 for kivi2, else 1), `codec`,
// layout.dtype and dimensions, num_tokens, raw_tokens and body_bytes. What
// Encode writes; exported so a server can put the header in front of raw fp16/bf16 bytes
// it stores unchanged (body = the raw bytes, raw_tokens = num_tokens) without copying
// them. REQUIRES: out holds kEncodedHeaderBytes bytes.
void EncodeRawHeader(CodecId codec, const Layout& layout, uint32_t num_tokens,
                     uint32_t raw_tokens, uint64_t body_bytes, uint8_t* out);

struct CodecOptions {
  // Keep the first layout.sink_tokens tokens of block 0 in the source dtype. Default on.
  bool keep_sinks = true;
  // fp8_e4m3 only: calibrated scales, one per (layer, k|v, kv_head) in that order
  // (2 * num_layers * num_kv_heads values). Empty: amax / 448 per group.
  std::vector<float> fp8_scales;
};

// What an encoded blob's header says.
struct EncodedInfo {
  uint16_t format_version;  // 1, or 2 (kivi2 only)
  CodecId codec;
  Layout layout;            // tokens_per_block = num_tokens of this blob; sink_tokens = 0
  uint32_t num_tokens;      // tokens in this blob
  uint32_t raw_tokens;      // leading tokens stored unquantized (sink protection)
  uint64_t encoded_bytes;   // total blob size including the header
  uint64_t raw_bytes;       // size of the decoded raw payload
};

// Returns the exact encoded size of a blob holding `num_tokens` tokens of which the
// first `raw_tokens` are unquantized (clamped to num_tokens; ignored by fp16/bf16 and
// lossless, which keep every token exact). For lossless, whose size depends on the data,
// returns the largest size such a blob can have (52 bytes more than the raw payload).
// REQUIRES: layout.Validate().ok().
uint64_t EncodedSize(CodecId codec, const Layout& layout, uint32_t num_tokens,
                     uint32_t raw_tokens);

// Returns the number of leading tokens left unquantized when encoding block
// `block_index` of `num_tokens` tokens under `options`: min(sink_tokens, num_tokens) for
// block 0 with keep_sinks, else 0. (The fp16/bf16 codecs store every token raw and record
// raw_tokens = num_tokens in their header, and so does lossless.)
uint32_t ProtectedTokens(const Layout& layout, uint32_t block_index, uint32_t num_tokens,
                         const CodecOptions& options);

// Encodes `raw` (a whole number of tokens of `layout`, in layout.dtype) as block
// `block_index` of a sequence. INVALID_ARGUMENT if the layout is invalid, raw's size is
// not a positive multiple of layout.BytesPerToken(), fp8_scales has the wrong length or a
// value that is not a positive normal float, codec fp16/bf16 does not match layout.dtype,
// or (int8, int4, kivi2, kivi4) the payload holds inf or NaN (or, for bf16, a
// magnitude >= 2^126). fp8_e4m3 keeps NaN and saturates inf; lossless keeps every bit.
// INTERNAL if zstd fails (lossless). A payload may hold any number of tokens, not only
// tokens_per_block.
absl::StatusOr<std::string> Encode(CodecId codec, const Layout& layout,
                                   uint32_t block_index, std::span<const uint8_t> raw,
                                   const CodecOptions& options = {});

// Parses and validates the header of `encoded` (magic, version, codec, dimensions, body
// size == rest of the blob, blob size == EncodedSize, or at most that for lossless).
// INVALID_ARGUMENT / DATA_LOSS on anything inconsistent; never reads out of bounds.
absl::StatusOr<EncodedInfo> ParseHeader(std::span<const uint8_t> encoded);

// Like ParseHeader, for a blob of `encoded_size` bytes of which only the first
// kEncodedHeaderBytes (`header`, at least that long) are at hand, e.g. a payload that
// arrived in pieces. Checks everything ParseHeader checks except the body bytes.
absl::StatusOr<EncodedInfo> ParseHeaderPrefix(std::span<const uint8_t> header,
                                              uint64_t encoded_size);

// Decodes `encoded` into `raw_out`, which must be exactly info.raw_bytes long. Returns
// INVALID_ARGUMENT for a wrong raw_out size, ParseHeader's errors, DATA_LOSS for a body
// that does not decode (a non-finite or negative param, a bad lossless plane). Any
// malformed input returns an error (never crashes or reads out of bounds).
absl::Status Decode(std::span<const uint8_t> encoded, std::span<uint8_t> raw_out);

// Convenience: decodes into a new string.
absl::StatusOr<std::string> DecodeToString(std::span<const uint8_t> encoded);

// Helpers to view strings as bytes.
inline std::span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

namespace internal {
struct CodecKernels;  // codec_kernels.h
// Encode and Decode with an explicit kernel set instead of the fastest one this CPU has,
// so tests can run both sets (the public functions use internal::ActiveKernels()).
absl::StatusOr<std::string> EncodeWithKernels(const CodecKernels& kernels, CodecId codec,
                                              const Layout& layout, uint32_t block_index,
                                              std::span<const uint8_t> raw,
                                              const CodecOptions& options);
absl::Status DecodeWithKernels(const CodecKernels& kernels, std::span<const uint8_t> encoded,
                               std::span<uint8_t> raw_out);
}  // namespace internal

}  // namespace kvtier::kv

#endif  // KVTIER_KV_CODEC_H_
