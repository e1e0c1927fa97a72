// A fast in-memory, block-level cache simulator for Mooncake traces (tools/trace.h).
// It models only which block ids are resident in a cache of `capacity_blocks` slots, so
// policies can be compared in milliseconds; `kvtier replay` drives the real TieredStore.
//
// Replay semantics (shared with tools/replay.h): for each request, in trace order,
//   1. every id is looked up; hits = ids resident, prefix hits = the leading run of
//      resident ids (the part of the prompt whose prefill is saved);
//   2. every id is then touched in request order: resident ones as a read (recency and
//      hit count updated), missing ones inserted (the engine recomputes and pushes them).
//      Blocks of the request being processed are not evicted while it is inserted.
//
// Definitions of the offline references:
//   infinite: unbounded capacity (every id after its first reference hits).
//   belady:   classic Belady/MIN over the sequence of block references: on overflow evict
//             the resident block (the new one included, i.e. bypass) whose next reference
//             is farthest; ties evict the deeper block first, which keeps every resident
//             block's prefix resident. Its hit count is an upper bound on the hits, hence
//             on the prefix hits, of any policy with the same capacity.
//
// Thread safety: Simulate keeps no shared state (thread-safe); the option and result
// structs are thread-compatible values.
#ifndef KVTIER_TOOLS_CACHE_SIM_H_
#define KVTIER_TOOLS_CACHE_SIM_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/trace.h"

namespace kvtier::tools {

enum class SimPolicy {
  kLru,        // global LRU, ignores prefix structure (children may outlive parents)
  kPrefixLru,  // LRU among leaves (a block with a resident child is never evicted)
  kLfu,        // fewest hits while resident among leaves, ties LRU
  kS3Fifo,     // S3-FIFO (10% small FIFO, main FIFO, ghost FIFO), ignores prefix structure
  kReuse,      // reuse_lru (storage/eviction_policy_reuse.h), leaves only
  kBelady,     // offline optimum (see above)
  kInfinite,   // unbounded capacity
};
const char* SimPolicyName(SimPolicy policy);
// INVALID_ARGUMENT naming the value for an unknown name.
absl::StatusOr<SimPolicy> ParseSimPolicy(std::string_view name);
// All policies, online ones first, then belady and infinite.
std::vector<SimPolicy> AllSimPolicies();

struct SimOptions {
  uint64_t capacity_blocks = 0;  // > 0 (ignored by kInfinite)
  // Only requests with index in [measure_begin, measure_end) are counted; the others still
  // run (warm-up before, cool-down after). measure_end 0 = the end of the trace.
  size_t measure_begin = 0;
  size_t measure_end = 0;
  // kReuse: how long a key's reference count is remembered after its last reference, in
  // multiples of capacity_blocks references (the store remembers keys through its cold
  // tier). 0 = forever; negative = only while resident (forgotten on eviction).
  double reuse_history_capacities = 0;
};

struct SimResult {
  uint64_t requests = 0;           // counted requests
  uint64_t requested_blocks = 0;   // block references in counted requests
  uint64_t hit_blocks = 0;         // ... resident at lookup
  uint64_t prefix_hit_blocks = 0;  // ... in the resident leading run of their request
  uint64_t evictions = 0;          // over the whole run

  double HitRate() const {
    return requested_blocks ? static_cast<double>(hit_blocks) / requested_blocks : 0;
  }
  double PrefixHitRate() const {
    return requested_blocks ? static_cast<double>(prefix_hit_blocks) / requested_blocks : 0;
  }
};

// Runs `policy` over `trace`. INVALID_ARGUMENT if capacity_blocks is 0 for a bounded
// policy or the measure range is empty. Deterministic.
absl::StatusOr<SimResult> Simulate(const Trace& trace, SimPolicy policy,
                                   const SimOptions& options);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_CACHE_SIM_H_
