// Mooncake request traces: one JSON object per line, e.g.
//   {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]}
// `hash_ids` are prefix-chained ids of 512-token blocks: two requests share an id only if
// they share every token up to the end of that block, so an id always has the same
// parent (the id before it). Unknown keys are ignored; blank lines are skipped.
// Every function is thread-safe (no shared state).
#ifndef KVTIER_TOOLS_TRACE_H_
#define KVTIER_TOOLS_TRACE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvtier::tools {

struct TraceRequest {
  uint64_t timestamp_ms = 0;
  uint64_t input_length = 0;   // prompt tokens
  uint64_t output_length = 0;  // generated tokens
  std::vector<uint64_t> hash_ids;  // block ids, root first
};

// A parsed trace. Plain value; thread-compatible.
struct Trace {
  std::vector<TraceRequest> requests;
  uint64_t total_blocks = 0;   // sum of hash_ids sizes (block references)
  uint64_t unique_blocks = 0;  // distinct ids

  // Returns the requests [begin, end) as a new trace (counts recomputed). Clamps to size.
  Trace Slice(size_t begin, size_t end) const;
};

// Parses one line (a JSON object). INVALID_ARGUMENT naming the field for malformed JSON,
// a missing or non-array `hash_ids`, a negative / fractional / non-numeric id or length,
// or an id repeated inside one request.
absl::StatusOr<TraceRequest> ParseTraceLine(std::string_view line);

// Parses a whole trace; errors are prefixed with "line N: " (1-based). Also returns
// INVALID_ARGUMENT if an id appears under two different parents (the trace is not
// prefix-chained), naming the id and both lines' request numbers, or if no request is
// found.
absl::StatusOr<Trace> ParseTrace(std::string_view text);

// What the trace says about reuse, the signal reuse_lru (eviction_policy_reuse.h) bets on.
struct ReuseStats {
  uint64_t unique_blocks = 0;
  double referenced_once = 0;          // fraction of distinct blocks referenced exactly once
  double reused_after_first = 0;       // P(a block is referenced again | its 1st reference)
  double reused_after_repeat = 0;      // P(referenced again | its 2nd or later reference)
  uint64_t median_first_gap = 0;       // requests between 1st and 2nd reference (median)
  uint64_t median_repeat_gap = 0;      // requests between later consecutive references
};

// Computes ReuseStats over the whole trace (a block referenced twice in one request counts
// once; ParseTrace rejects that anyway).
ReuseStats ComputeReuseStats(const Trace& trace);

// Reads and parses a trace file. NOT_FOUND if it cannot be opened; otherwise as
// ParseTrace with the path prefixed to errors.
absl::StatusOr<Trace> ReadTrace(const std::string& path);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_TRACE_H_
