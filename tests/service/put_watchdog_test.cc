#include "service/put_watchdog.h"

#include <atomic>
#include <memory>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "common/mutex.h"

namespace kvtier::service {
namespace {

constexpr int64_t kTimeoutMs = 20;
constexpr absl::Duration kPatience = absl::Seconds(10);

TEST(PutWatchdogTest, OnlyAStreamThatWaitsPastTheTimeoutIsStalledAndOnlyOnce) {
  PutWatchdog watchdog(kTimeoutMs);
  std::atomic<int> busy_calls{0}, waiting_calls{0};
  common::Notification stalled;
  auto busy = watchdog.Watch([&] { ++busy_calls; });  // never waits on its client
  auto waiting = watchdog.Watch([&] {
    ++waiting_calls;
    stalled.Notify();
  });
  waiting->StartWaiting(PutWatchdog::NowMs());
  ASSERT_TRUE(stalled.WaitForNotificationWithTimeout(kPatience));

  // A later stall proves the watchdog made more passes over both watches.
  common::Notification second;
  auto later = watchdog.Watch([&] { second.Notify(); });
  later->StartWaiting(PutWatchdog::NowMs());
  ASSERT_TRUE(second.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(busy_calls.load(), 0);
  EXPECT_EQ(waiting_calls.load(), 1);
  busy->Close();
  waiting->Close();
  later->Close();
}

TEST(PutWatchdogTest, StopWaitingAndCloseDisarm) {
  PutWatchdog watchdog(kTimeoutMs);
  std::atomic<int> calls{0};
  auto stopped = watchdog.Watch([&] { ++calls; });
  stopped->StartWaiting(PutWatchdog::NowMs() - 10 * kTimeoutMs);
  stopped->StopWaiting();
  auto closed = watchdog.Watch([&] { ++calls; });
  closed->StartWaiting(PutWatchdog::NowMs() - 10 * kTimeoutMs);
  closed->Close();
  common::Notification control;
  auto fires = watchdog.Watch([&] { control.Notify(); });
  fires->StartWaiting(PutWatchdog::NowMs());
  ASSERT_TRUE(control.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(calls.load(), 0);
  stopped->Close();
  fires->Close();
}

// The callback finishes the call, and gRPC may run OnDone (which closes the watch) on the
// same thread: Close from inside the callback must not wait for itself.
TEST(PutWatchdogTest, CloseFromInsideTheCallbackReturns) {
  PutWatchdog watchdog(kTimeoutMs);
  common::Notification done;
  std::shared_ptr<PutWatch> watch;
  watch = watchdog.Watch([&] {
    watch->Close();
    done.Notify();
  });
  watch->StartWaiting(PutWatchdog::NowMs());
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kPatience));
}

}  // namespace
}  // namespace kvtier::service
