// The contract of common/mutex.h that both of its variants keep (Abseil's mutex normally,
// std::mutex under KVTIER_TSAN, built and run by scripts/tsan.sh): a waiter's condition is
// re-evaluated whenever the mutex is released, also when another thread releases it by
// waiting.
#include "common/mutex.h"

#include <chrono>
#include <thread>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace kvtier::common {
namespace {

struct Shared {
  Mutex mu;
  int arrived ABSL_GUARDED_BY(mu) = 0;
  bool released ABSL_GUARDED_BY(mu) = false;
};

bool Arrived(Shared* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->arrived > 0; }
bool Released(Shared* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->released; }

TEST(MutexTest, AnAwaitSeesWhatAnotherThreadChangedBeforeItAwaited) {
  // The shape of a fake that counts a blocked call and then blocks until released (as
  // tests/testing/fake_cold_tier.cc does), watched by a test that waits for the count and
  // then releases it. With the TSAN variant before its fix the watcher was never woken by
  // the other thread's Await, so that thread waited out its whole timeout.
  Shared s;
  bool was_released = false;
  std::thread blocked([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the watcher waits first
    MutexLock lock(&s.mu);
    s.arrived++;
    was_released = s.mu.AwaitWithTimeout(Condition(&Released, &s), absl::Seconds(10));
  });
  {
    MutexLock lock(&s.mu);
    s.mu.AwaitWithTimeout(Condition(&Arrived, &s), absl::Seconds(60));
    s.released = true;
  }
  blocked.join();
  EXPECT_TRUE(was_released);
}

TEST(MutexTest, ACondVarWaitAlsoWakesAwaiters) {
  Shared s;
  CondVar released;
  bool timed_out = true;
  std::thread waiting([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    MutexLock lock(&s.mu);
    s.arrived++;
    while (!s.released) {
      timed_out = released.WaitWithTimeout(&s.mu, absl::Seconds(10));
      if (timed_out) break;
    }
  });
  {
    MutexLock lock(&s.mu);
    s.mu.AwaitWithTimeout(Condition(&Arrived, &s), absl::Seconds(60));
    s.released = true;
  }
  released.SignalAll();
  waiting.join();
  EXPECT_FALSE(timed_out);
}

}  // namespace
}  // namespace kvtier::common
