#include "common/thread_pool.h"

#include <algorithm>
#include <string>
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
  return TrySchedule(std::string_view(), std::move(task));
}

bool ThreadPool::TrySchedule(std::string_view key, std::function<void()> task) {
  common::MutexLock lock(&mu_);
  if (stopping_) return false;
  auto it = lanes_.find(std::string(key));
  const size_t mine = it == lanes_.end() ? 0 : it->second.size();
  const size_t keys = lanes_.size() + (mine == 0 ? 1 : 0);
  const size_t share = std::max<size_t>(1, max_queued_ / keys);
  if (keys > 1 && mine >= share) return false;        // over its share while others wait
  if (queued_ >= max_queued_ && (keys == 1 || mine >= share)) return false;
  PushLocked(key, std::move(task));
  return true;
}

void ThreadPool::PushLocked(std::string_view key, std::function<void()> task) {
  auto [it, inserted] = lanes_.try_emplace(std::string(key));
  if (inserted) turns_.emplace_back(key);
  it->second.push_back(std::move(task));
  ++queued_;
}

void ThreadPool::Schedule(std::function<void()> task) {
  common::MutexLock lock(&mu_);
  mu_.Await(common::Condition(
      +[](ThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
        return p->queued_ < p->max_queued_;
      },
      this));
  PushLocked(std::string_view(), std::move(task));
}

size_t ThreadPool::queued() const {
  common::MutexLock lock(&mu_);
  return queued_;
}

void ThreadPool::WorkerLoop() {
  while (true) {
    std::function<void()> task;
    {
      common::MutexLock lock(&mu_);
      mu_.Await(common::Condition(
          +[](ThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || p->queued_ > 0;
          },
          this));
      if (queued_ == 0) return;  // stopping and drained
      // The key whose turn it is runs one task, then goes to the back of the line.
      std::string key = std::move(turns_.front());
      turns_.pop_front();
      auto it = lanes_.find(key);
      task = std::move(it->second.front());
      it->second.pop_front();
      --queued_;
      if (it->second.empty()) {
        lanes_.erase(it);
      } else {
        turns_.push_back(std::move(key));
      }
    }
    task();
  }
}

}  // namespace kvtier::common
