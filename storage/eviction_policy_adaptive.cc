#include "storage/eviction_policy_adaptive.h"

#include <algorithm>

namespace kvtier::storage {
namespace {

constexpr uint32_t kReusedBit = 1u << 31;
constexpr uint32_t kSeqMask = kReusedBit - 1;

// std::*_heap builds a max-heap on "less"; "a after b" yields a min-heap on (tick, id).
template <typename Item>
bool After(const Item& a, const Item& b) {
  return a.tick != b.tick ? a.tick > b.tick : a.id > b.id;
}

}  // namespace

void AdaptivePolicy::Push(BlockId id, const State& s) {
  std::vector<HeapItem>& heap = heaps_[s.reused];
  heap.push_back(HeapItem{s.tick, id});
  std::push_heap(heap.begin(), heap.end(), After<HeapItem>);
  if (heaps_[0].size() + heaps_[1].size() <= 2 * eligible_ + 64) return;
  // Stale items dominate: rebuild so memory stays O(eligible blocks).
  for (auto& h : heaps_) h.clear();
  for (const auto& [bid, st] : states_) {
    if (st.eligible) heaps_[st.reused].push_back(HeapItem{st.tick, bid});
  }
  for (auto& h : heaps_) std::make_heap(h.begin(), h.end(), After<HeapItem>);
}

bool AdaptivePolicy::CleanTop(int c) {
  std::vector<HeapItem>& heap = heaps_[c];
  while (!heap.empty()) {
    const HeapItem& top = heap.front();
    auto it = states_.find(top.id);
    if (it != states_.end() && it->second.eligible && it->second.reused == (c == 1) &&
        it->second.tick == top.tick) {
      return true;
    }
    std::pop_heap(heap.begin(), heap.end(), After<HeapItem>);
    heap.pop_back();
  }
  return false;
}

void AdaptivePolicy::Reference(BlockId id, const BlockInfo& info) {
  State& s = states_[id];
  s.tick = info.tick;
  s.reused = info.hits > 0;
  if (s.eligible) Push(id, s);
}

void AdaptivePolicy::OnInsert(BlockId id, const BlockInfo& info) {
  if (info.hits > 0) {
    Learn(id);  // a known key came back (promotion from the cold tier)
  } else {
    ClearGhost(id);  // a new key under a reused id
  }
  auto [it, inserted] = states_.try_emplace(id);
  if (!inserted && it->second.eligible) --eligible_;
  if (inserted) ++resident_;
  it->second = State{};
  Reference(id, info);
}

void AdaptivePolicy::OnAccess(BlockId id, const BlockInfo& info) {
  if (states_.contains(id)) Reference(id, info);
}

void AdaptivePolicy::OnEligible(BlockId id, bool eligible) {
  auto it = states_.find(id);
  if (it == states_.end() || it->second.eligible == eligible) return;
  it->second.eligible = eligible;
  if (eligible) {
    ++eligible_;
    Push(id, it->second);
  } else {
    --eligible_;
  }
}

void AdaptivePolicy::OnRemove(BlockId id) {
  auto it = states_.find(id);
  if (it == states_.end()) return;
  if (id == last_victim_) {
    AddGhost(id, it->second.reused);
    last_victim_ = kInvalidBlock;
  }
  if (it->second.eligible) --eligible_;
  states_.erase(it);
  --resident_;
}

BlockId AdaptivePolicy::PickVictim() {
  const bool fresh = CleanTop(0);
  const bool reused = CleanTop(1);
  if (!fresh && !reused) return last_victim_ = kInvalidBlock;
  int c = fresh ? 0 : 1;
  if (fresh && reused) {
    const double reused_age = static_cast<double>(heaps_[1].front().tick) +
                              boost_ * static_cast<double>(resident_);
    if (reused_age < static_cast<double>(heaps_[0].front().tick)) c = 1;
  }
  last_victim_ = heaps_[c].front().id;
  return last_victim_;
}

void AdaptivePolicy::Learn(BlockId id) {
  if (id >= ghosts_.size() || ghosts_[id] == 0) return;
  const uint32_t ghost = ghosts_[id];
  ClearGhost(id);
  const int c = (ghost & kReusedBit) ? 1 : 0;
  const uint64_t window = std::max<uint64_t>(resident_, 1);
  const uint32_t age = (evictions_[c] - (ghost & kSeqMask)) & kSeqMask;
  if (age >= window) return;  // older than its class's window
  // ARC's step: a return from the shorter ghost list weighs more. A list holds the
  // class's last `window` victims.
  const double own = static_cast<double>(std::max<uint64_t>(live_[c], 1));
  const double other = static_cast<double>(live_[1 - c]);
  const double step = kAdaptiveStep * std::max(1.0, other / own);
  boost_ = std::clamp(boost_ + (c == 1 ? step : -step), 0.0, kAdaptiveMaxBoost);
}

void AdaptivePolicy::AddGhost(BlockId id, int c) {
  evictions_[c] = (evictions_[c] + 1) & kSeqMask;
  if (evictions_[c] == 0) evictions_[c] = 1;  // 0 means "not a ghost"
  if (id >= ghosts_.size()) ghosts_.resize(std::max<size_t>(id + 1, 2 * ghosts_.size()), 0);
  std::vector<BlockId>& ring = rings_[c];
  if (ring.size() < resident_ + 1) ring.resize(resident_ + 1, kInvalidBlock);
  // The victim one ring size back leaves its ghost list (if it is still there).
  const uint32_t seq = evictions_[c];
  BlockId& slot = ring[seq % ring.size()];
  if (slot != kInvalidBlock && slot < ghosts_.size() && ghosts_[slot] != 0 &&
      ((ghosts_[slot] & kReusedBit) != 0) == (c == 1) && (ghosts_[slot] & kSeqMask) != seq) {
    const uint32_t age = (seq - (ghosts_[slot] & kSeqMask)) & kSeqMask;
    if (age >= ring.size()) ClearGhost(slot);
  }
  slot = id;
  ClearGhost(id);
  ghosts_[id] = (c == 1 ? kReusedBit : 0) | seq;
  ++live_[c];
}

void AdaptivePolicy::ClearGhost(BlockId id) {
  if (id >= ghosts_.size() || ghosts_[id] == 0) return;
  --live_[(ghosts_[id] & kReusedBit) ? 1 : 0];
  ghosts_[id] = 0;
}

size_t AdaptivePolicy::MemoryBytes() const {
  size_t bytes = states_.capacity() * (sizeof(std::pair<BlockId, State>) + 1) +
                 ghosts_.capacity() * sizeof(uint32_t) +
                 (rings_[0].capacity() + rings_[1].capacity()) * sizeof(BlockId);
  for (const auto& h : heaps_) bytes += h.capacity() * sizeof(HeapItem);
  return bytes;
}

}  // namespace kvtier::storage
