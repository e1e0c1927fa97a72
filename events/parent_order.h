// ParentOrder: holds a BlockStored whose parent's BlockStored has not passed yet
// (BlockEvent::parent_pending) until it has, or until a bounded wait ends, so that routers,
// which drop a child whose parent they have not seen, index chains stored by parallel
// streams in any order. Used by the ZMQ publisher's thread (events/zmq_publisher.h).
//
// Rule (docs/routers.md "Ordering"): a BlockStored is held when it is parent_pending, or
// when its parent is itself held here. Per namespace, a held event leaves right after the
// first BlockStored (any medium) that lists its parent key, together with every held event
// that this releases in turn, in arrival order; or `wait` after it arrived (the parent
// may be held by another node, evicted, or never come). A BlockRemoved naming a key of a
// held event, or an AllBlocksCleared of its namespace, releases that held event first,
// so the end state a consumer reaches applying the output in order equals the input's.
// Every event leaves exactly once; only held events are reordered.
//
// Thread-compatible (one thread).
#ifndef KVTIER_EVENTS_PARENT_ORDER_H_
#define KVTIER_EVENTS_PARENT_ORDER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "events/block_event.h"

namespace kvtier::events {

class ParentOrder {
 public:
  // `wait`: the longest an event is held (zero or less: nothing is held). `max_held`:
  // beyond it the oldest held event leaves at once (>= 1).
  ParentOrder(absl::Duration wait, size_t max_held) : wait_(wait), max_held_(max_held) {}

  // Takes `event`, arrived at `now`, and appends to `ready` what may leave now, in order.
  void Add(BlockEvent event, absl::Time now, std::vector<BlockEvent>* ready);
  // Appends to `ready` the held events whose wait ended at or before `now`.
  void Expire(absl::Time now, std::vector<BlockEvent>* ready);
  // Appends every held event to `ready` (Flush, shutdown).
  void ReleaseAll(std::vector<BlockEvent>* ready);

  // When the oldest held event's wait ends; nullopt when none is held.
  std::optional<absl::Time> next_deadline() const;
  size_t held() const { return held_.size(); }
  // Held events that left because their wait ended (or max_held was reached).
  uint64_t expired() const { return expired_; }

 private:
  struct Held {
    BlockEvent event;
    absl::Time deadline;
  };

  // Appends `event` to `ready`, then releases (recursively) what waited for its keys.
  void Emit(BlockEvent event, std::vector<BlockEvent>* ready);
  // Removes held event `id` from every structure and returns it.
  BlockEvent Take(uint64_t id);
  // Removes held event `id` and emits it.
  void Release(uint64_t id, std::vector<BlockEvent>* ready);
  static std::string WaitKey(const std::string& ns, const std::string& key);

  const absl::Duration wait_;
  const size_t max_held_;
  uint64_t next_id_ = 0;
  uint64_t expired_ = 0;
  std::map<uint64_t, Held> held_;  // by arrival (so also by deadline)
  // WaitKey(ns, parent key) -> ids of held events waiting for it.
  absl::flat_hash_map<std::string, std::vector<uint64_t>> waiting_;
  // WaitKey(ns, key) -> how many held events list the key.
  absl::flat_hash_map<std::string, int> held_keys_;
};

}  // namespace kvtier::events

#endif  // KVTIER_EVENTS_PARENT_ORDER_H_
