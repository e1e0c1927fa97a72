// KV block codecs: pure functions that turn a raw block (source dtype, see layout.h) into
// a self-describing encoded blob and back. No I/O.
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
//   int8, int4  asymmetric min-max per token, groups of 32 channels, fp16 scale and min.
//   kivi2/kivi4 keys per channel grouped over tokens (chunks of 32 tokens), values per
//               token in groups of 32 channels, fp16 scale and min, codes packed lowest
//               bits first.
// With sink protection, the first min(layout.sink_tokens, tokens) tokens of block 0 are
// stored in the source dtype and decode bit-exactly.
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

// All codecs, in id order.
std::span<const CodecId> AllCodecs();

// Returns "fp16", "bf16", "fp8_e4m3", "int8", "int4", "kivi2", "kivi4".
const char* CodecName(CodecId codec);

// Parses a name returned by CodecName. INVALID_ARGUMENT naming the value otherwise.
absl::StatusOr<CodecId> ParseCodecName(std::string_view name);

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
// first `raw_tokens` are unquantized. REQUIRES: layout.Validate().ok().
uint64_t EncodedSize(CodecId codec, const Layout& layout, uint32_t num_tokens,
                     uint32_t raw_tokens);

// Returns the number of leading tokens left unquantized when encoding block
// `block_index` of `num_tokens` tokens under `options`.
uint32_t ProtectedTokens(const Layout& layout, uint32_t block_index, uint32_t num_tokens,
                         const CodecOptions& options);

// Encodes `raw` (a whole number of tokens of `layout`, in layout.dtype) as block
// `block_index` of a sequence. INVALID_ARGUMENT if the layout is invalid, raw's size is
// not a positive multiple of layout.BytesPerToken(), fp8_scales has the wrong length, or
// codec fp16/bf16 does not match layout.dtype.
absl::StatusOr<std::string> Encode(CodecId codec, const Layout& layout,
                                   uint32_t block_index, std::span<const uint8_t> raw,
                                   const CodecOptions& options = {});

// Parses and validates the header of `encoded` (magic, version, codec, dimensions, body
// size == rest of the blob). INVALID_ARGUMENT / DATA_LOSS on anything inconsistent; never
// reads out of bounds.
absl::StatusOr<EncodedInfo> ParseHeader(std::span<const uint8_t> encoded);

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
