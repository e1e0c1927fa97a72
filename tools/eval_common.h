// Pieces shared by the `kvtier eval` subcommands (tools/eval_codecs.cc,
// tools/eval_compaction.cc): argument checks with the common exit codes, mean +- std
// of one metric over seeds, and JSON number formatting. Stateless; thread-safe.
#ifndef KVTIER_TOOLS_EVAL_COMMON_H_
#define KVTIER_TOOLS_EVAL_COMMON_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "tools/attention.h"
#include "tools/flags.h"

namespace kvtier::tools {

// The checks every `kvtier eval <name>` makes before reading its flags: --help prints
// `usage` to stdout (returns 0); a flag not in `known` or any positional argument prints
// "kvtier eval <name>: <why>" and `usage` to stderr (returns 2). Returns nullopt when the
// command should go on.
std::optional<int> CheckEvalArgs(const tools::Flags& flags, const char* name,
                                 std::initializer_list<std::string_view> known, const char* usage);

// Prints "kvtier eval <name>: <status>" to stderr for the first non-OK status (a flag
// value that did not parse) and returns false; true when all are OK.
bool EvalFlagsParsed(const char* name, std::initializer_list<absl::Status> statuses);

// The run-size flags every eval takes, as validated numbers.
struct EvalSizes {
  uint64_t seed = 1;      // --seed (>= 0; default 1): first generator seed
  uint32_t seeds = 3;     // --seeds (1..100; default 3): seeds averaged over
  uint32_t layers = 2;    // --layers (1..max_layers; default 2)
  uint32_t seq_len = 0;   // --seq-len (min_seq_len..max_seq_len; default default_seq_len)
};

// Reads --seed, --seeds, --layers and --seq-len. On a value that does not parse or is out
// of range prints "kvtier eval <name>: <why>" to stderr and returns nullopt.
std::optional<EvalSizes> ParseEvalSizes(const tools::Flags& flags, const char* name,
                                        uint32_t max_layers, uint32_t default_seq_len,
                                        uint32_t min_seq_len, uint32_t max_seq_len);

// Mean and sample std (ComputeMeanStd) of `field` over `items` (e.g. one metric of
// every seed's sample).
template <typename T>
MeanStd MeanStdOf(const std::vector<T>& items, double T::*field) {
  std::vector<double> v;
  v.reserve(items.size());
  for (const T& x : items) v.push_back(x.*field);
  return ComputeMeanStd(v);
}

// `v` with `significant_digits` significant digits (printf %g), or "null" when not finite
// (JSON has no NaN or infinity).
std::string JsonNumber(double v, int significant_digits);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_EVAL_COMMON_H_
