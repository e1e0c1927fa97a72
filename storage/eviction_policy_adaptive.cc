#include "storage/eviction_policy_adaptive.h"

#include <algorithm>

namespace kvtier::storage {
namespace {

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
  } else if (auto it = ghosts_.find(id); it != ghosts_.end()) {
    --live_ghosts_[it->second.reused];  // a new key under a reused id
    ghosts_.erase(it);
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
    const int c = it->second.reused;
    ExpireGhosts(c);
    auto [git, inserted] = ghosts_.try_emplace(id);
    if (!inserted) --live_ghosts_[git->second.reused];
    git->second = Ghost{++evictions_[c], it->second.reused};
    ++live_ghosts_[c];
    ghost_rings_[c].emplace_back(id, evictions_[c]);
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

void AdaptivePolicy::ExpireGhosts(int c) {
  // Each ghost list keeps the last `resident` victims of its class.
  const uint64_t window = std::max<uint64_t>(resident_, 1);
  auto& ring = ghost_rings_[c];
  size_t& head = ring_heads_[c];
  while (head < ring.size() && evictions_[c] - ring[head].second >= window) {
    const auto [id, seq] = ring[head++];
    auto it = ghosts_.find(id);
    if (it != ghosts_.end() && it->second.reused == (c == 1) && it->second.seq == seq) {
      --live_ghosts_[c];
      ghosts_.erase(it);
    }
  }
  if (head > 64 && 2 * head > ring.size()) {
    ring.erase(ring.begin(), ring.begin() + static_cast<ptrdiff_t>(head));
    head = 0;
  }
}

void AdaptivePolicy::Learn(BlockId id) {
  auto it = ghosts_.find(id);
  if (it == ghosts_.end()) return;
  const int c = it->second.reused;
  ExpireGhosts(c);
  it = ghosts_.find(id);
  if (it == ghosts_.end()) return;  // older than its class's window
  const double own = static_cast<double>(live_ghosts_[c]);
  const double other = static_cast<double>(live_ghosts_[1 - c]);
  const double step = kAdaptiveStep * std::max(1.0, other / std::max(own, 1.0));
  boost_ = std::clamp(boost_ + (c == 1 ? step : -step), 0.0, kAdaptiveMaxBoost);
  --live_ghosts_[c];
  ghosts_.erase(it);
}

size_t AdaptivePolicy::MemoryBytes() const {
  size_t bytes = states_.capacity() * (sizeof(std::pair<BlockId, State>) + 1) +
                 ghosts_.capacity() * (sizeof(std::pair<BlockId, Ghost>) + 1);
  for (const auto& h : heaps_) bytes += h.capacity() * sizeof(HeapItem);
  for (const auto& r : ghost_rings_) bytes += r.capacity() * sizeof(r[0]);
  return bytes;
}

}  // namespace kvtier::storage
