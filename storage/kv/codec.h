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
// Codecs (DESIGN.md section 3):
//   fp16, bf16  raw source-dtype elements (must match layout.dtype).
//   fp8_e4m3    OCP E4M3FN (max +-448, saturating, round-to-nearest-even), fp32 scale per
//               (layer, k|v, kv_head) = amax / 448 unless calibrated scales are given.
//   int8, int4  asymmetric min-max per token, groups of 32 channels, 16-bit scale and min.
//   kivi2/kivi4 keys per channel grouped over tokens (chunks of 32 tokens), values per
//               token in groups of 32 channels, 16-bit scale and min, codes packed lowest
//               bits first.
// With sink protection, the first min(layout.sink_tokens, tokens) tokens of block 0 are
// stored in the source dtype and decode bit-exactly.
//
// ENCODED FORMAT, version 1. All fields little-endian, no implicit padding.
//   Header (kEncodedHeaderBytes = 40 bytes):
//     0  u8[4] magic "KVTB"          4  u16 format version (1)
//     6  u8    codec id (CodecId)    7  u8  source dtype (Dtype)
//     8  u32   num_layers            12 u32 num_kv_heads
//     16 u32   head_dim              20 u32 num_tokens (n)
//     24 u32   raw_tokens (r)        28 u32 reserved, must be 0
//     32 u64   body bytes (= blob size - 40)
//   Body of fp16/bf16: the raw payload as given (r == n).
//   Body of the other codecs:
//     1. raw section: for each slab (layer, k|v, kv_head) in payload order, its first r
//        tokens in the source dtype (r * head_dim * 2 bytes);
//     2. quantized section, for the remaining m = n - r tokens: for each slab in payload
//        order, the slab record below. Nothing when m == 0.
//   "Params" are G scales followed by G mins, each 16-bit in the SOURCE dtype (fp16 for
//   fp16 KV, bf16 for bf16 KV, so any source value is representable and the stored min is
//   exact). Scales are rounded up so min + qmax * scale covers the group's max. Decoding
//   is x = code * scale + min in float, then rounded (RNE) to the source dtype. Codes are
//   round-half-up of clamp((x - min) / scale, 0, qmax).
//   Row groups: channels [32g, min(32g + 32, head_dim)) of one token; G = m * ceil(d/32),
//   ordered by (token, group).
//     fp8_e4m3   f32 scale, then m * d E4M3FN codes (token-major). x = e4m3(code) * scale.
//     int8       params (row groups), then m * d u8 codes.
//     int4       params (row groups), then per token ceil(d/2) bytes: channel c in byte
//                c/2 at bit 4 * (c % 2).
//     kivi V     params (row groups), then per token ceil(d*b/8) bytes (b = 2 or 4):
//                channel c in byte c/(8/b) at bit b * (c % (8/b)); trailing bits zero.
//     kivi K     params per (chunk, channel), G = ceil(m/32) * d, chunk c covering the
//                quantized tokens [32c, min(32c + 32, m)) (counted from token r; a block
//                of fewer than 32 tokens is one chunk); then ceil(m/(8/b)) rows of d
//                bytes: byte (j, channel) holds the codes of quantized tokens j*(8/b) + i
//                of that channel at bit b * i (lowest bits first; missing trailing
//                tokens are 0).
//   Note: DESIGN.md says "fp16 scale and min"; for fp16 KV they are fp16. bf16 KV keeps
//   them in bf16 because bf16 values can exceed the fp16 range. Same size either way.
//   Bits per element (body only, head_dim a multiple of 32, m a multiple of 32 for kivi
//   keys): int8 9, int4 5, kivi4 5, kivi2 3 (+ 320 header bits per blob).
// Encoded size (EncodedSize) counts everything above.
#ifndef KVTIER_STORAGE_KV_CODEC_H_
#define KVTIER_STORAGE_KV_CODEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/kv/layout.h"

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
};

