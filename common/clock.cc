#include "common/clock.h"

#include <chrono>

namespace kvtier::common {
namespace {

class SteadyClock final : public Clock {
 public:
  int64_t NowMicros() const override {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

Clock* RealClock() {
  static SteadyClock* clock = new SteadyClock();  // never destroyed: safe at exit
  return clock;
}

}  // namespace kvtier::common
