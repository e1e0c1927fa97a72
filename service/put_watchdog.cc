#include "service/put_watchdog.h"

#include <algorithm>
#include <utility>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/mutex.h"

namespace kvtier::service {

void PutWatch::StartWaiting(int64_t now_ms) {
  common::MutexLock lock(&mu_);
  waiting_since_ms_ = now_ms;
}

void PutWatch::StopWaiting() {
  common::MutexLock lock(&mu_);
  waiting_since_ms_ = -1;
}

void PutWatch::Close() {
  common::MutexLock lock(&mu_);
  closed_ = true;
  // Called from inside the callback (it finished the call, and OnDone ran inline): the
  // callback returns without touching the stream again.
  if (in_callback_ && callback_thread_ == std::this_thread::get_id()) return;
  mu_.Await(common::Condition(
      +[](bool* in_callback) { return !*in_callback; }, &in_callback_));
}

bool PutWatch::Check(int64_t deadline_ms) {
  {
    common::MutexLock lock(&mu_);
    if (closed_) return false;
    if (fired_ || waiting_since_ms_ < 0 || waiting_since_ms_ > deadline_ms) return true;
    fired_ = true;
    in_callback_ = true;
    callback_thread_ = std::this_thread::get_id();
  }
  // Outside mu_: the callback finishes the call, which may run the reactor's OnDone (and
  // so Close) on this thread.
  stalled_();
  common::MutexLock lock(&mu_);
  in_callback_ = false;
  return !closed_;
}

int64_t PutWatchdog::NowMs() { return common::RealClock()->NowMicros() / 1000; }

PutWatchdog::PutWatchdog(int64_t timeout_ms)
    : timeout_ms_(timeout_ms), thread_([this] { Run(); }) {}

PutWatchdog::~PutWatchdog() {
  {
    common::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

std::shared_ptr<PutWatch> PutWatchdog::Watch(std::function<void()> stalled) {
  auto watch = std::make_shared<PutWatch>(std::move(stalled));
  common::MutexLock lock(&mu_);
  watches_.push_back(watch);
  return watch;
}

void PutWatchdog::Run() {
  // Check a few times per timeout, so a stall is cut within about 1.25 timeouts.
  const absl::Duration tick = absl::Milliseconds(std::clamp<int64_t>(timeout_ms_ / 4, 1, 1000));
  for (;;) {
    std::vector<std::shared_ptr<PutWatch>> watches;
    {
      common::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(common::Condition(&stop_), tick);
      if (stop_) return;
      watches = watches_;
    }
    const int64_t deadline = NowMs() - timeout_ms_;
    std::vector<PutWatch*> closed;
    for (const auto& w : watches) {
      if (!w->Check(deadline)) closed.push_back(w.get());
    }
    if (closed.empty()) continue;
    common::MutexLock lock(&mu_);
    watches_.erase(std::remove_if(watches_.begin(), watches_.end(),
                                  [&closed](const std::shared_ptr<PutWatch>& w) {
                                    return std::find(closed.begin(), closed.end(), w.get()) !=
                                           closed.end();
                                  }),
                   watches_.end());
  }
}

}  // namespace kvtier::service