// Size of the fixed header that starts every encoded blob.
inline constexpr uint64_t kEncodedHeaderBytes = 40;

// All codecs, in id order.
std::span<const CodecId> AllCodecs();

// Returns "fp16", "bf16", "fp8_e4m3", "int8", "int4", "kivi2", "kivi4".
const char* CodecName(CodecId codec);

// Parses a name returned by CodecName. INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<CodecId> ParseCodecName(std::string_view name);

// Writes the kEncodedHeaderBytes-byte header of the ENCODED FORMAT above into `out`:
// `codec`, layout.dtype and dimensions, num_tokens, raw_tokens and body_bytes. What
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
  CodecId codec;
  Layout layout;            // tokens_per_block = num_tokens of this blob; sink_tokens = 0
  uint32_t num_tokens;      // tokens in this blob
  uint32_t raw_tokens;      // leading tokens stored unquantized (sink protection)
  uint64_t encoded_bytes;   // total blob size including the header
  uint64_t raw_bytes;       // size of the decoded raw payload
};

// Returns the exact encoded size of a blob holding `num_tokens` tokens of which the
// first `raw_tokens` are unquantized (clamped to num_tokens; ignored by fp16/bf16, which
// store everything raw). REQUIRES: layout.Validate().ok().
uint64_t EncodedSize(CodecId codec, const Layout& layout, uint32_t num_tokens,
                     uint32_t raw_tokens);

// Returns the number of leading tokens left unquantized when encoding block
// `block_index` of `num_tokens` tokens under `options`: min(sink_tokens, num_tokens) for
// block 0 with keep_sinks, else 0. (The fp16/bf16 codecs store every token raw and record
// raw_tokens = num_tokens in their header.)
uint32_t ProtectedTokens(const Layout& layout, uint32_t block_index, uint32_t num_tokens,
                         const CodecOptions& options);

// Encodes `raw` (a whole number of tokens of `layout`, in layout.dtype) as block
// `block_index` of a sequence. INVALID_ARGUMENT if the layout is invalid, raw's size is
// not a positive multiple of layout.BytesPerToken(), fp8_scales has the wrong length or a
// value that is not a positive normal float, codec fp16/bf16 does not match layout.dtype,
// or (int8, int4, kivi2, kivi4) the payload holds inf or NaN (or, for bf16, a
// magnitude >= 2^126). fp8_e4m3 keeps NaN and
// saturates inf. A payload may hold any number of tokens, not only tokens_per_block.
absl::StatusOr<std::string> Encode(CodecId codec, const Layout& layout,
                                   uint32_t block_index, std::span<const uint8_t> raw,
                                   const CodecOptions& options = {});

// Parses and validates the header of `encoded` (magic, version, codec, dimensions, body
// size == rest of the blob). INVALID_ARGUMENT / DATA_LOSS on anything inconsistent; never
// reads out of bounds.
absl::StatusOr<EncodedInfo> ParseHeader(std::span<const uint8_t> encoded);

// Like ParseHeader, for a blob of `encoded_size` bytes of which only the first
// kEncodedHeaderBytes (`header`, at least that long) are at hand, e.g. a payload that
// arrived in pieces. Checks everything ParseHeader checks except the body bytes.
absl::StatusOr<EncodedInfo> ParseHeaderPrefix(std::span<const uint8_t> header,
                                              uint64_t encoded_size);

// Decodes `encoded` into `raw_out`, which must be exactly info.raw_bytes long. Any
// malformed input returns an error (never crashes or reads out of bounds).
absl::Status Decode(std::span<const uint8_t> encoded, std::span<uint8_t> raw_out);

// Convenience: decodes into a new string.
absl::StatusOr<std::string> DecodeToString(std::span<const uint8_t> encoded);

// Helpers to view strings as bytes.
inline std::span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace kvtier::kv

#endif  // KVTIER_STORAGE_KV_CODEC_H_
