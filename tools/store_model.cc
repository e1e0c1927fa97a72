#include "tools/store_model.h"

#include <utility>

#include "common/logging.h"

namespace kvtier::tools {

using storage::BlockInfo;
using storage::kInvalidBlock;
using storage::Tier;

StoreModel::StoreModel(const StoreModelOptions& options, std::vector<uint64_t> key_hashes)
    : options_(options),
      policy_(storage::NewEvictionPolicy(options.policy)),
      key_hashes_(std::move(key_hashes)),
      entry_of_key_(key_hashes_.size(), kNone) {}

void StoreModel::Request(std::span<const uint32_t> keys, std::vector<Tier>* tiers) {
  Lookup(keys, tiers);
  Access(keys, *tiers);
}

void StoreModel::Lookup(std::span<const uint32_t> keys, std::vector<Tier>* tiers) const {
  tiers->clear();
  for (uint32_t key : keys) {
    const uint32_t id = entry_of_key_[key];
    Tier t = Tier::kNone;
    if (id != kNone) t = entries_[id].hot ? Tier::kHot : entries_[id].cold ? Tier::kCold : t;
    tiers->push_back(t);
  }
}

void StoreModel::Access(std::span<const uint32_t> keys, std::span<const Tier> tiers) {
  for (size_t i = 0; i < keys.size(); ++i) {
    // A block that left both tiers since the lookup is simply re-put, as the replay does.
    if (tiers[i] != Tier::kNone && Get(keys[i])) continue;
    Put(keys[i], i == 0 ? kNone : keys[i - 1], static_cast<uint32_t>(i));
  }
}

bool StoreModel::Prefetch(uint32_t key) {
  uint32_t id = entry_of_key_[key];
  if (id == kNone || entries_[id].hot || !entries_[id].cold) return false;
  const bool slot = AllocSlot();
  id = entry_of_key_[key];
  if (id == kNone || entries_[id].hot || !entries_[id].cold) {
    if (slot) --hot_used_;
    return false;
  }
  if (!slot) return false;
  entries_[id].unread = true;  // before EnterHot: never an eligible victim
  ++unread_;
  Touch(id);
  EnterHot(id);
  return true;
}

BlockInfo StoreModel::Info(const Entry& e) const {
  BlockInfo info;
  info.block_index = e.block_index;
  info.hits = e.hits;
  info.tick = tick_;
  info.key_hash = key_hashes_[e.key];
  return info;
}

bool StoreModel::Get(uint32_t key) {
  uint32_t id = entry_of_key_[key];
  if (id == kNone || !(entries_[id].hot || entries_[id].cold)) return false;
  if (entries_[id].hot) {
    if (entries_[id].unread) {
      entries_[id].unread = false;
      --unread_;
      ++prefetch_hits_;
      UpdateEligibility(id);
    }
    entries_[id].hits++;
    Touch(id);
    policy_->OnAccess(id, Info(entries_[id]));
    return true;
  }
  // Promotion: room first (which may demote, and the demotion may delete cold records).
  const bool slot = AllocSlot();
  id = entry_of_key_[key];
  if (id == kNone || !(entries_[id].hot || entries_[id].cold)) {
    if (slot) --hot_used_;
    return false;
  }
  entries_[id].hits++;
  Touch(id);
  if (!slot) return true;  // served from a heap copy, not promoted
  EnterHot(id);
  policy_->OnAccess(id, Info(entries_[id]));
  return true;
}

void StoreModel::Put(uint32_t key, uint32_t parent_key, uint32_t block_index) {
  const bool slot = AllocSlot();
  const uint32_t id = FindOrCreate(key);
  if (entries_[id].hot) {
    LeaveHot(id);  // a re-put of the same bytes keeps the cold copy
  } else if (entries_[id].cold && slot) {
    LeaveCold(id);  // cannot tell whether the cold copy matches: dropped
  }
  entries_[id].block_index = block_index;
  const uint32_t parent = parent_key == kNone ? kNone : FindOrCreate(parent_key);
  SetParent(id, parent);
  if (!slot) EnterCold(id);  // no hot room: written to cold directly
  Touch(id);
  if (slot) EnterHot(id);
  EnforceColdCapacity();
}

bool StoreModel::AllocSlot() {
  while (hot_used_ >= options_.hot_slots) {
    if (!DemoteOne()) return false;
  }
  ++hot_used_;
  return true;
}

bool StoreModel::DemoteOne() {
  uint32_t id = policy_->PickVictim();
  if (id == kInvalidBlock) {
    // The store's fallback: least recent unpinned hot leaf, then any unpinned hot block.
    id = kNone;
    bool best_leaf = false;
    for (uint32_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      if (!e.hot || e.busy) continue;
      const bool leaf = e.hot_children == 0;
      if (id == kNone || (leaf && !best_leaf) ||
          (leaf == best_leaf && e.recency < entries_[id].recency)) {
        id = i;
        best_leaf = leaf;
      }
    }
    if (id == kNone) return false;
    ++fallbacks_;
  }
  entries_[id].busy = true;
  UpdateEligibility(id);
  entries_[id].busy = false;
  if (!entries_[id].cold) EnterCold(id);
  LeaveHot(id);
  ++demotions_;
  EnforceColdCapacity();
  return true;
}

void StoreModel::EnforceColdCapacity() {
  while (cold_used_ > options_.cold_capacity_bytes && cold_head_ != kNone) {
    const uint32_t id = cold_head_;
    if (entries_[id].hot) {
      LeaveCold(id);  // still hot: only the copy goes
    } else {
      LeaveCold(id);
      MaybeFree(id);
    }
  }
}

uint32_t StoreModel::FindOrCreate(uint32_t key) {
  if (entry_of_key_[key] != kNone) return entry_of_key_[key];
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<uint32_t>(entries_.size());
    entries_.emplace_back();
  }
  entries_[id] = Entry{};
  entries_[id].key = key;
  entry_of_key_[key] = id;
  return id;
}

