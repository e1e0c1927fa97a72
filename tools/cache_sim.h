// A fast in-memory cache simulator for Mooncake traces (tools/trace.h), so policies can
// be compared in seconds; `kvtier replay` drives the real TieredStore.
//
// Replay semantics (shared with tools/replay.h): for each request, in trace order,
//   1. every id is looked up; hits = ids resident in the hot tier, prefix hits = the
//      leading run of hot ids (the part of the prompt whose prefill is saved without
//      touching the cold tier); the leading run resident in either tier is split into
//      blocks served from hot and from cold (prefill saved by loading them);
//   2. every id is then referenced in request order: resident ones are read, missing
//      ones inserted (the engine recomputes and pushes them).
//
// Engines:
//   store policies (lru, prefix_lru, lfu, reuse_lru, adaptive): tools/store_model.h, a
//     model of TieredStore (hot tier + cold tier of `cold_capacities` x the hot size)
//     that runs the store's own policy objects; it agrees with the real store exactly.
//   s3fifo: block-level S3-FIFO (Yang et al., SOSP'23), prefix-unaware, no cold tier.
//   infinite: unbounded capacity (every id after its first reference hits).
//   belady: classic Belady/MIN over the sequence of block references: on overflow evict
//     the resident block (the new one included, i.e. bypass) whose next reference is
//     farthest; ties evict the deeper block first, which keeps every resident block's
//     prefix resident. Its hit count is an upper bound on the hits, hence on the prefix
//     hits, of any policy with the same hot capacity.
//
// Thread safety: Simulate keeps no shared state (thread-safe); the option and result
// structs are thread-compatible values.
#ifndef KVTIER_TOOLS_CACHE_SIM_H_
#define KVTIER_TOOLS_CACHE_SIM_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/store_types.h"
#include "tools/trace.h"

namespace kvtier::tools {

enum class SimPolicy {
  kLru,        // the store's lru: global LRU (children may outlive parents), sinks kept
  kPrefixLru,  // the store's prefix_lru: LRU among hot leaves
  kLfu,        // the store's lfu: fewest hits since the key was indexed, among leaves
  kS3Fifo,     // S3-FIFO (10% small FIFO, main FIFO, ghost FIFO), ignores prefix structure
  kReuse,      // the store's reuse_lru (storage/eviction_policy_reuse.h)
  kAdaptive,   // the store's adaptive (storage/eviction_policy_adaptive.h)
  kBelady,     // offline optimum (see above)
  kInfinite,   // unbounded capacity
};
const char* SimPolicyName(SimPolicy policy);
// The store policy a simulator policy runs, or INVALID_ARGUMENT for s3fifo / belady /
// infinite, which exist only in the simulator.
absl::StatusOr<storage::EvictionPolicyKind> StorePolicyOf(SimPolicy policy);
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
  // Store policies: the cold tier holds max(1, cold_capacities x capacity_blocks) blocks
  // (the store remembers a key, and its hits, while it has a cold copy).
  double cold_capacities = 8.0;
  uint32_t sink_blocks = 1;  // namespace sink_blocks (store policies)
};

struct SimResult {
  uint64_t requests = 0;           // counted requests
  uint64_t requested_blocks = 0;   // block references in counted requests
  uint64_t hit_blocks = 0;         // ... resident at lookup
  uint64_t prefix_hit_blocks = 0;  // ... in the leading run of hot blocks of their request
  // The leading run of blocks resident in either tier, by the tier that serves them;
  // requested - leading_hot - leading_cold blocks are recomputed.
  uint64_t leading_hot_blocks = 0;
  uint64_t leading_cold_blocks = 0;
  uint64_t evictions = 0;          // hot evictions (demotions) over the whole run

  double HitRate() const {
    return requested_blocks ? static_cast<double>(hit_blocks) / requested_blocks : 0;
  }
  double PrefixHitRate() const {
    return requested_blocks ? static_cast<double>(prefix_hit_blocks) / requested_blocks : 0;
  }
  // Leading blocks served from either tier / blocks requested.
  double TieredPrefixHitRate() const {
    return requested_blocks
               ? static_cast<double>(leading_hot_blocks + leading_cold_blocks) / requested_blocks
               : 0;
  }
};

// Adds one request, given each block's tier at lookup, to `result`.
void CountRequest(std::span<const storage::Tier> tiers, SimResult* result);

// Runs `policy` over `trace`. INVALID_ARGUMENT if capacity_blocks is 0 for a bounded
// policy or the measure range is empty. Deterministic.
absl::StatusOr<SimResult> Simulate(const Trace& trace, SimPolicy policy,
                                   const SimOptions& options);

// Prefetch on Lookup in time (docs/prefetch.md). Each request's Lookup happens at its
// trace timestamp and its Gets `delay_ms` later; other requests' Lookups and Gets that
// fall in between run in between (events in time order; at equal times in trace order,
// a request's Lookup before its Gets). With `prefetch`, the Lookup promotes the cold
// blocks of its leading resident run, in order, as many as the prefetch reader finishes
// before the Gets (delay_ms x blocks_per_ms; 0 = unbounded), while the unread
// prefetched blocks stay within max_hot_fraction of the hot tier. Store policies only.
struct PrefetchSimOptions {
  SimOptions sim;
  double delay_ms = 0;
  bool prefetch = false;
  double blocks_per_ms = 0;       // prefetch read rate; 0 = unbounded
  double max_hot_fraction = 0.25;  // StoreOptions::prefetch_max_hot_fraction
  // The store's Get waits for a block a prefetch is reading rather than read it again,
  // then serves it hot: count the block the reader is on when the Gets come (the
  // delay_ms x blocks_per_ms-th, rounded up) as prefetched too. With an unbounded rate
  // or no delay it changes nothing.
  bool get_waits_for_inflight = false;
};

struct PrefetchSimResult {
  uint64_t requests = 0;
  // Blocks of the leading resident run at Lookup (tiered hits), and those of them that
  // are hot when the Gets come.
  uint64_t tiered_blocks = 0;
  uint64_t served_hot_blocks = 0;
  uint64_t hot_at_lookup_blocks = 0;  // ... hot already at Lookup
  uint64_t prefetched_blocks = 0;
  uint64_t prefetch_hits = 0;    // read by a Get while still unread
  uint64_t prefetch_wasted = 0;  // left hot unread
  double ServedHotShare() const {
    return tiered_blocks ? static_cast<double>(served_hot_blocks) / tiered_blocks : 0;
  }
  double WastedShare() const {
    return prefetched_blocks ? static_cast<double>(prefetch_wasted) / prefetched_blocks : 0;
  }
};

// INVALID_ARGUMENT for a policy that is not a store policy, capacity 0, a negative delay
// or rate, or max_hot_fraction outside (0, 1]. Deterministic.
absl::StatusOr<PrefetchSimResult> SimulatePrefetch(const Trace& trace, SimPolicy policy,
                                                   const PrefetchSimOptions& options);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_CACHE_SIM_H_
