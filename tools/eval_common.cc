#include "tools/eval_common.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_format.h"

namespace kvtier::tools {

std::optional<int> CheckEvalArgs(const tools::Flags& flags, const char* name,
                                 std::initializer_list<std::string_view> known, const char* usage) {
  if (flags.Has("help")) {
    std::fputs(usage, stdout);
    return 0;
  }
  if (absl::Status s = flags.CheckKnown(known); !s.ok() || !flags.positional().empty()) {
    std::fprintf(stderr, "kvtier eval %s: %s\n%s", name,
                 s.ok() ? "unexpected argument" : s.ToString().c_str(), usage);
    return 2;
  }
  return std::nullopt;
}

bool EvalFlagsParsed(const char* name, std::initializer_list<absl::Status> statuses) {
  for (const absl::Status& s : statuses) {
    if (!s.ok()) {
      std::fprintf(stderr, "kvtier eval %s: %s\n", name, s.ToString().c_str());
      return false;
    }
  }
  return true;
}

std::optional<EvalSizes> ParseEvalSizes(const tools::Flags& flags, const char* name,
                                        uint32_t max_layers, uint32_t default_seq_len,
                                        uint32_t min_seq_len, uint32_t max_seq_len) {
  auto seed = flags.GetInt("seed", 1);
  auto seeds = flags.GetInt("seeds", 3);
  auto layers = flags.GetInt("layers", 2);
  auto seq_len = flags.GetInt("seq-len", default_seq_len);
  if (!EvalFlagsParsed(name, {seed.status(), seeds.status(), layers.status(), seq_len.status()})) {
    return std::nullopt;
  }
  if (*seeds < 1 || *seeds > 100 || *layers < 1 || *layers > max_layers ||
      *seq_len < min_seq_len || *seq_len > max_seq_len || *seed < 0) {
    std::fprintf(stderr,
                 "kvtier eval %s: --seeds must be 1..100, --layers 1..%u, --seq-len %u..%u, "
                 "--seed >= 0\n",
                 name, max_layers, min_seq_len, max_seq_len);
    return std::nullopt;
  }
  EvalSizes out;
  out.seed = static_cast<uint64_t>(*seed);
  out.seeds = static_cast<uint32_t>(*seeds);
  out.layers = static_cast<uint32_t>(*layers);
  out.seq_len = static_cast<uint32_t>(*seq_len);
  return out;
}

std::string JsonNumber(double v, int significant_digits) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.*g", significant_digits, v);
}

}  // namespace kvtier::tools
