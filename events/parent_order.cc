#include "events/parent_order.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvtier::events {

std::string ParentOrder::WaitKey(const std::string& ns, const std::string& key) {
  return absl::StrCat(ns.size(), ":", ns, key);
}

void ParentOrder::Add(BlockEvent event, absl::Time now, std::vector<BlockEvent>* ready) {
  if (event.kind == EventKind::kStored && event.parent_key.has_value() &&
      wait_ > absl::ZeroDuration() &&
      (event.parent_pending || held_keys_.contains(WaitKey(event.ns, *event.parent_key)))) {
    // Its parent is still to come, or held here itself (then this one is not pending in
    // the store, yet must not overtake it).
    if (held_.size() >= max_held_) {
      ++expired_;
      Release(held_.begin()->first, ready);
    }
    const uint64_t id = next_id_++;
    waiting_[WaitKey(event.ns, *event.parent_key)].push_back(id);
    for (const std::string& key : event.keys) ++held_keys_[WaitKey(event.ns, key)];
    held_.emplace(id, Held{std::move(event), now + wait_});
    return;
  }
  if (event.kind != EventKind::kStored && !held_.empty()) {
    // Held events this one touches leave first, so the end state stays the input's.
    std::vector<uint64_t> touched;
    for (const auto& [id, h] : held_) {
      if (h.event.ns != event.ns) continue;
      const bool hit = event.kind == EventKind::kAllCleared ||
                        std::any_of(h.event.keys.begin(), h.event.keys.end(), [&](const auto& k) {
                          return std::find(event.keys.begin(), event.keys.end(), k) !=
                                 event.keys.end();
                        });
      if (hit) touched.push_back(id);
    }
    for (uint64_t id : touched) {
      if (held_.contains(id)) Release(id, ready);
    }
  }
  Emit(std::move(event), ready);
}

void ParentOrder::Expire(absl::Time now, std::vector<BlockEvent>* ready) {
  while (!held_.empty() && held_.begin()->second.deadline <= now) {
    ++expired_;
    Release(held_.begin()->first, ready);
  }
}

void ParentOrder::ReleaseAll(std::vector<BlockEvent>* ready) {
  while (!held_.empty()) Release(held_.begin()->first, ready);
}

std::optional<absl::Time> ParentOrder::next_deadline() const {
  if (held_.empty()) return std::nullopt;
  return held_.begin()->second.deadline;
}

BlockEvent ParentOrder::Take(uint64_t id) {
  auto it = held_.find(id);
  BlockEvent event = std::move(it->second.event);
  held_.erase(it);
  auto w = waiting_.find(WaitKey(event.ns, *event.parent_key));
  if (w != waiting_.end()) {
    std::erase(w->second, id);
    if (w->second.empty()) waiting_.erase(w);
  }
  for (const std::string& key : event.keys) {
    auto k = held_keys_.find(WaitKey(event.ns, key));
    if (k != held_keys_.end() && --k->second == 0) held_keys_.erase(k);
  }
  return event;
}

void ParentOrder::Release(uint64_t id, std::vector<BlockEvent>* ready) {
  Emit(Take(id), ready);
}

void ParentOrder::Emit(BlockEvent event, std::vector<BlockEvent>* ready) {
  if (event.kind != EventKind::kStored || waiting_.empty()) {
    ready->push_back(std::move(event));
    return;
  }
  std::vector<uint64_t> children;
  for (const std::string& key : event.keys) {
    auto w = waiting_.find(WaitKey(event.ns, key));
    if (w == waiting_.end()) continue;
    children.insert(children.end(), w->second.begin(), w->second.end());
    waiting_.erase(w);
  }
  ready->push_back(std::move(event));
  std::sort(children.begin(), children.end());  // arrival order
  for (uint64_t id : children) {
    if (held_.contains(id)) Emit(Take(id), ready);
  }
}

}  // namespace kvtier::events
