#include "client/cli/eval_common.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_format.h"

namespace kvtier::cli {

std::optional<int> CheckEvalArgs(const Flags& flags, const char* name,
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

std::string JsonNumber(double v, int significant_digits) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.*g", significant_digits, v);
}

}  // namespace kvtier::cli
