#include "common/thread_pool.h"

#include <utility>

#include "common/logging.h"
#include "common/mutex.h"

namespace kvtier::common {

ThreadPool::ThreadPool(size_t num_threads, size_t max_queued) : max_queued_(max_queued) {
  KVTIER_CHECK(num_threads >= 1 && max_queued >= 1);
  threads_.reserve(num_threads);
  for (size_t i = 0; i < num_threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    common::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
}

bool ThreadPool::TrySchedule(std::function<void()> task) {
  common::MutexLock lock(&mu_);
  if (stopping_ || queue_.size() >= max_queued_) return false;
  queue_.push_back(std::move(task));
  return true;
}

void ThreadPool::Schedule(std::function<void()> task) {
  common::MutexLock lock(&mu_);
  mu_.Await(common::Condition(
      +[](ThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
        return p->queue_.size() < p->max_queued_;
      },
      this));
  queue_.push_back(std::move(task));
}

size_t ThreadPool::queued() const {
  common::MutexLock lock(&mu_);
  return queue_.size();
}

void ThreadPool::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      common::MutexLock lock(&mu_);
      mu_.Await(common::Condition(
          +[](ThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace kvtier::common
