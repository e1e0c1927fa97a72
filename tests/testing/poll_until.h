// PollUntil: waits for a condition inside other processes (kvtierd nodes), which a test
// cannot wait on directly (header only).
#ifndef KVTIER_TESTS_TESTING_POLL_UNTIL_H_
#define KVTIER_TESTS_TESTING_POLL_UNTIL_H_

#include <chrono>
#include <functional>
#include <thread>

namespace kvtier::testing {

// Polls `done` every 100 ms until it returns true or `timeout` passes; returns its last
// result.
inline bool PollUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_TESTING_POLL_UNTIL_H_
