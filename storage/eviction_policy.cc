#include "storage/eviction_policy.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include <xxhash.h>

#include "absl/strings/str_cat.h"
#include "storage/eviction_policy_adaptive.h"
#include "storage/eviction_policy_reuse.h"

namespace kvtier::storage {
namespace {

// Indexed by EvictionPolicyKind.
constexpr std::array<std::string_view, 6> kPolicyNames = {
    "lru", "prefix_lru", "lfu", "heavy_hitter", "reuse_lru", "adaptive"};

}  // namespace

const char* EvictionPolicyName(EvictionPolicyKind kind) {
  const size_t i = static_cast<size_t>(kind);
  return i < kPolicyNames.size() ? kPolicyNames[i].data() : "unknown";
}

std::span<const std::string_view> EvictionPolicyNames() { return kPolicyNames; }

absl::StatusOr<EvictionPolicyKind> ParseEvictionPolicy(std::string_view name) {
  for (size_t i = 0; i < kPolicyNames.size(); ++i) {
    if (name == kPolicyNames[i]) return static_cast<EvictionPolicyKind>(i);
  }
  std::string valid;
  for (std::string_view n : kPolicyNames) {
    if (!valid.empty()) valid += ", ";
    valid += n;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("policy must be one of ", valid, "; got '", std::string(name), "'"));
}

uint64_t BlockKeyHash(std::string_view key) { return XXH3_64bits(key.data(), key.size()); }

bool RankedEvictionPolicy::After(const HeapItem& a, const HeapItem& b) {
  // std::*_heap builds a max-heap on "less"; returning "a after b" yields a min-heap.
  if (a.rank.primary != b.rank.primary) return a.rank.primary > b.rank.primary;
  if (a.rank.secondary != b.rank.secondary) return a.rank.secondary > b.rank.secondary;
  return a.id > b.id;
}

void RankedEvictionPolicy::Push(BlockId id, const State& state) {
  heap_.push_back(HeapItem{state.rank, id});
  std::push_heap(heap_.begin(), heap_.end(), After);
  MaybeCompact();
}

void RankedEvictionPolicy::MaybeCompact() {
  // Stale items (re-ranked or no longer eligible) pile up; rebuild once they dominate so
  // memory stays O(eligible blocks).
  if (heap_.size() <= 2 * eligible_count_ + 64) return;
  heap_.clear();
  for (const auto& [id, state] : states_) {
    if (state.eligible) heap_.push_back(HeapItem{state.rank, id});
  }
  std::make_heap(heap_.begin(), heap_.end(), After);
}

void RankedEvictionPolicy::OnInsert(BlockId id, const BlockInfo& info) {
  State& state = states_[id];
  if (state.eligible) --eligible_count_;
  state = State{};
  UpdateRank(&state, info, 0.0, /*is_insert=*/true, /*is_access=*/false);
}

void RankedEvictionPolicy::OnAccess(BlockId id, const BlockInfo& info) {
  auto it = states_.find(id);
  if (it == states_.end()) return;
  UpdateRank(&it->second, info, 0.0, false, true);
  if (it->second.eligible) Push(id, it->second);
}

void RankedEvictionPolicy::OnScore(BlockId id, float attention, const BlockInfo& info) {
  auto it = states_.find(id);
  if (it == states_.end()) return;
  const Rank before = it->second.rank;
  UpdateRank(&it->second, info, attention, false, false);
  if (it->second.eligible && !(before == it->second.rank)) Push(id, it->second);
}

void RankedEvictionPolicy::OnEligible(BlockId id, bool eligible) {
  auto it = states_.find(id);
  if (it == states_.end() || it->second.eligible == eligible) return;
  it->second.eligible = eligible;
  if (eligible) {
    ++eligible_count_;
    Push(id, it->second);
  } else {
    --eligible_count_;
  }
}

void RankedEvictionPolicy::OnRemove(BlockId id) {
  auto it = states_.find(id);
  if (it == states_.end()) return;
  if (it->second.eligible) --eligible_count_;
  states_.erase(it);
}

BlockId RankedEvictionPolicy::PickVictim() {
  while (!heap_.empty()) {
    const HeapItem& top = heap_.front();
    auto it = states_.find(top.id);
    if (it != states_.end() && it->second.eligible && it->second.rank == top.rank) {
      return top.id;
    }
    std::pop_heap(heap_.begin(), heap_.end(), After);
    heap_.pop_back();
  }
  return kInvalidBlock;
}

size_t RankedEvictionPolicy::MemoryBytes() const {
  return states_.capacity() * (sizeof(std::pair<BlockId, State>) + 1) +
         heap_.capacity() * sizeof(HeapItem);
}

namespace {

// lru / prefix_lru: least recently used first.
class LruPolicy final : public RankedEvictionPolicy {
 public:
  explicit LruPolicy(bool structure_aware) : structure_aware_(structure_aware) {}
  const char* name() const override {
    return EvictionPolicyName(structure_aware_ ? EvictionPolicyKind::kPrefixLru
                                               : EvictionPolicyKind::kLru);
  }
  bool structure_aware() const override { return structure_aware_; }

