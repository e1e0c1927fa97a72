#include "tools/cache_sim.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <limits>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "storage/eviction_policy_adaptive.h"
#include "storage/eviction_policy_reuse.h"
#include "tools/replay.h"
#include "tools/store_model.h"

namespace kvtier::tools {
namespace {

constexpr int32_t kNoParent = -1;

// The trace with ids renumbered 0..unique-1 and each block's parent.
struct DenseTrace {
  std::vector<std::vector<uint32_t>> requests;
  std::vector<int32_t> parent;
  std::vector<uint32_t> depth;  // position in its requests (fixed by prefix chaining)
  std::vector<uint64_t> key_hash;  // BlockKeyHash of the replay's store key
};

DenseTrace Densify(const Trace& trace) {
  DenseTrace d;
  absl::flat_hash_map<uint64_t, uint32_t> ids;
  ids.reserve(trace.unique_blocks);
  d.requests.reserve(trace.requests.size());
  for (const TraceRequest& r : trace.requests) {
    std::vector<uint32_t> out;
    out.reserve(r.hash_ids.size());
    for (size_t i = 0; i < r.hash_ids.size(); ++i) {
      auto [it, inserted] = ids.try_emplace(r.hash_ids[i], d.parent.size());
      if (inserted) {
        d.parent.push_back(i == 0 ? kNoParent : static_cast<int32_t>(out.back()));
        d.depth.push_back(static_cast<uint32_t>(i));
        d.key_hash.push_back(storage::BlockKeyHash(TraceKey(r.hash_ids[i])));
      }
      out.push_back(it->second);
    }
    d.requests.push_back(std::move(out));
  }
  return d;
}

struct Counter {
  size_t begin, end;
  SimResult* result;
  std::vector<storage::Tier> tiers;
  void Count(size_t req, std::span<const storage::Tier> t) {
    if (req >= begin && req < end) CountRequest(t, result);
  }
  // Block-level engines: resident = hot, no cold tier.
  void Count(size_t req, const std::vector<uint32_t>& ids,
             const std::vector<uint8_t>& resident) {
    if (req < begin || req >= end) return;
    tiers.clear();
    for (uint32_t id : ids) {
      tiers.push_back(resident[id] ? storage::Tier::kHot : storage::Tier::kNone);
    }
    CountRequest(tiers, result);
  }
};

// S3-FIFO (Yang et al., SOSP'23): a small FIFO taking 10% of the slots, a main FIFO and a
// ghost FIFO of recently evicted ids (as many as the main FIFO holds). Prefix-unaware.
class S3FifoCache {
 public:
  S3FifoCache(const DenseTrace& d, uint64_t capacity)
      : capacity_(capacity), small_cap_(std::max<uint64_t>(1, capacity / 10)),
        resident_(d.parent.size(), 0), freq_(d.parent.size(), 0),
        ghost_stamp_(d.parent.size(), 0) {}

  const std::vector<uint8_t>& resident() const { return resident_; }
  uint64_t evictions() const { return evictions_; }

  void Request(const std::vector<uint32_t>& ids) {
    for (uint32_t id : ids) {
      if (resident_[id]) {
        freq_[id] = std::min<uint8_t>(freq_[id] + 1, 3);
        continue;
      }
      while (small_.size() + main_.size() >= capacity_) Evict();
      resident_[id] = 1;
      freq_[id] = 0;
      if (InGhost(id)) {
        main_.push_back(id);
      } else {
        small_.push_back(id);
      }
    }
  }

