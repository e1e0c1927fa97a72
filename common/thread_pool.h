// A fixed-size pool of worker threads with a bounded queue: the executor that storage and
// codec work runs on so gRPC reactions never block. Tasks may carry a fairness key (the
// server passes the caller's tenant): keys take turns (round-robin), and while more than
// one key has tasks queued no key may queue more than its share of the bound.
#ifndef KVTIER_COMMON_THREAD_POOL_H_
#define KVTIER_COMMON_THREAD_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace kvtier::common {

// Thread-safe. Tasks of one key run in FIFO order on one of `num_threads` threads; keys
// with queued tasks are served in turn, one task each. The destructor runs every task
// already queued, then joins the threads.
class ThreadPool {
 public:
  // REQUIRES: num_threads >= 1, max_queued >= 1.
  ThreadPool(size_t num_threads, size_t max_queued);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task` unless `max_queued` tasks are already waiting; returns false (and drops
  // nothing already queued) when full. Never blocks: safe from a gRPC reaction.
  // Same as TrySchedule("", task).
  bool TrySchedule(std::function<void()> task);
  // Queues `task` under fairness key `key`. With K keys holding queued tasks (this one
  // included), a key already holding max_queued / K is refused while another key waits,
  // and a key under that share is admitted even when the queue is full, so one key
  // cannot lock the others out; the queue holds at most 2 * max_queued tasks. Returns
  // false (queuing nothing) when refused or stopping. Never blocks.
  bool TrySchedule(std::string_view key, std::function<void()> task);

  // Queues `task` (key ""), waiting while the queue is full. Must not be called from a
  // pool thread or a gRPC reaction.
  void Schedule(std::function<void()> task);

  // Returns the number of tasks waiting (not running).
  size_t queued() const;

 private:
  void WorkerLoop();
  void PushLocked(std::string_view key, std::function<void()> task)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_queued_;
  mutable common::Mutex mu_;
  // Queued tasks per key (a key is present only while it has some), and the keys in the
  // order they are served next.
  absl::flat_hash_map<std::string, std::deque<std::function<void()>>> lanes_
      ABSL_GUARDED_BY(mu_);
  std::deque<std::string> turns_ ABSL_GUARDED_BY(mu_);
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier::common

#endif  // KVTIER_COMMON_THREAD_POOL_H_
