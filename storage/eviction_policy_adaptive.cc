#include "storage/eviction_policy_adaptive.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>

namespace kvtier::storage {
namespace {

constexpr uint32_t kShadowTickLimit = 1u << 29;  // shadow ticks keep 29 bits

uint64_t MakeItem(uint32_t packed, BlockId id, uint32_t tick_mask) {
  return (static_cast<uint64_t>(packed & tick_mask) << 32) | id;
}

// Vectors grow by 1.5x (not the library's 2x) so their slack stays bounded.
template <typename T>
void PushBack(std::vector<T>* v, T value) {
  if (v->size() == v->capacity()) v->reserve(v->size() + v->size() / 2 + 16);
  v->push_back(value);
}

// flat_hash_map: a slot and a control byte per bucket (plus one group of control bytes),
// whatever its load factor.
template <typename Map>
size_t MapBytes(const Map& m) {
  return m.capacity() * (sizeof(typename Map::value_type) + 1) + 16;
}

}  // namespace

int AdaptiveClassOf(uint32_t hits) {
  return std::min<int>(kAdaptiveClasses - 1, std::bit_width(hits));
}

// ---------------------------------------------------------------------------------------
// AdaptiveShadow

AdaptiveShadow::AdaptiveShadow(const AdaptiveHeadStarts& head_starts)
    : head_starts_(head_starts) {
  head_.fill(kNil);
  tail_.fill(kNil);
  run_.fill(kNil);
}

void AdaptiveShadow::Unlink(uint32_t n) {
  Node& node = nodes_[n];
  const int c = node.tick_cls & 7;
  if (run_[c] == n) run_[c] = node.next;
  (node.prev == kNil ? head_[c] : nodes_[node.prev].next) = node.next;
  (node.next == kNil ? tail_[c] : nodes_[node.next].prev) = node.prev;
}

void AdaptiveShadow::Insert(uint32_t n) {
  // At the tail, but before the current request's run: within a request the deepest
  // block goes first, as leaves go first in the live cache.
  Node& node = nodes_[n];
  const int c = node.tick_cls & 7;
  const uint32_t before = run_[c];
  node.next = before;
  node.prev = before == kNil ? tail_[c] : nodes_[before].prev;
  (node.prev == kNil ? head_[c] : nodes_[node.prev].next) = n;
  (before == kNil ? tail_[c] : nodes_[before].prev) = n;
  run_[c] = n;
}

void AdaptiveShadow::EvictOne(uint64_t capacity) {
  // The live rule: the oldest head, class c counted H[c] lifetimes (capacity ticks: one
  // shadow tick per sampled reference) younger.
  uint32_t victim = kNil;
  double best = 0;
  for (int c = 0; c < kAdaptiveClasses; ++c) {
    if (head_[c] == kNil) continue;
    const double age = static_cast<double>(nodes_[head_[c]].tick_cls >> 3) +
                       head_starts_[c] * static_cast<double>(capacity);
    if (victim == kNil || age < best) {
      victim = head_[c];
      best = age;
    }
  }
  Unlink(victim);
  index_.erase(nodes_[victim].key);
  PushBack(&free_, victim);
}

bool AdaptiveShadow::Reference(uint32_t key, int cls, uint32_t tick, uint64_t capacity,
                               bool new_request) {
  if (new_request) run_.fill(kNil);
  auto it = index_.find(key);
  const bool hit = it != index_.end();
  uint32_t n;
  if (hit) {
    n = it->second;
    Unlink(n);
  } else {
    while (index_.size() >= capacity) EvictOne(capacity);
    if (free_.empty()) {
      n = static_cast<uint32_t>(nodes_.size());
      PushBack(&nodes_, Node{});
    } else {
      n = free_.back();
      free_.pop_back();
    }
    nodes_[n].key = key;
    index_.emplace(key, n);
  }
  nodes_[n].tick_cls = tick << 3 | static_cast<uint32_t>(cls);
  Insert(n);
  while (index_.size() > capacity) EvictOne(capacity);  // the capacity shrank
  return hit;
}

void AdaptiveShadow::Clear() {
  nodes_.clear();
  free_.clear();
  index_.clear();
  head_.fill(kNil);
  tail_.fill(kNil);
  run_.fill(kNil);
}

size_t AdaptiveShadow::MemoryBytes() const {
  return nodes_.capacity() * sizeof(Node) + free_.capacity() * sizeof(uint32_t) +
         MapBytes(index_);
}

// ---------------------------------------------------------------------------------------
// AdaptivePolicy

AdaptivePolicy::AdaptivePolicy() {
  for (const AdaptiveHeadStarts& h : kAdaptiveCandidates) shadows_.emplace_back(h);
}

uint32_t* AdaptivePolicy::FindState(BlockId id) {
  const size_t c = id >> kStateChunkShift;
  return c < states_.size() && states_[c] ? &states_[c][id & kStateChunkMask] : nullptr;
}

const uint32_t* AdaptivePolicy::FindState(BlockId id) const {
  return const_cast<AdaptivePolicy*>(this)->FindState(id);
}

uint32_t& AdaptivePolicy::StateOf(BlockId id) {
  const size_t c = id >> kStateChunkShift;
  if (c >= states_.size()) states_.resize(c + 1);
  if (!states_[c]) states_[c] = std::make_unique<uint32_t[]>(kStateChunkMask + 1);
  return states_[c][id & kStateChunkMask];
}

template <typename F>
void AdaptivePolicy::ForEachState(F f) {
  for (size_t c = 0; c < states_.size(); ++c) {
    if (!states_[c]) continue;
    for (uint32_t i = 0; i <= kStateChunkMask; ++i) {
      uint32_t& s = states_[c][i];
      if (s & kResident) f(static_cast<BlockId>(c << kStateChunkShift | i), s);
    }
  }
}

uint32_t AdaptivePolicy::RelativeTick(uint64_t tick) {
  if (tick < base_) return 0;
  if (tick - base_ > kTickMask) Rebase(tick);
  return static_cast<uint32_t>(tick - base_);
}

void AdaptivePolicy::Rebase(uint64_t tick) {
  // Keep half the range behind `tick`; older blocks tie at relative tick 0.
  const uint64_t base = tick - (kTickMask >> 1);
  const uint64_t shift = base - base_;
  ForEachState([&](BlockId, uint32_t& s) {
    const uint64_t rel = s & kTickMask;
    s = (s & ~kTickMask) | static_cast<uint32_t>(rel > shift ? rel - shift : 0);
  });
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
  const uint32_t* state = FindState(static_cast<BlockId>(item));
  if (state == nullptr) return false;
  const uint32_t s = *state;
  return (s & kEligible) && ClassOf(s) == c && (s & kTickMask) == (item >> 32);
}

void AdaptivePolicy::DropStaleItems() {
  // O(heap items), not O(resident) like RebuildHeaps: in long prefix chains few of the
  // resident blocks are eligible (leaves), and rebuilding from every state each time the
  // stale items pile up made the Put rate fall with the index size (kvtier_scale).
  heap_items_ = 0;
  for (int c = 0; c < kAdaptiveClasses; ++c) {
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
  ForEachState([&](BlockId id, uint32_t s) {
    if (s & kEligible) PushBack(&heaps_[ClassOf(s)], MakeItem(s, id, kTickMask));
  });
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

void AdaptivePolicy::Simulate(const BlockInfo& info) {
  if (info.block_index == 0) new_request_ = true;  // every request starts at its root
  if (info.key_hash % kAdaptiveSampleRate != 0) return;
  if (info.key_hash == last_key_hash_ && info.tick == last_tick_) return;  // one reference
  last_key_hash_ = info.key_hash;
  last_tick_ = info.tick;
  const bool new_request = new_request_;
  new_request_ = false;
  if (++shadow_tick_ == kShadowTickLimit) {
    for (AdaptiveShadow& s : shadows_) s.Clear();
    shadow_tick_ = 1;
  }
  if (new_request) request_tick_ = shadow_tick_;
  const uint64_t capacity = std::max<uint64_t>(1, resident_ / kAdaptiveSampleRate);
  // Decay by growing the weight of new hits; rescale long before it overflows.
  hit_weight_ *=
      std::exp2(1.0 / (kAdaptiveHalfLifeLifetimes * static_cast<double>(capacity)));
  const uint32_t key = static_cast<uint32_t>(info.key_hash >> 32);
  const int cls = AdaptiveClassOf(info.hits);
  for (size_t c = 0; c < shadows_.size(); ++c) {
    if (shadows_[c].Reference(key, cls, request_tick_, capacity, new_request)) {
      scores_[c] += hit_weight_;
    }
  }
  if (hit_weight_ > 1e100) {
    for (double& s : scores_) s *= 1e-100;
    hit_weight_ *= 1e-100;
  }
  // Follow the best; on a tie keep the current one (shadows agree until they diverge).
  for (size_t c = 0; c < scores_.size(); ++c) {
    if (scores_[c] > scores_[candidate_]) candidate_ = static_cast<int>(c);
  }
}

void AdaptivePolicy::Reference(BlockId id, const BlockInfo& info) {
  const uint32_t rel = RelativeTick(info.tick);  // may rebase: look the state up after
  uint32_t& s = *FindState(id);
  s = (s & kEligible) | kResident |
      static_cast<uint32_t>(AdaptiveClassOf(info.hits)) << kClassShift | rel;
  if (s & kEligible) Push(id, s);
}

void AdaptivePolicy::OnInsert(BlockId id, const BlockInfo& info) {
  Simulate(info);
  uint32_t& s = StateOf(id);
  if (s & kEligible) --eligible_;
  if (!(s & kResident)) ++resident_;
  s = kResident;
  Reference(id, info);
}

void AdaptivePolicy::OnAccess(BlockId id, const BlockInfo& info) {
  const uint32_t* s = FindState(id);
  if (s == nullptr || !(*s & kResident)) return;
  Simulate(info);
  Reference(id, info);
}

void AdaptivePolicy::OnEligible(BlockId id, bool eligible) {
  uint32_t* s = FindState(id);
  if (s == nullptr || !(*s & kResident) || ((*s & kEligible) != 0) == eligible) return;
  if (eligible) {
    *s |= kEligible;
    ++eligible_;
    Push(id, *s);
  } else {
    *s &= ~kEligible;
    --eligible_;
  }
}

void AdaptivePolicy::OnRemove(BlockId id) {
  uint32_t* s = FindState(id);
  if (s == nullptr || !(*s & kResident)) return;
  if (*s & kEligible) --eligible_;
  *s = 0;
  --resident_;
}

BlockId AdaptivePolicy::PickVictim() {
  const AdaptiveHeadStarts& h = kAdaptiveCandidates[candidate_];
  int victim_class = -1;
  double best = 0;
  for (int c = 0; c < kAdaptiveClasses; ++c) {
    if (!CleanTop(c)) continue;
    const double age = static_cast<double>(heaps_[c].front() >> 32) +
                       h[c] * static_cast<double>(resident_);
    if (victim_class < 0 || age < best) {
      victim_class = c;
      best = age;
    }
  }
  return victim_class < 0 ? kInvalidBlock : static_cast<BlockId>(heaps_[victim_class].front());
}

size_t AdaptivePolicy::MemoryBytes() const {
  size_t bytes = states_.capacity() * sizeof(states_[0]);
  for (const auto& chunk : states_) {
    if (chunk) bytes += (kStateChunkMask + 1) * sizeof(uint32_t);
  }
  for (const auto& h : heaps_) bytes += h.capacity() * sizeof(HeapItem);
  for (const AdaptiveShadow& s : shadows_) bytes += s.MemoryBytes();
  return bytes;
}

}  // namespace kvtier::storage
