// PutWatchdog: cancels Put streams that stall (docs/design.md §5 Service, admission and
// limits). A Put reactor registers a PutWatch; while it waits on its client for the next
// message it stamps the time. A background thread finishes every stream that has waited
// longer than the progress timeout without receiving a byte, through the PutWatch's
// Stalled callback, so a client cannot hold a stream (and its buffered bytes) forever.
//
// Thread-safe.
#ifndef KVTIER_SERVICE_PUT_WATCHDOG_H_
#define KVTIER_SERVICE_PUT_WATCHDOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>
#include "common/mutex.h"


namespace kvtier::service {

// The watchdog's view of one Put stream. Thread-safe.
class PutWatch {
 public:
  // `stalled` is called on the watchdog thread at most once, never after Close().
  explicit PutWatch(std::function<void()> stalled) : stalled_(std::move(stalled)) {}

  // The stream waits on its client from now (a read is outstanding) / no longer does.
  void StartWaiting(int64_t now_ms) ABSL_LOCKS_EXCLUDED(mu_);
  void StopWaiting() ABSL_LOCKS_EXCLUDED(mu_);

  // The stream is done: returns once no stalled callback runs (unless called from inside
  // it), and none will.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class PutWatchdog;
  // Calls stalled_ (outside mu_) when the stream has waited since before `deadline_ms`.
  // Returns false once the watch is closed (drop it).
  bool Check(int64_t deadline_ms) ABSL_LOCKS_EXCLUDED(mu_);

  const std::function<void()> stalled_;
  common::Mutex mu_;
  int64_t waiting_since_ms_ ABSL_GUARDED_BY(mu_) = -1;  // -1: not waiting
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  bool in_callback_ ABSL_GUARDED_BY(mu_) = false;
  std::thread::id callback_thread_ ABSL_GUARDED_BY(mu_);
};

class PutWatchdog {
 public:
  // Starts the thread; streams waiting longer than timeout_ms are stalled.
  // REQUIRES: timeout_ms > 0.
  explicit PutWatchdog(int64_t timeout_ms);
  ~PutWatchdog();  // stops the thread; REQUIRES: every watch closed
  PutWatchdog(const PutWatchdog&) = delete;
  PutWatchdog& operator=(const PutWatchdog&) = delete;

  // Watches a new stream; `stalled` as PutWatch's.
  std::shared_ptr<PutWatch> Watch(std::function<void()> stalled) ABSL_LOCKS_EXCLUDED(mu_);

  int64_t timeout_ms() const { return timeout_ms_; }

  // Milliseconds on the clock the watch stamps use.
  static int64_t NowMs();

 private:
  void Run();

  const int64_t timeout_ms_;
  common::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<PutWatch>> watches_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_PUT_WATCHDOG_H_
