// Output of `kvtier replay` (tools/replay_cmd.cc): the rows of a run, printed as a table,
// as JSON, or drawn as an SVG sweep plot (tools/svg_plot.h).
//
// Thread-compatible values; the print functions write to stdout.
#ifndef KVTIER_TOOLS_REPLAY_REPORT_H_
#define KVTIER_TOOLS_REPLAY_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tools/cache_sim.h"

namespace kvtier::tools {

inline constexpr uint32_t kTraceBlockTokens = 512;  // Mooncake hash_ids cover 512 tokens

// One policy at one capacity on one trace.
struct ReplayRow {
  std::string trace;   // the trace's name (path or synth:FAMILY)
  std::string policy;
  std::string engine;  // "store" or "sim"
  std::string codec;   // --sweep-codecs / --capacity-bytes only
  uint64_t trace_block_bytes = 0;
  uint64_t capacity_blocks = 0;
  double cold_capacities = 0;  // cold tier = this x hot (store policies); 0 = none
  size_t point = 0;  // index of the capacity point (and its references)
  SimResult all;
  SimResult halves[2];
};

// The offline references of one capacity point.
struct ReplayRefs {
  uint64_t capacity_blocks = 0;
  ReplayRow belady;
  ReplayRow infinite;
};

// Everything one trace produced.
struct ReplayTraceReport {
  std::string name;
  uint64_t requests = 0, block_refs = 0, unique_blocks = 0;
  std::vector<ReplayRow> rows;
  std::vector<ReplayRefs> refs;
};

struct ReplayPrintOptions {
  bool sweep = false;         // sweep table (with halves)
  bool sweep_codecs = false;  // codec column
  uint32_t sink_blocks = 1;
  uint64_t bytes_per_token = 0;  // fp16 bytes of one token in the sizing layout
};

// Prints the human-readable report of one trace.
void PrintReplayTable(const ReplayTraceReport& report, const ReplayPrintOptions& options);
// Prints every trace's rows as one JSON document.
void PrintReplayJson(const std::vector<ReplayTraceReport>& reports,
                     const ReplayPrintOptions& options);
// Returns the SVG sweep plot: one panel per trace, prefix hit rate (hot tier) against hot
// capacity in tokens and bytes, one line per policy (at the first cold capacity), Belady
// and infinite capacity dashed.
std::string ReplaySweepSvg(const std::vector<ReplayTraceReport>& reports,
                           const ReplayPrintOptions& options);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_REPLAY_REPORT_H_
