// FakeClock: a common::Clock that moves only when a test advances it, so time-dependent
// behaviour (pin expiry, peer health, leases) is tested without sleeping.
// Thread-safe.
#ifndef KVTIER_TESTS_TESTING_FAKE_CLOCK_H_
#define KVTIER_TESTS_TESTING_FAKE_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "common/clock.h"

namespace kvtier::testing {

class FakeClock final : public common::Clock {
 public:
  // Starts at `start_us` (not 0, so "time 0" never means "unset" by accident).
  explicit FakeClock(int64_t start_us = 1'000'000) : now_us_(start_us) {}

  int64_t NowMicros() const override { return now_us_.load(std::memory_order_relaxed); }
  void AdvanceMicros(int64_t us) { now_us_.fetch_add(us, std::memory_order_relaxed); }
  void AdvanceMillis(int64_t ms) { AdvanceMicros(ms * 1000); }

 private:
  std::atomic<int64_t> now_us_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_FAKE_CLOCK_H_
