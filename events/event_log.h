// EventLog: the in-process end of the block events, for consumers that do not speak ZMQ
// (the gRPC KvEvents service, service/events_service.h). An EventSink that numbers every
// event (0, 1, 2, ... per process; one number per event, unlike the ZMQ publisher's one
// per batch), keeps the last `capacity` events for readers, keeps the resident set the
// events imply (namespace, key) -> tiers for snapshots, and forwards every event to an
// optional next sink (the ZMQ publisher), so both streams see the same order.
//
// Cost: one copy of each resident key (plus map overhead) while the log exists, and
// `capacity` retained events. Publish takes a short internal lock and never blocks on a
// reader.
//
// Thread-safe: every method may be called from any thread.
#ifndef KVTIER_EVENTS_EVENT_LOG_H_
#define KVTIER_EVENTS_EVENT_LOG_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "events/block_event.h"

namespace kvtier::events {

class EventLog final : public EventSink {
 public:
  struct Entry {
    uint64_t seq;
    BlockEvent event;
  };
  // One resident block: the tiers that hold it according to the events.
  struct Resident {
    std::string ns;
    std::string key;
    bool hot = false;   // CPU_PINNED
    bool cold = false;  // DISK
  };

  // REQUIRES: capacity >= 1. `next` (may be null) must outlive the log.
  EventLog(size_t capacity, EventSink* next);

  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Sets the sink every event is forwarded to (null: none). REQUIRES: no Publish yet.
  void set_next(EventSink* next) { next_ = next; }

  // Numbers `event`, retains it, applies it to the resident set, then forwards it.
  void Publish(BlockEvent event) override;

  // Returns up to `max` retained events with seq >= from, in order, waiting until at
  // least one exists, `deadline` passes or Close() is called (then possibly none).
  // OUT_OF_RANGE when events from `from` on are no longer retained (the reader must
  // re-sync from Snapshot).
  absl::StatusOr<std::vector<Entry>> Read(uint64_t from, size_t max, absl::Time deadline) const;

  // Appends the resident blocks of namespace `ns` (every namespace when empty) to *out,
  // sorted by (namespace, key), and returns the seq of the next event: the set is
  // exactly what the events before it imply.
  uint64_t Snapshot(std::string_view ns, std::vector<Resident>* out) const;

  // The seq the next event will get.
  uint64_t next_seq() const;

  // Wakes every reader; later reads return at once. Idempotent.
  void Close();

 private:
  const size_t capacity_;
  EventSink* next_;  // set before the first Publish
  mutable common::Mutex mu_;
  mutable common::CondVar cv_;
  std::deque<Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // namespace -> key -> bit 1 hot, bit 2 cold.
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, uint8_t>> resident_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::events

#endif  // KVTIER_EVENTS_EVENT_LOG_H_
