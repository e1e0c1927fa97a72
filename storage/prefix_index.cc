#include "storage/prefix_index.h"

#include <xxhash.h>

#include <cstring>
#include <utility>

namespace kvtier::storage {

uint32_t PrefixIndex::KeyHash(uint16_t ns, std::string_view key) {
  return static_cast<uint32_t>(XXH3_64bits_withSeed(key.data(), key.size(), ns));
}

size_t PrefixIndex::IdHash::Spread(uint32_t h) {
  // splitmix64's finalizer: every bit of the table's hash depends on every bit of h.
  uint64_t x = h;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool PrefixIndex::IdEq::operator()(IdSlot a, const KeyRef& b) const {
  const auto id = static_cast<BlockId>(a);
  return static_cast<uint32_t>(a >> 32) == b.hash && index->at(id).ns == b.ns &&
         index->key(id) == b.key;
}

PrefixIndex::PrefixIndex(LinksChanged on_links_changed)
    : on_links_changed_(std::move(on_links_changed)),
      ids_(0, IdHash{}, IdEq{this}, MmapAllocator<IdSlot>()) {}

std::string_view PrefixIndex::key(BlockId id) const {
  const Entry& e = at(id);
  if (e.key_len <= Entry::kInlineKeyBytes) return std::string_view(e.key_, e.key_len);
  uint32_t cell;
  std::memcpy(&cell, e.key_, sizeof(cell));
  return std::string_view(long_keys_[cell].bytes, e.key_len);
}

BlockId PrefixIndex::Find(uint16_t ns, std::string_view key) const {
  auto it = ids_.find(Ref(ns, key));
  return it == ids_.end() ? kNoEntry : static_cast<BlockId>(*it);
}

BlockId PrefixIndex::FindAfter(uint16_t ns, std::string_view key, BlockId prev) const {
  if (prev != kNoEntry && prev + 1 < id_limit()) {
    // A used entry holding (ns, key) is its only entry.
    const Entry& e = at(prev + 1);
    if ((e.flags & Entry::kUsed) && e.ns == ns && this->key(prev + 1) == key) return prev + 1;
  }
  return Find(ns, key);
}

BlockId PrefixIndex::FindOrCreate(uint16_t ns, std::string_view key) {
  const KeyRef ref = Ref(ns, key);  // hashed once for the probe and the insert
  auto it = ids_.find(ref);
  return it != ids_.end() ? static_cast<BlockId>(*it) : NewEntry(ref);
}

BlockId PrefixIndex::NewEntry(const KeyRef& ref) {
  const std::string_view key = ref.key;
  const BlockId id = entries_.Allocate();
  Entry& e = at(id);
  e = Entry{};
  e.key_len = static_cast<uint8_t>(key.size());
  if (key.size() <= Entry::kInlineKeyBytes) {
    std::memcpy(e.key_, key.data(), key.size());
  } else {
    const uint32_t cell = long_keys_.Allocate();
    std::memcpy(long_keys_[cell].bytes, key.data(), key.size());
    std::memcpy(e.key_, &cell, sizeof(cell));
  }
  e.flags = Entry::kUsed;
  e.ns = ref.ns;
  e.parent = kNoEntry;
  e.slot = kNoEntry;
  ids_.insert(SlotOf(id, ref.hash));
  return id;
}

size_t PrefixIndex::MemoryBytes() const {
  return ids_.capacity() * (sizeof(IdSlot) + 1) + entries_.MemoryBytes() + long_keys_.MemoryBytes();
}

void PrefixIndex::SetParent(BlockId id, BlockId parent) {
  Entry& e = at(id);
  if (e.parent == parent) return;
  const BlockId old = e.parent;
  const bool hot = e.flags & Entry::kHot;
  e.parent = parent;
  if (parent != kNoEntry) {
    Entry& p = at(parent);
    // No longer a leaf; unlinking also turns its links back into (zero) child counts.
    if (p.flags & Entry::kInColdList) ColdUnlink(parent);
    ++p.links_[0];
    if (hot) ++p.links_[1];
    on_links_changed_(parent);
  }
  if (old != kNoEntry) {
    Entry& p = at(old);  // has a child, so not in the cold list
    --p.links_[0];
    if (hot) --p.links_[1];
    on_links_changed_(old);
    UpdateColdList(old, true);
    MaybeFree(old);
  }
}

void PrefixIndex::MaybeFree(BlockId id) {
  while (id != kNoEntry) {
    Entry& e = at(id);
    if ((e.flags & (Entry::kHot | Entry::kCold | Entry::kBusy)) || e.children() > 0) return;
    const BlockId parent = e.parent;
    ids_.erase(SlotOf(id, KeyHash(e.ns, key(id))));  // before the key's cell is freed
    if (e.key_len > Entry::kInlineKeyBytes) {
      uint32_t cell;
      std::memcpy(&cell, e.key_, sizeof(cell));
      long_keys_.Free(cell);
    }
    e.flags = 0;
    entries_.Free(id);
    if (parent == kNoEntry) return;
    --at(parent).links_[0];  // has a child, so not in the cold list
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
  Entry& p = at(e.parent);  // has a child, so not in the cold list
  if (hot) {
    ++p.links_[1];
  } else {
    --p.links_[1];
  }
  on_links_changed_(e.parent);
}

void PrefixIndex::ColdUnlink(BlockId id) {
  Entry& e = at(id);
  const BlockId prev = e.links_[0];
  const BlockId next = e.links_[1];
  if (prev != kNoEntry) {
    at(prev).links_[1] = next;
  } else {
    cold_head_ = next;
  }
  if (next != kNoEntry) {
    at(next).links_[0] = prev;
  } else {
    cold_tail_ = prev;
  }
  e.links_[0] = e.links_[1] = 0;  // a leaf's child counts
  e.flags &= ~Entry::kInColdList;
}

void PrefixIndex::ColdAppend(BlockId id, bool at_head) {
  Entry& e = at(id);
  e.flags |= Entry::kInColdList;
  if (at_head) {
    e.links_[0] = kNoEntry;
    e.links_[1] = cold_head_;
    if (cold_head_ != kNoEntry) at(cold_head_).links_[0] = id;
    cold_head_ = id;
    if (cold_tail_ == kNoEntry) cold_tail_ = id;
  } else {
    e.links_[1] = kNoEntry;
    e.links_[0] = cold_tail_;
    if (cold_tail_ != kNoEntry) at(cold_tail_).links_[1] = id;
    cold_tail_ = id;
    if (cold_head_ == kNoEntry) cold_head_ = id;
  }
}

void PrefixIndex::UpdateColdList(BlockId id, bool at_head) {
  const Entry& e = at(id);
  const bool want = (e.flags & Entry::kCold) && e.children() == 0;
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
