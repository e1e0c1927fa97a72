#include "storage/kv/layout.h"

#include "absl/strings/str_cat.h"

namespace kvtier::kv {

const char* DtypeName(Dtype dtype) {
  switch (dtype) {
    case Dtype::kFp16: return "fp16";
    case Dtype::kBf16: return "bf16";
  }
  return "unknown";
}

absl::Status Layout::Validate() const {
  if (num_layers == 0) return absl::InvalidArgumentError("layout.num_layers must be > 0");
  if (num_kv_heads == 0) {
    return absl::InvalidArgumentError("layout.num_kv_heads must be > 0");
  }
  if (head_dim == 0 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout.head_dim must be a positive even number, got ", head_dim));
  }
  if (tokens_per_block == 0) {
    return absl::InvalidArgumentError("layout.tokens_per_block must be > 0");
  }
  if (dtype != Dtype::kFp16 && dtype != Dtype::kBf16) {
    return absl::InvalidArgumentError("layout.dtype must be fp16 or bf16");
  }
  if (sink_tokens > tokens_per_block) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout.sink_tokens (", sink_tokens, ") exceeds tokens_per_block (",
                     tokens_per_block, ")"));
  }
  // Multiply step by step so huge dimensions cannot wrap around 64 bits.
  uint64_t bytes = 4;  // K and V, 2 bytes per element
  for (uint32_t dim : {num_layers, num_kv_heads, head_dim, tokens_per_block}) {
    bytes *= dim;
    if (bytes > (uint64_t{1} << 30)) break;
  }
  if (bytes > (uint64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout describes a block of more than 1 GiB (", DebugString(),
                     "); lower tokens_per_block"));
  }
  return absl::OkStatus();
}

std::string Layout::DebugString() const {
  return absl::StrCat("L", num_layers, " H", num_kv_heads, " D", head_dim, " T",
                      tokens_per_block, " ", DtypeName(dtype), " sinks", sink_tokens);
}

}  // namespace kvtier::kv