 private:
  bool InGhost(uint32_t id) const {
    return ghost_stamp_[id] != 0 && ghost_stamp_[id] > ghost_popped_;
  }
  void Evict() {
    if (small_.size() >= small_cap_ || main_.empty()) {
      EvictSmall();
    } else {
      EvictMain();
    }
  }
  void EvictSmall() {
    while (!small_.empty()) {
      uint32_t t = small_.front();
      small_.pop_front();
      if (freq_[t] > 0) {  // accessed again while in the small queue: promote
        freq_[t] = 0;
        main_.push_back(t);
        if (main_.size() > capacity_ - std::min(capacity_, small_cap_)) EvictMain();
      } else {
        resident_[t] = 0;
        ++evictions_;
        ghost_.push_back(t);
        ghost_stamp_[t] = ++ghost_pushed_;
        uint64_t ghost_cap = capacity_ - std::min(capacity_ - 1, small_cap_);
        while (ghost_.size() > ghost_cap) {
          ghost_.pop_front();
          ++ghost_popped_;
        }
        return;
      }
    }
  }
  void EvictMain() {
    while (!main_.empty()) {
      uint32_t t = main_.front();
      main_.pop_front();
      if (freq_[t] > 0) {
        freq_[t]--;
        main_.push_back(t);
      } else {
        resident_[t] = 0;
        ++evictions_;
        return;
      }
    }
  }

