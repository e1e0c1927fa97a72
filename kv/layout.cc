#include "kv/layout.h"

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

std::optional<LayoutDiff> FirstDifference(const Layout& want, const Layout& got,
                                          bool compare_tokens) {
  auto diff = [](const char* field, uint32_t w, uint32_t g) {
    return LayoutDiff{field, absl::StrCat(w), absl::StrCat(g)};
  };
  if (want.num_layers != got.num_layers) {
    return diff("num_layers", want.num_layers, got.num_layers);
  }
  if (want.num_kv_heads != got.num_kv_heads) {
    return diff("num_kv_heads", want.num_kv_heads, got.num_kv_heads);
  }
  if (want.head_dim != got.head_dim) return diff("head_dim", want.head_dim, got.head_dim);
  if (want.dtype != got.dtype) {
    return LayoutDiff{"dtype", DtypeName(want.dtype), DtypeName(got.dtype)};
  }
  if (!compare_tokens) return std::nullopt;
  if (want.tokens_per_block != got.tokens_per_block) {
    return diff("tokens_per_block", want.tokens_per_block, got.tokens_per_block);
  }
  if (want.sink_tokens != got.sink_tokens) {
    return diff("sink_tokens", want.sink_tokens, got.sink_tokens);
  }
  return std::nullopt;
}

}  // namespace kvtier::kv
