// The shape of one KV block: how many layers, heads, channels and tokens it holds and in
// which source dtype. Pure value type; no I/O.
//
// Payload layout of a raw block (before encoding): [layer][k|v][kv_head][token][head_dim]
// in the source dtype (fp16 or bf16, little-endian).
#ifndef KVTIER_KV_LAYOUT_H_
#define KVTIER_KV_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace kvtier::kv {

// Source dtype of raw KV. Both are 2 bytes per element.
enum class Dtype : uint8_t { kFp16 = 1, kBf16 = 2 };

// Returns "fp16" / "bf16".
const char* DtypeName(Dtype dtype);

// Thread-compatible value type. Defaults describe a Llama-3-8B-like model with
// 16-token blocks (2 MiB per fp16 block).
struct Layout {
  uint32_t num_layers = 32;
  uint32_t num_kv_heads = 8;
  uint32_t head_dim = 128;
  uint32_t tokens_per_block = 16;
  Dtype dtype = Dtype::kFp16;
  // Attention-sink tokens at the start of a sequence (they live in block 0). Codecs may
  // keep them unquantized; compaction always keeps them. Default 4 (StreamingLLM).
  uint32_t sink_tokens = 4;

  // Returns INVALID_ARGUMENT naming the first bad field: zero dimensions, head_dim not
  // even (RoPE pairs), sink_tokens > tokens_per_block, or a block over 1 GiB.
  absl::Status Validate() const;

  // Elements (K and V) for one token: 2 * num_layers * num_kv_heads * head_dim.
  uint64_t ElementsPerToken() const {
    return 2ull * num_layers * num_kv_heads * head_dim;
  }
  // Raw bytes for one token in the source dtype: 2 * L * H_kv * d_h * 2.
  uint64_t BytesPerToken() const { return ElementsPerToken() * 2; }
  uint64_t ElementsPerBlock() const { return ElementsPerToken() * tokens_per_block; }
  // Raw bytes of one full block in the source dtype.
  uint64_t BytesPerBlock() const { return BytesPerToken() * tokens_per_block; }

  // Offset in elements of (layer, kv (0 = K, 1 = V), head, token, channel) in a raw block
  // holding `tokens` tokens (tokens_per_block for a full block).
  uint64_t Index(uint32_t layer, uint32_t kv, uint32_t head, uint32_t token,
                 uint32_t channel, uint32_t tokens) const {
    return ((((uint64_t{layer} * 2 + kv) * num_kv_heads + head) * tokens + token) *
            head_dim) +
           channel;
  }

  // "L32 H8 D128 T16 fp16 sinks4": for logs and error messages.
  std::string DebugString() const;

  friend bool operator==(const Layout&, const Layout&) = default;
};

// The first field in which two layouts differ: its name ("num_layers", "num_kv_heads",
// "head_dim", "dtype", "tokens_per_block", "sink_tokens") and both values as text
// (dtypes by DtypeName).
struct LayoutDiff {
  const char* field;
  std::string want;
  std::string got;
};

// Compares `want` and `got` field by field in the order above and returns the first
// difference, or nullopt when they are equal. With compare_tokens false,
// tokens_per_block and sink_tokens are not compared (an encoded blob's header carries
// neither). The one layout comparator: the service, the protocol's spec checks and the
// store use it.
std::optional<LayoutDiff> FirstDifference(const Layout& want, const Layout& got,
                                          bool compare_tokens = true);

}  // namespace kvtier::kv

#endif  // KVTIER_KV_LAYOUT_H_
