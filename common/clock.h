// Injectable time source. Production code takes a Clock* so tests can use a FakeClock
// (tests/testing/fake_clock.h) instead of sleeping.
#ifndef KVTIER_COMMON_CLOCK_H_
#define KVTIER_COMMON_CLOCK_H_

#include <cstdint>

namespace kvtier::common {

// A monotonic clock. Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // Returns microseconds since an arbitrary fixed epoch; never decreases.
  virtual int64_t NowMicros() const = 0;
  int64_t NowMillis() const { return NowMicros() / 1000; }
};

// Returns the process-wide steady clock. Never null; lives forever.
Clock* RealClock();

}  // namespace kvtier::common

#endif  // KVTIER_COMMON_CLOCK_H_
