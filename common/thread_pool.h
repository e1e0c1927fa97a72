// A fixed-size pool of worker threads with a bounded queue: the executor that storage and
// codec work runs on so gRPC reactions never block.
#ifndef KVTIER_COMMON_THREAD_POOL_H_
#define KVTIER_COMMON_THREAD_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace kvtier::common {

// Thread-safe. Tasks run in FIFO order on one of `num_threads` threads. The destructor
// runs every task already queued, then joins the threads.
class ThreadPool {
 public:
  // REQUIRES: num_threads >= 1, max_queued >= 1.
  ThreadPool(size_t num_threads, size_t max_queued);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task` unless `max_queued` tasks are already waiting; returns false (and drops
  // nothing already queued) when full. Never blocks: safe from a gRPC reaction.
  bool TrySchedule(std::function<void()> task);

  // Queues `task`, waiting while the queue is full. Must not be called from a pool thread
  // or a gRPC reaction.
  void Schedule(std::function<void()> task);

  // Returns the number of tasks waiting (not running).
  size_t queued() const;

 private:
  void WorkerLoop();

  const size_t max_queued_;
  mutable common::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvtier::common

#endif  // KVTIER_COMMON_THREAD_POOL_H_
