#include "common/thread_pool.h"

#include <atomic>
#include <string>
#include <vector>

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

TEST(ThreadPoolTest, KeysTakeTurnsAndNoneTakesMoreThanItsShareWhileOthersWait) {
  common::Notification release;
  common::Notification started;
  ThreadPool pool(1, 8);
  ASSERT_TRUE(pool.TrySchedule("blocker", [&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();  // the one worker is busy: everything below queues
  common::Mutex mu;
  std::vector<std::string> order;
  common::Notification all_ran;
  auto task = [&](std::string name) {
    return [&, name] {
      common::MutexLock lock(&mu);
      order.push_back(name);
      if (order.size() == 12) all_ran.Notify();
    };
  };
  // Alone, tenant a may fill the whole queue...
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(pool.TrySchedule("a", task("a"))) << i;
  EXPECT_FALSE(pool.TrySchedule("a", task("a")));
  // ... but b, under its share (8 / 2 keys), still gets in over the full queue, and a is
  // refused while b waits.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.TrySchedule("b", task("b"))) << i;
  EXPECT_FALSE(pool.TrySchedule("b", task("b")));  // at its share and the queue is full
  EXPECT_FALSE(pool.TrySchedule("a", task("a")));
  EXPECT_EQ(pool.queued(), 12u);
  release.Notify();
  all_ran.WaitForNotification();
  common::MutexLock lock(&mu);
  // Round-robin: a and b alternate while both have tasks queued.
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "a", "b", "a", "b", "a", "b", "a", "a",
                                             "a", "a"}));
}

}  // namespace
}  // namespace kvtier::common