 protected:
  void UpdateRank(State* state, const BlockInfo& info, double, bool is_insert,
                  bool is_access) override {
    if (is_insert || is_access) state->rank = Rank{static_cast<double>(info.tick), 0};
  }

 private:
  const bool structure_aware_;
};

// lfu: fewest hits first; ties broken by recency.
class LfuPolicy final : public RankedEvictionPolicy {
 public:
  const char* name() const override { return EvictionPolicyName(EvictionPolicyKind::kLfu); }
  bool structure_aware() const override { return true; }

 protected:
  void UpdateRank(State* state, const BlockInfo& info, double, bool is_insert,
                  bool is_access) override {
    if (is_insert || is_access) state->rank = Rank{static_cast<double>(info.hits), info.tick};
  }
};

// heavy_hitter (H2O at block granularity): score = exponentially decayed sum of hits
// (hit_weight each) and worker-reported attention mass. Comparing decayed scores at any
// common time t is the same as comparing log2(mass) + tick / half_life, which does not
// change between events, so the rank stays valid in the heap.
class HeavyHitterPolicy final : public RankedEvictionPolicy {
 public:
  explicit HeavyHitterPolicy(const EvictionPolicyOptions& options)
      : half_life_(std::max(1.0, options.heavy_hitter_half_life_ticks)),
        hit_weight_(options.heavy_hitter_hit_weight) {}
  const char* name() const override { return EvictionPolicyName(EvictionPolicyKind::kHeavyHitter); }
  bool structure_aware() const override { return true; }

 protected:
  void UpdateRank(State* state, const BlockInfo& info, double attention, bool is_insert,
                  bool is_access) override {
    if (is_insert) {
      // Mass accumulated while the block was cold (reports, hits) carries over undecayed.
      state->mass = info.attention + hit_weight_ * (1.0 + info.hits);
      state->mass_tick = info.tick;
    } else {
      const double age = static_cast<double>(info.tick - std::min(info.tick, state->mass_tick));
      state->mass =
          state->mass * std::exp2(-age / half_life_) + attention + (is_access ? hit_weight_ : 0.0);
      state->mass_tick = std::max(state->mass_tick, info.tick);
    }
    const double log_mass = std::log2(std::max(state->mass, 1e-30));
    state->rank =
        Rank{log_mass + static_cast<double>(state->mass_tick) / half_life_, state->mass_tick};
  }

 private:
  const double half_life_;
  const double hit_weight_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewEvictionPolicy(EvictionPolicyKind kind,
                                                  const EvictionPolicyOptions& options) {
  switch (kind) {
    case EvictionPolicyKind::kLru:
      return std::make_unique<LruPolicy>(false);
    case EvictionPolicyKind::kPrefixLru:
      return std::make_unique<LruPolicy>(true);
    case EvictionPolicyKind::kLfu:
      return std::make_unique<LfuPolicy>();
    case EvictionPolicyKind::kHeavyHitter:
      return std::make_unique<HeavyHitterPolicy>(options);
    case EvictionPolicyKind::kReuseLru:
      return std::make_unique<ReuseLruPolicy>();
    case EvictionPolicyKind::kAdaptive:
      return std::make_unique<AdaptivePolicy>();
  }
  return std::make_unique<LruPolicy>(true);
}

}  // namespace kvtier::storage