void StoreModel::SetParent(uint32_t id, uint32_t parent) {
  Entry& e = entries_[id];
  if (e.parent == parent) return;
  const uint32_t old = e.parent;
  const bool hot = e.hot;
  e.parent = parent;
  if (parent != kNone) {
    Entry& p = entries_[parent];
    ++p.children;
    if (hot) ++p.hot_children;
    UpdateEligibility(parent);
    UpdateColdList(parent, false);
  }
  if (old != kNone) {
    Entry& p = entries_[old];
    --p.children;
    if (hot) --p.hot_children;
    UpdateEligibility(old);
    UpdateColdList(old, true);
    MaybeFree(old);
  }
}

void StoreModel::MaybeFree(uint32_t id) {
  while (id != kNone) {
    Entry& e = entries_[id];
    if (e.hot || e.cold || e.busy || e.children > 0) return;
    const uint32_t parent = e.parent;
    entry_of_key_[e.key] = kNone;
    e = Entry{};
    free_ids_.push_back(id);
    if (parent == kNone) return;
    --entries_[parent].children;
    UpdateEligibility(parent);
    UpdateColdList(parent, true);  // older than the child that left: LRU end
    id = parent;
  }
}

void StoreModel::Touch(uint32_t id) {
  entries_[id].recency = ++tick_;
  if (entries_[id].in_cold_list) {
    ColdUnlink(id);
    ColdAppend(id, false);
  }
}

void StoreModel::UpdateEligibility(uint32_t id) {
  Entry& e = entries_[id];
  bool eligible = e.hot && !e.busy && !e.unread;
  if (eligible) {
    const bool protected_sink = e.block_index < options_.sink_blocks && e.hot_children > 0;
    eligible = policy_->structure_aware() ? e.hot_children == 0 : !protected_sink;
  }
  if (eligible == e.eligible) return;
  e.eligible = eligible;
  policy_->OnEligible(id, eligible);
}

void StoreModel::EnterHot(uint32_t id) {
  KVTIER_CHECK(!entries_[id].hot) << "block already hot";
  entries_[id].hot = true;
  policy_->OnInsert(id, Info(entries_[id]));
  const uint32_t parent = entries_[id].parent;
  if (parent != kNone) {
    ++entries_[parent].hot_children;
    UpdateEligibility(parent);
  }
  UpdateEligibility(id);
}

void StoreModel::LeaveHot(uint32_t id) {
  Entry& e = entries_[id];
  if (!e.hot) return;
  e.eligible = false;
  policy_->OnRemove(id);
  e.hot = false;
  --hot_used_;
  if (e.unread) {
    e.unread = false;
    --unread_;
    ++prefetch_wasted_;
  }
  if (e.parent != kNone) {
    --entries_[e.parent].hot_children;
    UpdateEligibility(e.parent);
  }
}

void StoreModel::EnterCold(uint32_t id) {
  Entry& e = entries_[id];
  if (e.cold) cold_used_ -= RecordBytes(e);
  e.cold = true;
  cold_used_ += RecordBytes(e);
  UpdateColdList(id, false);
}

void StoreModel::LeaveCold(uint32_t id) {
  Entry& e = entries_[id];
  if (!e.cold) return;
  cold_used_ -= RecordBytes(e);
  e.cold = false;
  UpdateColdList(id, false);
}

void StoreModel::UpdateColdList(uint32_t id, bool at_head) {
  const Entry& e = entries_[id];
  const bool want = e.cold && e.children == 0;
  if (want && !e.in_cold_list) ColdAppend(id, at_head);
  if (!want && e.in_cold_list) ColdUnlink(id);
}

void StoreModel::ColdUnlink(uint32_t id) {
  Entry& e = entries_[id];
  if (e.cold_prev != kNone) {
    entries_[e.cold_prev].cold_next = e.cold_next;
  } else {
    cold_head_ = e.cold_next;
  }
  if (e.cold_next != kNone) {
    entries_[e.cold_next].cold_prev = e.cold_prev;
  } else {
    cold_tail_ = e.cold_prev;
  }
  e.cold_prev = e.cold_next = kNone;
  e.in_cold_list = false;
}

void StoreModel::ColdAppend(uint32_t id, bool at_head) {
  Entry& e = entries_[id];
  e.in_cold_list = true;
  if (at_head) {
    e.cold_prev = kNone;
    e.cold_next = cold_head_;
    if (cold_head_ != kNone) entries_[cold_head_].cold_prev = id;
    cold_head_ = id;
    if (cold_tail_ == kNone) cold_tail_ = id;
  } else {
    e.cold_next = kNone;
    e.cold_prev = cold_tail_;
    if (cold_tail_ != kNone) entries_[cold_tail_].cold_next = id;
    cold_tail_ = id;
    if (cold_head_ == kNone) cold_head_ = id;
  }
}

}  // namespace kvtier::tools