  uint64_t capacity_;
  uint64_t small_cap_;
  std::vector<uint8_t> resident_;
  std::vector<uint8_t> freq_;
  std::vector<uint64_t> ghost_stamp_;  // push number when last put in the ghost FIFO
  uint64_t ghost_pushed_ = 0;
  uint64_t ghost_popped_ = 0;
  std::deque<uint32_t> small_, main_, ghost_;
  uint64_t evictions_ = 0;
};

SimResult RunBelady(const DenseTrace& d, uint64_t capacity, Counter counter) {
  SimResult result;
  counter.result = &result;
  constexpr uint64_t kInf = std::numeric_limits<uint64_t>::max();
  // next_use[r] for reference number r (flattened order).
  std::vector<uint64_t> next_use;
  size_t refs = 0;
  for (const auto& r : d.requests) refs += r.size();
  next_use.resize(refs);
  {
    std::vector<uint64_t> last(d.parent.size(), kInf);
    size_t r = refs;
    for (size_t q = d.requests.size(); q-- > 0;) {
      for (size_t i = d.requests[q].size(); i-- > 0;) {
        uint32_t id = d.requests[q][i];
        next_use[--r] = last[id];
        last[id] = r;
      }
    }
  }
  using Key = std::pair<uint64_t, uint32_t>;  // (next use, depth): evict the largest
  std::set<std::pair<Key, uint32_t>> order;
  std::vector<Key> key(d.parent.size());
  std::vector<uint8_t> resident(d.parent.size(), 0);
  size_t r = 0;
  for (size_t q = 0; q < d.requests.size(); ++q) {
    counter.Count(q, d.requests[q], resident);
    for (uint32_t id : d.requests[q]) {
      uint64_t nu = next_use[r++];
      if (resident[id]) order.erase({key[id], id});
      resident[id] = 1;
      key[id] = Key(nu, d.depth[id]);
      order.insert({key[id], id});
      if (order.size() > capacity) {
        auto last = std::prev(order.end());
        resident[last->second] = 0;
        order.erase(last);
        result.evictions++;
      }
    }
  }
  return result;
}

}  // namespace

const char* SimPolicyName(SimPolicy policy) {
  switch (policy) {
    case SimPolicy::kLru: return "lru";
    case SimPolicy::kPrefixLru: return "prefix_lru";
    case SimPolicy::kLfu: return "lfu";
    case SimPolicy::kS3Fifo: return "s3fifo";
    case SimPolicy::kReuse: return storage::kReusePolicyName;
    case SimPolicy::kAdaptive: return storage::kAdaptivePolicyName;
    case SimPolicy::kBelady: return "belady";
    case SimPolicy::kInfinite: return "infinite";
  }
  return "unknown";
}

std::vector<SimPolicy> AllSimPolicies() {
  return {SimPolicy::kLru,      SimPolicy::kPrefixLru, SimPolicy::kLfu,
          SimPolicy::kS3Fifo,   SimPolicy::kReuse,     SimPolicy::kAdaptive,
          SimPolicy::kBelady,   SimPolicy::kInfinite};
}

absl::StatusOr<SimPolicy> ParseSimPolicy(std::string_view name) {
  for (SimPolicy p : AllSimPolicies()) {
    if (name == SimPolicyName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown policy: ", Sv(name),
                   " (want lru, prefix_lru, lfu, s3fifo, ", storage::kReusePolicyName, ", ",
                   storage::kAdaptivePolicyName, ", belady, infinite)"));
}

absl::StatusOr<storage::EvictionPolicyKind> StorePolicyOf(SimPolicy policy) {
  switch (policy) {
    case SimPolicy::kLru: return storage::EvictionPolicyKind::kLru;
    case SimPolicy::kPrefixLru: return storage::EvictionPolicyKind::kPrefixLru;
    case SimPolicy::kLfu: return storage::EvictionPolicyKind::kLfu;
    case SimPolicy::kReuse: return storage::EvictionPolicyKind::kReuseLru;
    case SimPolicy::kAdaptive: return storage::EvictionPolicyKind::kAdaptive;
    default: break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(SimPolicyName(policy), " is not a store policy"));
}

void CountRequest(std::span<const storage::Tier> tiers, SimResult* r) {
  r->requests++;
  r->requested_blocks += tiers.size();
  bool hot_prefix = true;
  bool any_prefix = true;
  for (storage::Tier t : tiers) {
    if (t == storage::Tier::kNone) any_prefix = false;
    if (t == storage::Tier::kHot) {
      r->hit_blocks++;
      if (hot_prefix) r->prefix_hit_blocks++;
      if (any_prefix) r->leading_hot_blocks++;
    } else {
      hot_prefix = false;
      if (any_prefix) r->leading_cold_blocks++;
    }
  }
}

absl::StatusOr<SimResult> Simulate(const Trace& trace, SimPolicy policy,
                                   const SimOptions& options) {
  size_t end = options.measure_end == 0 ? trace.requests.size()
                                        : std::min(options.measure_end, trace.requests.size());
  if (options.measure_begin >= end) {
    return absl::InvalidArgumentError("measure range: empty");
  }
  if (policy != SimPolicy::kInfinite && options.capacity_blocks == 0) {
    return absl::InvalidArgumentError("capacity_blocks: must be > 0");
  }
  DenseTrace d = Densify(trace);
  SimResult result;
  Counter counter{options.measure_begin, end, &result, {}};
  switch (policy) {
    case SimPolicy::kInfinite: {
      std::vector<uint8_t> resident(d.parent.size(), 0);
      for (size_t q = 0; q < d.requests.size(); ++q) {
        counter.Count(q, d.requests[q], resident);
        for (uint32_t id : d.requests[q]) resident[id] = 1;
      }
      return result;
    }
    case SimPolicy::kBelady:
      return RunBelady(d, options.capacity_blocks, counter);
    case SimPolicy::kS3Fifo: {
      S3FifoCache cache(d, options.capacity_blocks);
      for (size_t q = 0; q < d.requests.size(); ++q) {
        counter.Count(q, d.requests[q], cache.resident());
        cache.Request(d.requests[q]);
      }
      result.evictions = cache.evictions();
      return result;
    }
    default: {
      ASSIGN_OR_RETURN(storage::EvictionPolicyKind kind, StorePolicyOf(policy));
      StoreModelOptions mo;
      mo.hot_slots = options.capacity_blocks;
      mo.cold_capacity_bytes = std::max<uint64_t>(
          1, static_cast<uint64_t>(options.cold_capacities *
                                   static_cast<double>(options.capacity_blocks)));
      mo.sink_blocks = options.sink_blocks;
      mo.policy = kind;
      StoreModel model(mo, d.key_hash);
      std::vector<storage::Tier> tiers;
      for (size_t q = 0; q < d.requests.size(); ++q) {
        model.Request(d.requests[q], &tiers);
        counter.Count(q, tiers);
      }
      result.evictions = model.demotions();
      return result;
    }
  }
}

absl::StatusOr<PrefetchSimResult> SimulatePrefetch(const Trace& trace, SimPolicy policy,
                                                   const PrefetchSimOptions& options) {
  ASSIGN_OR_RETURN(storage::EvictionPolicyKind kind, StorePolicyOf(policy));
  const SimOptions& so = options.sim;
  if (so.capacity_blocks == 0) return absl::InvalidArgumentError("capacity_blocks: must be > 0");
  if (options.delay_ms < 0 || options.blocks_per_ms < 0) {
    return absl::InvalidArgumentError("delay_ms and blocks_per_ms must be >= 0");
  }
  if (!(options.max_hot_fraction > 0 && options.max_hot_fraction <= 1)) {
    return absl::InvalidArgumentError("max_hot_fraction must be in (0, 1]");
  }
  const size_t end =
      so.measure_end == 0 ? trace.requests.size() : std::min(so.measure_end, trace.requests.size());
  DenseTrace d = Densify(trace);
  StoreModelOptions mo;
  mo.hot_slots = so.capacity_blocks;
  mo.cold_capacity_bytes = std::max<uint64_t>(
      1, static_cast<uint64_t>(so.cold_capacities * static_cast<double>(so.capacity_blocks)));
  mo.sink_blocks = so.sink_blocks;
  mo.policy = kind;
  StoreModel model(mo, d.key_hash);
  const auto max_unread = static_cast<uint64_t>(options.max_hot_fraction *
                                                static_cast<double>(so.capacity_blocks));
  // Blocks the reader finishes before the Gets: none without time, else all (unbounded
  // rate) or what the rate allows.
  uint64_t per_request = std::numeric_limits<uint64_t>::max();
  if (options.delay_ms == 0) {
    per_request = 0;
  } else if (options.blocks_per_ms > 0) {
    const double done = options.delay_ms * options.blocks_per_ms;
    per_request = static_cast<uint64_t>(options.get_waits_for_inflight ? std::ceil(done) : done);
  }
  // Events: (time in us, request, 0 = Lookup / 1 = Gets), in time order.
  struct Event {
    int64_t at_us;
    uint32_t request;
    uint8_t kind;
  };
  std::vector<Event> events;
  events.reserve(2 * d.requests.size());
  const auto delay_us = static_cast<int64_t>(options.delay_ms * 1000);
  for (size_t q = 0; q < d.requests.size(); ++q) {
    const auto t = static_cast<int64_t>(trace.requests[q].timestamp_ms) * 1000;
    events.push_back({t, static_cast<uint32_t>(q), 0});
    events.push_back({t + delay_us, static_cast<uint32_t>(q), 1});
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    if (a.at_us != b.at_us) return a.at_us < b.at_us;
    if (a.request != b.request) return a.request < b.request;
    return a.kind < b.kind;
  });
  std::vector<std::vector<storage::Tier>> looked(d.requests.size());
  PrefetchSimResult r;
  uint64_t hits0 = 0, wasted0 = 0;
  bool measuring = false;
  for (const Event& ev : events) {
    const std::vector<uint32_t>& keys = d.requests[ev.request];
    const bool counted = ev.request >= so.measure_begin && ev.request < end;
    if (counted && !measuring) {
      measuring = true;
      hits0 = model.prefetch_hits();
      wasted0 = model.prefetch_wasted();
    }
    std::vector<storage::Tier>& tiers = looked[ev.request];
    if (ev.kind == 0) {
      model.Lookup(keys, &tiers);
      if (!options.prefetch) continue;
      uint64_t budget = per_request;
      for (size_t i = 0; i < keys.size() && budget > 0; ++i) {
        if (tiers[i] == storage::Tier::kNone) break;  // the leading resident run only
        if (tiers[i] != storage::Tier::kCold) continue;
        if (model.prefetch_unread() >= max_unread) break;
        if (model.Prefetch(keys[i]) && counted) r.prefetched_blocks++;
        --budget;
      }
      continue;
    }
    if (counted) {
      r.requests++;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (tiers[i] == storage::Tier::kNone) break;
        r.tiered_blocks++;
        if (tiers[i] == storage::Tier::kHot) r.hot_at_lookup_blocks++;
        if (model.IsHot(keys[i])) r.served_hot_blocks++;
      }
    }
    model.Access(keys, tiers);
    std::vector<storage::Tier>().swap(tiers);
  }
  r.prefetch_hits = model.prefetch_hits() - hits0;
  r.prefetch_wasted = model.prefetch_wasted() - wasted0;
  return r;
}

}  // namespace kvtier::tools
