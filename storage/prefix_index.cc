#include "storage/prefix_index.h"

#include <xxhash.h>

#include <cstring>
#include <utility>

namespace kvtier::storage {

size_t PrefixIndex::IdHash::operator()(BlockId id) const {
  const Entry& e = index->at(id);
  return XXH3_64bits_withSeed(e.key, e.key_len, e.ns);
}

size_t PrefixIndex::IdHash::operator()(const KeyRef& k) const {
  return XXH3_64bits_withSeed(k.key.data(), k.key.size(), k.ns);
}

bool PrefixIndex::IdEq::operator()(BlockId a, const KeyRef& b) const {
  const Entry& e = index->at(a);
  return e.ns == b.ns && e.key_view() == b.key;
}

PrefixIndex::PrefixIndex(LinksChanged on_links_changed)
    : on_links_changed_(std::move(on_links_changed)), ids_(0, IdHash{this}, IdEq{this}) {}

BlockId PrefixIndex::Find(uint16_t ns, std::string_view key) const {
  auto it = ids_.find(KeyRef{ns, key});
  return it == ids_.end() ? kNoEntry : *it;
}

BlockId PrefixIndex::FindOrCreate(uint16_t ns, std::string_view key) {
  const BlockId id = Find(ns, key);
  return id != kNoEntry ? id : NewEntry(ns, key);
}

BlockId PrefixIndex::NewEntry(uint16_t ns, std::string_view key) {
  BlockId id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = num_ids_++;
    if ((id >> kChunkShift) >= chunks_.size()) {
      chunks_.push_back(std::make_unique<Entry[]>(size_t{1} << kChunkShift));
    }
  }
  Entry& e = at(id);
  std::memset(&e, 0, sizeof(e));
  std::memcpy(e.key, key.data(), key.size());
  e.key_len = static_cast<uint8_t>(key.size());
  e.flags = Entry::kUsed;
  e.ns = ns;
  e.parent = kNoEntry;
  e.slot = kNoEntry;
  e.cold_prev = e.cold_next = kNoEntry;
  ids_.insert(id);
  return id;
}

size_t PrefixIndex::MemoryBytes() const {
  return ids_.capacity() * (sizeof(BlockId) + 1) + chunks_.size() * (sizeof(Entry) << kChunkShift) +
         free_ids_.capacity() * sizeof(BlockId);
}

void PrefixIndex::SetParent(BlockId id, BlockId parent) {
  Entry& e = at(id);
  if (e.parent == parent) return;
  const BlockId old = e.parent;
  const bool hot = e.flags & Entry::kHot;
  e.parent = parent;
  if (parent != kNoEntry) {
    Entry& p = at(parent);
    ++p.children;
    if (hot) ++p.hot_children;
    on_links_changed_(parent);
    UpdateColdList(parent, false);
  }
  if (old != kNoEntry) {
    Entry& p = at(old);
    --p.children;
    if (hot) --p.hot_children;
    on_links_changed_(old);
    UpdateColdList(old, true);
    MaybeFree(old);
  }
}

void PrefixIndex::MaybeFree(BlockId id) {
  while (id != kNoEntry) {
    Entry& e = at(id);
    if ((e.flags & (Entry::kHot | Entry::kCold | Entry::kBusy)) || e.children > 0) return;
    const BlockId parent = e.parent;
    ids_.erase(id);
    e.flags = 0;
    free_ids_.push_back(id);
    if (parent == kNoEntry) return;
    --at(parent).children;
    on_links_changed_(parent);
    // A parent that just became a leaf is older than the child that left: LRU end.
    UpdateColdList(parent, true);
    id = parent;
  }
}

void PrefixIndex::SetHot(BlockId id, bool hot) {
  Entry& e = at(id);
  if (hot == static_cast<bool>(e.flags & Entry::kHot)) return;
  if (hot) {
    e.flags |= Entry::kHot;
  } else {
    e.flags &= ~Entry::kHot;
  }
  if (e.parent == kNoEntry) return;
  Entry& p = at(e.parent);
  if (hot) {
    ++p.hot_children;
  } else {
    --p.hot_children;
  }
  on_links_changed_(e.parent);
}

void PrefixIndex::ColdUnlink(BlockId id) {
  Entry& e = at(id);
  if (e.cold_prev != kNoEntry) {
    at(e.cold_prev).cold_next = e.cold_next;
  } else {
    cold_head_ = e.cold_next;
  }
  if (e.cold_next != kNoEntry) {
    at(e.cold_next).cold_prev = e.cold_prev;
  } else {
    cold_tail_ = e.cold_prev;
  }
  e.cold_prev = e.cold_next = kNoEntry;
  e.flags &= ~Entry::kInColdList;
}

void PrefixIndex::ColdAppend(BlockId id, bool at_head) {
  Entry& e = at(id);
  e.flags |= Entry::kInColdList;
  if (at_head) {
    e.cold_prev = kNoEntry;
    e.cold_next = cold_head_;
    if (cold_head_ != kNoEntry) at(cold_head_).cold_prev = id;
    cold_head_ = id;
    if (cold_tail_ == kNoEntry) cold_tail_ = id;
  } else {
    e.cold_next = kNoEntry;
    e.cold_prev = cold_tail_;
    if (cold_tail_ != kNoEntry) at(cold_tail_).cold_next = id;
    cold_tail_ = id;
    if (cold_head_ == kNoEntry) cold_head_ = id;
  }
}

void PrefixIndex::UpdateColdList(BlockId id, bool at_head) {
  const Entry& e = at(id);
  const bool want = (e.flags & Entry::kCold) && e.children == 0;
  const bool have = e.flags & Entry::kInColdList;
  if (want && !have) ColdAppend(id, at_head);
  if (!want && have) ColdUnlink(id);
}

void PrefixIndex::TouchCold(BlockId id) {
  if (!(at(id).flags & Entry::kInColdList)) return;
  ColdUnlink(id);
  ColdAppend(id, false);
}

}  // namespace kvtier::storage
