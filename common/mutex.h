// The project's lock types: kvtier::common::Mutex, MutexLock, CondVar, Condition and
// Notification. Every lock in the tree goes through these names.
//
// Normally they are exactly absl::Mutex, absl::MutexLock, absl::CondVar, absl::Condition
// and absl::Notification (aliases: no behaviour or performance difference). With
// KVTIER_TSAN defined (cmake -DKVTIER_TSAN=ON, scripts/tsan.sh) they are small classes
// with the same interface over std::mutex / std::condition_variable: Debian's Abseil is
// not built with ThreadSanitizer, so TSAN cannot see absl::Mutex and reports every access
// guarded by one; it does understand the std:: types, so what it still reports is real.
//
// Both variants carry the Clang thread-safety annotations (ABSL_LOCKABLE,
// ABSL_EXCLUSIVE_LOCK_FUNCTION, ...), so ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED
// on data and functions keep working. The TSAN variant implements only what the tree
// uses: Lock / Unlock / TryLock / AssertHeld, Await / AwaitWithTimeout /
// AwaitWithDeadline on a Condition (a bool*, a function of one pointer, or an object and
// a member function), CondVar Wait / WaitWithTimeout / WaitWithDeadline / Signal /
// SignalAll, and
// Notification. Conditions are re-evaluated whenever the mutex is released.
//
// Thread-safe (they are the synchronization).
#ifndef KVTIER_COMMON_MUTEX_H_
#define KVTIER_COMMON_MUTEX_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#ifdef KVTIER_TSAN
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#endif

namespace kvtier::common {

#ifndef KVTIER_TSAN

using Mutex = absl::Mutex;
using MutexLock = absl::MutexLock;
using CondVar = absl::CondVar;
using Condition = absl::Condition;
using Notification = absl::Notification;

#else  // KVTIER_TSAN

// A predicate evaluated with the mutex held.
class Condition {
 public:
  explicit Condition(const bool* flag) : eval_([flag] { return *flag; }) {}
  template <typename T>
  Condition(bool (*fn)(T*), T* arg) : eval_([fn, arg] { return fn(arg); }) {}
  template <typename T>
  Condition(T* object, bool (T::*method)()) : eval_([object, method] { return (object->*method)(); }) {}
  template <typename T>
  Condition(const T* object, bool (T::*method)() const)
      : eval_([object, method] { return (object->*method)(); }) {}

  bool Eval() const { return eval_(); }

 private:
  std::function<bool()> eval_;
};

class CondVar;

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    mu_.unlock();
    changed_.notify_all();  // waiters in Await re-evaluate their conditions
  }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

  // REQUIRES: held. Returns with the mutex held and cond true.
  void Await(const Condition& cond) {
    changed_.notify_all();  // waiting releases the mutex: what the caller changed counts
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    changed_.wait(lock, [&] { return cond.Eval(); });
    lock.release();
  }
  // REQUIRES: held. Returns cond's value, waiting at most `timeout` for it to be true.
  bool AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
    return AwaitUntil(cond, std::chrono::steady_clock::now() + Clamp(timeout));
  }
  bool AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
    return AwaitWithTimeout(cond, deadline - absl::Now());
  }

 private:
  friend class CondVar;

  // Durations past a year are "forever" for every caller; this keeps the arithmetic in range.
  static std::chrono::nanoseconds Clamp(absl::Duration d) {
    if (d < absl::ZeroDuration()) return std::chrono::nanoseconds(0);
    if (d > absl::Hours(24 * 365)) d = absl::Hours(24 * 365);
    return absl::ToChronoNanoseconds(d);
  }
  bool AwaitUntil(const Condition& cond, std::chrono::steady_clock::time_point until) {
    changed_.notify_all();  // as in Await
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    const bool result = changed_.wait_until(lock, until, [&] { return cond.Eval(); });
    lock.release();
    return result;
  }

  std::mutex mu_;
  std::condition_variable changed_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  // REQUIRES: mu held. Releases it while waiting; holds it again on return.
  void Wait(Mutex* mu) {
    mu->changed_.notify_all();  // releasing the mutex here is a release for Await too
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // As Wait; true if it timed out.
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
    mu->changed_.notify_all();
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool timed_out = cv_.wait_for(lock, Mutex::Clamp(timeout)) == std::cv_status::timeout;
    lock.release();
    return timed_out;
  }
  // As Wait; true if `deadline` passed first. absl::InfiniteFuture() waits for a Signal
  // (a year, as Mutex::Clamp bounds every wait; no caller waits that long).
  bool WaitWithDeadline(Mutex* mu, absl::Time deadline) {
    return WaitWithTimeout(mu, deadline - absl::Now());
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

class Notification {
 public:
  Notification() = default;
  explicit Notification(bool notified) : notified_(notified) {}

  void Notify() {
    MutexLock lock(&mu_);
    notified_ = true;
  }
  bool HasBeenNotified() const {
    MutexLock lock(&mu_);
    return notified_;
  }
  void WaitForNotification() const {
    MutexLock lock(&mu_);
    mu_.Await(Condition(&notified_));
  }
  bool WaitForNotificationWithTimeout(absl::Duration timeout) const {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(Condition(&notified_), timeout);
  }

 private:
  mutable Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

#endif  // KVTIER_TSAN

}  // namespace kvtier::common

#endif  // KVTIER_COMMON_MUTEX_H_
