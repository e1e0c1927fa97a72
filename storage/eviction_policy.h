// Eviction policies for the hot tier of TieredStore: which hot block to demote to the cold
// tier when the hot arena is over its high watermark (or a Put needs room).
//
// The store owns the prefix structure and tells the policy, per hot block, whether the
// block is currently *eligible*: unpinned, not a protected sink block (block_index <
// sink_blocks with a descendant in the hot tier), and, for a structure-aware policy
// (structure_aware() == true), a leaf of the hot prefix tree (no child resident in the hot
// tier). A policy only ranks; it never sees keys or payloads, only a hash of the key.
//
// Event order for one block id while it is hot:
//   OnInsert -> (OnAccess | OnScore | OnEligible)* -> OnRemove
// OnEligible(id, true/false) is only sent when eligibility changes; a block starts
// ineligible after OnInsert. Ids are reused after OnRemove (a later OnInsert starts fresh).
// PickVictim returns an eligible id (without removing it) or kInvalidBlock.
//
// To add a policy: add an EvictionPolicyKind value below and its name in
// eviction_policy.cc (kPolicies), then either derive from RankedEvictionPolicy (lowest
// rank is evicted first, ties by id) or implement EvictionPolicy directly, and return it
// from NewEvictionPolicy.
//
// Thread-compatible: the store calls a policy only while holding its index mutex.
#ifndef KVTIER_STORAGE_EVICTION_POLICY_H_
#define KVTIER_STORAGE_EVICTION_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace kvtier::storage {

// Eviction policies for the hot tier. Stable numbers.
enum class EvictionPolicyKind : uint8_t {
  kLru = 0,          // baseline: least recently used, ignores prefix structure
  kPrefixLru = 1,    // LRU among leaves, sink blocks protected
  kLfu = 2,          // least frequently used among leaves
  kHeavyHitter = 3,  // decayed worker-reported attention mass + hits (H2O per block)
  kReuseLru = 4,     // prefix LRU that favours blocks referenced before
                     // (eviction_policy_reuse.h)
  kAdaptive = 5,     // default: prefix LRU whose bias toward re-referenced blocks is
                     // learned online (eviction_policy_adaptive.h)
};

// Returns the policy's config name ("lru", "prefix_lru", "lfu", "heavy_hitter",
// "reuse_lru", "adaptive"), or "unknown" for a value outside the enum.
const char* EvictionPolicyName(EvictionPolicyKind kind);
// Returns every policy name in enum order (for --help and error messages).
std::span<const std::string_view> EvictionPolicyNames();
// Returns the kind named `name`. INVALID_ARGUMENT listing every valid name otherwise.
absl::StatusOr<EvictionPolicyKind> ParseEvictionPolicy(std::string_view name);

// Tuning of the ranked policies (part of StoreOptions).
struct EvictionPolicyOptions {
  // heavy_hitter: half-life of the decayed score, in ticks (one tick per block Put or
  // Get). Default: 65536.
  double heavy_hitter_half_life_ticks = 65536.0;
  // heavy_hitter: score added by one hit; worker attention mass is added as reported.
  // Default: 1.
  double heavy_hitter_hit_weight = 1.0;
};

// Dense id of an index entry (reused after the entry is removed).
using BlockId = uint32_t;
inline constexpr BlockId kInvalidBlock = 0xffffffffu;

// What the store knows about a block at the time of an event.
struct BlockInfo {
  uint32_t block_index = 0;  // position in its sequence; 0 holds the attention sinks
  uint32_t hits = 0;         // Get hits (any tier) since the key entered the index
  float attention = 0.0f;    // total worker-reported attention mass (ReportScores), undecayed
  uint64_t tick = 0;         // store-wide logical clock: +1 per block Put or Get
  uint32_t payload_bytes = 0;
  uint64_t key_hash = 0;     // BlockKeyHash(key): equal for equal keys, whatever the id
};

// Returns the hash the store passes as BlockInfo::key_hash: XXH3-64 of the key bytes
// (the namespace is not part of it). Stable across processes and runs.
uint64_t BlockKeyHash(std::string_view key);

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // Returns the policy's name (EvictionPolicyName of its kind).
  virtual const char* name() const = 0;
  // True: only leaves of the hot prefix tree are offered as eligible. False: every
  // unpinned hot block except protected sinks is (the lru baseline).
  virtual bool structure_aware() const = 0;

  // The block entered the hot tier (Put or promotion). It starts ineligible.
  virtual void OnInsert(BlockId id, const BlockInfo& info) = 0;
  // The block was read from the hot tier (Get / Pin); info.hits already counts it.
  virtual void OnAccess(BlockId id, const BlockInfo& info) = 0;
  // The worker reported `attention` more attention mass for the block.
  virtual void OnScore(BlockId id, float attention, const BlockInfo& info) = 0;
  // The block became (eligible = true) or stopped being (false) an eviction candidate.
  virtual void OnEligible(BlockId id, bool eligible) = 0;
  // The block left the hot tier (demoted, deleted or replaced). Forget it.
  virtual void OnRemove(BlockId id) = 0;

  // Returns the eligible block to demote next, or kInvalidBlock when none is eligible.
  // Does not remove it: the store calls OnRemove once the block has left the hot tier.
  virtual BlockId PickVictim() = 0;

  // Approximate heap bytes used by the policy's own state.
  virtual size_t MemoryBytes() const = 0;
};

// Returns a new policy of `kind`. Never null for the kinds declared above.
std::unique_ptr<EvictionPolicy> NewEvictionPolicy(EvictionPolicyKind kind,
                                                  const EvictionPolicyOptions& options = {});

// Base for policies that order blocks by a rank computed from events: the eligible block
// with the lowest rank is the victim (ties: lower secondary, then lower id). A lazy
// min-heap keeps PickVictim O(log n) amortized. Thread-compatible.
class RankedEvictionPolicy : public EvictionPolicy {
 public:
  struct Rank {
    double primary = 0;
    uint64_t secondary = 0;
    friend bool operator==(const Rank&, const Rank&) = default;
  };

  void OnInsert(BlockId id, const BlockInfo& info) override;
  void OnAccess(BlockId id, const BlockInfo& info) override;
  void OnScore(BlockId id, float attention, const BlockInfo& info) override;
  void OnEligible(BlockId id, bool eligible) override;
  void OnRemove(BlockId id) override;
  BlockId PickVictim() override;
  size_t MemoryBytes() const override;

 protected:
  // Per-block state a subclass may use; `rank` is what the heap orders by.
  struct State {
    Rank rank;
    double mass = 0;         // heavy_hitter: decayed score at `mass_tick`
    uint64_t mass_tick = 0;
    bool eligible = false;
  };
  // Recompute state->rank for an event. `attention` is the newly reported mass (0 for
  // insert/access); `is_access` is true for OnAccess, `is_insert` for OnInsert.
  virtual void UpdateRank(State* state, const BlockInfo& info, double attention,
                          bool is_insert, bool is_access) = 0;

 private:
  struct HeapItem {
    Rank rank;
    BlockId id;
  };
  static bool After(const HeapItem& a, const HeapItem& b);  // heap comparator (min-heap)
  void Push(BlockId id, const State& state);
  void MaybeCompact();

  absl::flat_hash_map<BlockId, State> states_;
  std::vector<HeapItem> heap_;  // may hold stale items; validated on pop
  size_t eligible_count_ = 0;
};

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_EVICTION_POLICY_H_
