// StoreModel: an in-memory model of TieredStore (storage/tiered_store.h) for the trace
// replay, fast enough to sweep policies and capacities in seconds. It drives the store's
// own eviction policy objects (storage::NewEvictionPolicy), so a policy is written once;
// what it models is the store around them, event for event as tiered_store.cc does it:
//
//  * hot tier: `hot_slots` equal slots; a Put or promotion that finds no free slot first
//    demotes the policy's victim (PickVictim over the eligible blocks: unpinned, not a
//    protected sink, and for a structure-aware policy a leaf of the hot prefix tree). The
//    victim is written to cold unless it has a current cold copy, then leaves hot.
//  * cold tier: `cold_capacity_bytes` of records (`cold_record_bytes`, block 0 may differ);
//    over capacity, the least recently used index leaf with a cold copy (no child entry,
//    resident or not) loses it; a parent left childless goes to the LRU end.
//  * index: an entry per key while it is hot, cold or has children (a "ghost"); ids are
//    allocated like the store's (free list, last freed first), so tie-breaks by id agree.
//    BlockInfo::hits counts Gets since the key entered the index; `tick` is +1 per Put or
//    Get, as in the store.
//  * requests as tools/replay.h runs them: Lookup every key, then per block in order a
//    Get if the lookup found it (hot, or cold: promoted), else (or if it vanished since)
//    a Put with the previous block as parent.
//
// Not modelled (the replay never exercises them): pins, leases, write-through, watermarks
// below 1 (demotion happens only when a slot is needed), concurrent readers, standalone
// entries, checksum failures. The agreement test (tests/tools/store_model_test.cc) runs
// the same trace through both and requires equal counts for every store policy.
//
// Thread-compatible.
#ifndef KVTIER_TOOLS_STORE_MODEL_H_
#define KVTIER_TOOLS_STORE_MODEL_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "storage/eviction_policy.h"
#include "storage/store_types.h"

namespace kvtier::tools {

struct StoreModelOptions {
  uint64_t hot_slots = 0;  // > 0
  uint64_t cold_capacity_bytes = 0;
  uint64_t cold_record_bytes = 1;   // bytes one cold record takes (block_index > 0)
  uint64_t cold_record_bytes0 = 1;  // ... for block_index 0
  uint32_t sink_blocks = 1;         // namespace sink_blocks
  storage::EvictionPolicyKind policy = storage::EvictionPolicyKind::kAdaptive;
};

class StoreModel {
 public:
  // Keys are dense ids 0..key_hashes.size()-1; key_hashes[k] is what the store would pass
  // as BlockInfo::key_hash for key k (storage::BlockKeyHash of its store key).
  StoreModel(const StoreModelOptions& options, std::vector<uint64_t> key_hashes);

  // One replay request over dense keys (root first; the parent of keys[i] is keys[i-1]).
  // Fills `tiers` with each key's tier at lookup (before the request changes anything).
  void Request(std::span<const uint32_t> keys, std::vector<storage::Tier>* tiers);
  // The same request in two halves, for a replay that puts time between them: Lookup
  // fills `tiers` and changes nothing; Access does the Gets and Puts (`tiers`: what the
  // Lookup found).
  void Lookup(std::span<const uint32_t> keys, std::vector<storage::Tier>* tiers) const;
  void Access(std::span<const uint32_t> keys, std::span<const storage::Tier> tiers);
  // Prefetch on Lookup (docs/prefetch.md): promotes cold-only `key` to hot as the store's
  // prefetch reader does (no hit counted; the block is no eligible victim until a Get
  // reads it). False when it is not cold-only or no slot could be made.
  bool Prefetch(uint32_t key);
  // Whether `key` is hot now.
  bool IsHot(uint32_t key) const {
    const uint32_t id = entry_of_key_[key];
    return id != kNone && entries_[id].hot;
  }
  uint64_t prefetch_unread() const { return unread_; }
  uint64_t prefetch_hits() const { return prefetch_hits_; }
  uint64_t prefetch_wasted() const { return prefetch_wasted_; }

  uint64_t hot_blocks() const { return hot_used_; }
  uint64_t demotions() const { return demotions_; }
  // Victims the policy could not supply (the store then scans for a fallback; the model
  // takes the least recent unpinned hot leaf, which may break ties differently).
  uint64_t fallback_victims() const { return fallbacks_; }
  size_t policy_memory_bytes() const { return policy_->MemoryBytes(); }
  const storage::EvictionPolicy& policy() const { return *policy_; }

 private:
  static constexpr uint32_t kNone = 0xffffffffu;
  struct Entry {
    uint32_t key = kNone;
    uint32_t parent = kNone;
    uint32_t children = 0;
    uint32_t hot_children = 0;
    uint32_t block_index = 0;
    uint32_t hits = 0;
    uint32_t cold_prev = kNone, cold_next = kNone;
    uint64_t recency = 0;
    bool hot = false, cold = false, eligible = false, in_cold_list = false, busy = false;
    bool unread = false;  // prefetched, not read by a Get yet
  };

  bool Get(uint32_t key);
  void Put(uint32_t key, uint32_t parent_key, uint32_t block_index);
  bool AllocSlot();
  bool DemoteOne();
  void EnforceColdCapacity();
  uint32_t FindOrCreate(uint32_t key);
  void SetParent(uint32_t id, uint32_t parent);
  void MaybeFree(uint32_t id);
  void Touch(uint32_t id);
  void UpdateEligibility(uint32_t id);
  void EnterHot(uint32_t id);
  void LeaveHot(uint32_t id);
  void EnterCold(uint32_t id);
  void LeaveCold(uint32_t id);
  void UpdateColdList(uint32_t id, bool at_head);
  void ColdUnlink(uint32_t id);
  void ColdAppend(uint32_t id, bool at_head);
  storage::BlockInfo Info(const Entry& e) const;
  uint64_t RecordBytes(const Entry& e) const {
    return e.block_index == 0 ? options_.cold_record_bytes0 : options_.cold_record_bytes;
  }

  StoreModelOptions options_;
  std::unique_ptr<storage::EvictionPolicy> policy_;
  std::vector<uint64_t> key_hashes_;
  std::vector<uint32_t> entry_of_key_;  // kNone when not in the index
  std::vector<Entry> entries_;
  std::vector<uint32_t> free_ids_;
  uint32_t cold_head_ = kNone, cold_tail_ = kNone;
  uint64_t cold_used_ = 0;
  uint64_t hot_used_ = 0;
  uint64_t tick_ = 0;
  uint64_t demotions_ = 0;
  uint64_t fallbacks_ = 0;
  uint64_t unread_ = 0;
  uint64_t prefetch_hits_ = 0;
  uint64_t prefetch_wasted_ = 0;
};

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_STORE_MODEL_H_
