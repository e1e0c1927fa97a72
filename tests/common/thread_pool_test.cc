#include "common/thread_pool.h"

#include <atomic>

#include "gtest/gtest.h"
#include "common/mutex.h"

namespace kvtier::common {
namespace {

TEST(ThreadPoolTest, RunsEveryScheduledTaskBeforeDestruction) {
  std::atomic<int> ran{0};
  {
    ThreadPool pool(2, 64);
    for (int i = 0; i < 50; ++i) pool.Schedule([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 50);
}

TEST(ThreadPoolTest, TryScheduleRefusesWhenQueueFull) {
  common::Notification release;
  common::Notification started;
  ThreadPool pool(1, 1);
  ASSERT_TRUE(pool.TrySchedule([&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();          // the worker is busy with task 1
  EXPECT_TRUE(pool.TrySchedule([] {}));   // fills the single queue slot
  EXPECT_FALSE(pool.TrySchedule([] {}));  // backpressure, nothing dropped
  EXPECT_EQ(pool.queued(), 1u);
  release.Notify();
}

}  // namespace
}  // namespace kvtier::common
