// RecordingEventSink: an EventSink that keeps every event in memory, for tests of code
// that reports events (the store, the service). Thread-safe.
#ifndef KVTIER_TESTS_EVENTS_RECORDING_SINK_H_
#define KVTIER_TESTS_EVENTS_RECORDING_SINK_H_

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"
#include "events/block_event.h"

namespace kvtier::events::testing {

class RecordingEventSink final : public EventSink {
 public:
  void Publish(BlockEvent event) override {
    common::MutexLock l(&mu_);
    events_.push_back(std::move(event));
  }
  // Returns the events reported since the last call, in order.
  std::vector<BlockEvent> Take() {
    common::MutexLock l(&mu_);
    return std::exchange(events_, {});
  }

 private:
  common::Mutex mu_;
  std::vector<BlockEvent> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::events::testing

#endif  // KVTIER_TESTS_EVENTS_RECORDING_SINK_H_
