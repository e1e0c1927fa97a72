#include "storage/eviction_policy_adaptive.h"

#include <algorithm>
#include <functional>

namespace kvtier::storage {
namespace {

constexpr uint32_t kGhostReused = 1u << 31;  // in a ghost index value
constexpr uint32_t kPositionMask = kGhostReused - 1;
constexpr size_t kNoSlot = ~size_t{0};

uint64_t MakeItem(uint32_t packed, BlockId id, uint32_t tick_mask) {
  return (static_cast<uint64_t>(packed & tick_mask) << 32) | id;
}

// Vectors grow by 1.5x (not the library's 2x) so their slack stays bounded.
template <typename T>
void PushBack(std::vector<T>* v, T value) {
  if (v->size() == v->capacity()) v->reserve(v->size() + v->size() / 2 + 16);
  v->push_back(value);
}

}  // namespace

uint32_t AdaptivePolicy::RelativeTick(uint64_t tick) {
  if (tick < base_) return 0;
  if (tick - base_ > kTickMask) Rebase(tick);
  return static_cast<uint32_t>(tick - base_);
}

void AdaptivePolicy::Rebase(uint64_t tick) {
  // Keep half the range behind `tick`; older blocks tie at relative tick 0.
  const uint64_t base = tick - (kTickMask >> 1);
  const uint64_t shift = base - base_;
  for (auto& [id, s] : states_) {
    const uint64_t rel = s & kTickMask;
    s = (s & ~kTickMask) | static_cast<uint32_t>(rel > shift ? rel - shift : 0);
  }
  base_ = base;
  RebuildHeaps();
}

void AdaptivePolicy::Push(BlockId id, uint32_t packed) {
  std::vector<HeapItem>& heap = heaps_[ClassOf(packed)];
  PushBack(&heap, MakeItem(packed, id, kTickMask));
  std::push_heap(heap.begin(), heap.end(), std::greater<HeapItem>());
  if (++heap_items_ > eligible_ + eligible_ / 2 + 64) DropStaleItems();
}

bool AdaptivePolicy::Live(HeapItem item, int c) const {
  auto it = states_.find(static_cast<BlockId>(item));
  if (it == states_.end()) return false;
  const uint32_t s = it->second;
  return (s & kEligible) && ClassOf(s) == c && (s & kTickMask) == (item >> 32);
}

void AdaptivePolicy::DropStaleItems() {
  // O(heap items), not O(resident) like RebuildHeaps: in long prefix chains few of the
  // resident blocks are eligible (leaves), and rebuilding from every state each time the
  // stale items pile up made the Put rate fall with the index size (kvtier_scale).
  heap_items_ = 0;
  for (int c = 0; c < 2; ++c) {
    std::vector<HeapItem>& heap = heaps_[c];
    std::erase_if(heap, [&](HeapItem item) { return !Live(item, c); });
    if (heap.capacity() > 2 * heap.size() + 64) heap.shrink_to_fit();
    std::make_heap(heap.begin(), heap.end(), std::greater<HeapItem>());
    heap_items_ += heap.size();
  }
  // Duplicates (a block referenced twice in one tick) survive the filter; the states
  // have none.
  if (heap_items_ > eligible_ + eligible_ / 2 + 64) RebuildHeaps();
}

void AdaptivePolicy::RebuildHeaps() {
  // Stale items dominate (or ticks were rebased): rebuild from the states so memory
  // stays O(eligible blocks).
  for (auto& h : heaps_) h.clear();
  for (const auto& [id, s] : states_) {
    if (s & kEligible) PushBack(&heaps_[ClassOf(s)], MakeItem(s, id, kTickMask));
  }
  heap_items_ = 0;
  for (auto& h : heaps_) {
    if (h.capacity() > 2 * h.size() + 64) h.shrink_to_fit();
    std::make_heap(h.begin(), h.end(), std::greater<HeapItem>());
    heap_items_ += h.size();
  }
}

bool AdaptivePolicy::CleanTop(int c) {
  std::vector<HeapItem>& heap = heaps_[c];
  while (!heap.empty()) {
    if (Live(heap.front(), c)) return true;
    std::pop_heap(heap.begin(), heap.end(), std::greater<HeapItem>());
    heap.pop_back();
    --heap_items_;
  }
  return false;
}

void AdaptivePolicy::Reference(BlockId id, const BlockInfo& info) {
  const uint32_t rel = RelativeTick(info.tick);  // may rebase: look the state up after
  uint32_t& s = states_[id];
  s = (s & kEligible) | (info.hits > 0 ? kReused : 0) | rel;
  if (s & kEligible) Push(id, s);
}

void AdaptivePolicy::OnInsert(BlockId id, const BlockInfo& info) {
  if (info.hits > 0) {
    Learn(id);  // a known key came back (promotion from the cold tier)
  } else {
    ClearGhost(id);  // a new key under a reused id
  }
  auto [it, inserted] = states_.try_emplace(id, 0);
  if (!inserted && (it->second & kEligible)) --eligible_;
  if (inserted) ++resident_;
  it->second = 0;
  Reference(id, info);
}

void AdaptivePolicy::OnAccess(BlockId id, const BlockInfo& info) {
  if (states_.contains(id)) Reference(id, info);
}

void AdaptivePolicy::OnEligible(BlockId id, bool eligible) {
  auto it = states_.find(id);
  if (it == states_.end() || ((it->second & kEligible) != 0) == eligible) return;
  if (eligible) {
    it->second |= kEligible;
    ++eligible_;
    Push(id, it->second);
  } else {
    it->second &= ~kEligible;
    --eligible_;
  }
}

void AdaptivePolicy::OnRemove(BlockId id) {
  auto it = states_.find(id);
  if (it == states_.end()) return;
  const uint32_t s = it->second;
  if (s & kEligible) --eligible_;
  states_.erase(it);
  --resident_;
  if (id == last_victim_) {
    AddGhost(id, ClassOf(s));
    last_victim_ = kInvalidBlock;
  }
}

BlockId AdaptivePolicy::PickVictim() {
  const bool fresh = CleanTop(0);
  const bool reused = CleanTop(1);
  if (!fresh && !reused) return last_victim_ = kInvalidBlock;
  int c = fresh ? 0 : 1;
  if (fresh && reused) {
    const double reused_age = static_cast<double>(heaps_[1].front() >> 32) +
                              boost_ * static_cast<double>(resident_);
    if (reused_age < static_cast<double>(heaps_[0].front() >> 32)) c = 1;
  }
  last_victim_ = static_cast<BlockId>(heaps_[c].front());
  return last_victim_;
}

void AdaptivePolicy::Learn(BlockId id) {
  const size_t slot = FindGhostSlot(id);
  if (slot == kNoSlot) return;
  const uint32_t value = ghost_index_[slot];
  const size_t position = (value & kPositionMask) - 1;
  const int c = (value & kGhostReused) ? 1 : 0;
  const size_t ring = ghost_ring_.size();
  const size_t age = (ghost_next_ + ring - 1 - position) % ring;  // victims since it
  ClearGhost(id);
  if (age >= std::max<uint64_t>(resident_, 1)) return;  // older than one cache size
  // ARC's step: a return from the shorter ghost list weighs more.
  const double own = static_cast<double>(std::max<uint64_t>(live_[c], 1));
  const double other = static_cast<double>(live_[1 - c]);
  const double step = kAdaptiveStep * std::max(1.0, other / own);
  boost_ = std::clamp(boost_ + (c == 1 ? step : -step), 0.0, kAdaptiveMaxBoost);
}

void AdaptivePolicy::AddGhost(BlockId id, int c) {
  if (ghost_ring_.size() < resident_ + 1) {
    ResizeGhosts(std::max<size_t>(resident_ + 1, ghost_ring_.size() + ghost_ring_.size() / 4));
  }
  ClearGhost(id);
  const BlockId old = ghost_ring_[ghost_next_];
  if (old != kInvalidBlock) ClearGhost(old);  // one ring size old: forgotten
  ghost_ring_[ghost_next_] = id;
  InsertGhostSlot(static_cast<uint32_t>(ghost_next_ + 1) | (c == 1 ? kGhostReused : 0));
  ++live_[c];
  ghost_next_ = (ghost_next_ + 1) % ghost_ring_.size();
}

void AdaptivePolicy::ClearGhost(BlockId id) {
  const size_t slot = FindGhostSlot(id);
  if (slot == kNoSlot) return;
  const uint32_t value = ghost_index_[slot];
  --live_[(value & kGhostReused) ? 1 : 0];
  ghost_ring_[(value & kPositionMask) - 1] = kInvalidBlock;
  EraseGhostSlot(slot);
}

size_t AdaptivePolicy::Home(BlockId id) const {
  // Multiply-shift hash, mapped onto the table size without a power of two.
  const uint64_t h = (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> 32;
  return static_cast<size_t>((h * ghost_index_.size()) >> 32);
}

size_t AdaptivePolicy::FindGhostSlot(BlockId id) const {
  if (ghost_index_.empty()) return kNoSlot;
  const size_t n = ghost_index_.size();
  for (size_t i = Home(id);; i = i + 1 == n ? 0 : i + 1) {
    const uint32_t v = ghost_index_[i];
    if (v == 0) return kNoSlot;
    if (ghost_ring_[(v & kPositionMask) - 1] == id) return i;
  }
}

void AdaptivePolicy::InsertGhostSlot(uint32_t value) {
  const size_t n = ghost_index_.size();
  size_t i = Home(ghost_ring_[(value & kPositionMask) - 1]);
  while (ghost_index_[i] != 0) i = i + 1 == n ? 0 : i + 1;
  ghost_index_[i] = value;
}

void AdaptivePolicy::EraseGhostSlot(size_t slot) {
  // Backward-shift deletion keeps every probe chain unbroken without tombstones: an
  // entry after the hole moves into it unless its home lies cyclically in (hole, entry].
  const size_t n = ghost_index_.size();
  size_t hole = slot;
  for (size_t i = slot + 1 == n ? 0 : slot + 1; ghost_index_[i] != 0;
       i = i + 1 == n ? 0 : i + 1) {
    const size_t home = Home(ghost_ring_[(ghost_index_[i] & kPositionMask) - 1]);
    if ((i + n - home) % n >= (i + n - hole) % n) {
      ghost_index_[hole] = ghost_index_[i];
      hole = i;
    }
  }
  ghost_index_[hole] = 0;
}

void AdaptivePolicy::ResizeGhosts(size_t ring_size) {
  // Unroll the ring oldest first into the new size and re-index it (load <= 3/4).
  std::vector<BlockId> ring(ring_size, kInvalidBlock);
  std::vector<bool> reused(ring_size, false);
  size_t n = 0;
  for (size_t k = 0; k < ghost_ring_.size(); ++k) {
    const BlockId id = ghost_ring_[(ghost_next_ + k) % ghost_ring_.size()];
    if (id == kInvalidBlock) continue;
    reused[n] = (ghost_index_[FindGhostSlot(id)] & kGhostReused) != 0;
    ring[n++] = id;
  }
  ghost_ring_ = std::move(ring);
  ghost_next_ = n % ring_size;
  ghost_index_.assign(ring_size + ring_size / 3 + 1, 0);
  for (size_t pos = 0; pos < n; ++pos) {
    InsertGhostSlot(static_cast<uint32_t>(pos + 1) | (reused[pos] ? kGhostReused : 0));
  }
}

size_t AdaptivePolicy::MemoryBytes() const {
  // flat_hash_map: a slot and a control byte per bucket (plus one group of control
  // bytes), whatever its load factor.
  size_t bytes = states_.capacity() * (sizeof(std::pair<const BlockId, uint32_t>) + 1) + 16 +
                 ghost_ring_.capacity() * sizeof(BlockId) +
                 ghost_index_.capacity() * sizeof(uint32_t);
  for (const auto& h : heaps_) bytes += h.capacity() * sizeof(HeapItem);
  return bytes;
}

}  // namespace kvtier::storage
