// TieredStoreImpl: write-back debt (hot blocks without a cold record), the background
// flusher that keeps it under StoreOptions::max_unflushed_*, Put's hard bound, and the
// deadline-bounded Flush (tiered_store_impl.h, storage/write_back.h).
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "storage/tiered_store_impl.h"

namespace kvtier::storage {
namespace {

// Flush marks this many index ids busy at a time (one pass of the index under mu_).
constexpr BlockId kFlushScanIds = 4096;

// Whether the store runs a background flusher (StartFlusher).
bool FlusherEnabled(const StoreOptions& o) {
  return o.background_demotion && (o.max_unflushed_bytes != 0 || o.max_unflushed_blocks != 0);
}

}  // namespace

void TieredStoreImpl::CountDebtLocked(BlockId id, bool was_unflushed) {
  const Entry& e = index_.at(id);
  const bool now_unflushed = Unflushed(e);
  if (now_unflushed == was_unflushed) return;
  NsState& ns = *namespaces_[e.ns];
  if (now_unflushed) {
    ++unflushed_blocks_;
    unflushed_bytes_ += e.payload_bytes;
    ++ns.unflushed_blocks;
    ns.unflushed_bytes += e.payload_bytes;
    unflushed_fifo_.push_back(id);
    if (unflushed_fifo_.size() > 2 * unflushed_blocks_ + 1024) {
      // Mostly stale ids (flushed or demoted since) and repeats (a block flushed, then
      // put again, is queued again while its old entry looks live too): keep the first
      // entry of each live id, in order, so the queue shrinks to at most unflushed_blocks_
      // and this pass stays amortized O(1) per put.
      absl::flat_hash_set<BlockId> seen;
      seen.reserve(unflushed_blocks_);
      std::erase_if(unflushed_fifo_, [this, &seen](BlockId i) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !Unflushed(index_.at(i)) || !seen.insert(i).second;  // mu_ is held
      });
    }
    if (FlusherEnabled(options_) && DebtAboveLocked(3, 4)) flush_cv_.Signal();
  } else {
    --unflushed_blocks_;
    unflushed_bytes_ -= e.payload_bytes;
    --ns.unflushed_blocks;
    ns.unflushed_bytes -= e.payload_bytes;
  }
  over_debt_.store(DebtAboveLocked(1, 1), std::memory_order_relaxed);
}

bool TieredStoreImpl::DebtAboveLocked(uint64_t num, uint64_t den) const {
  const uint64_t max_bytes = options_.max_unflushed_bytes;
  const uint64_t max_blocks = options_.max_unflushed_blocks;
  return (max_bytes != 0 && unflushed_bytes_ * den > max_bytes * num) ||
         (max_blocks != 0 && unflushed_blocks_ * den > max_blocks * num);
}

bool TieredStoreImpl::FlushOldest() {
  BlockId id = kNoEntry;
  {
    common::MutexLock lock(&mu_);
    while (!unflushed_fifo_.empty() && id == kNoEntry) {
      const BlockId candidate = unflushed_fifo_.front();
      unflushed_fifo_.pop_front();
      const Entry& e = index_.at(candidate);
      if (Unflushed(e) && !(e.flags & Entry::kBusy)) id = candidate;
    }
    if (id == kNoEntry) return false;
    index_.at(id).flags |= Entry::kBusy;
    UpdateEligibilityLocked(id);
  }
  if (DemoteMarked(id, DemoteMode::kCopyOnly) != DemoteResult::kFailed) return true;
  common::MutexLock lock(&mu_);
  if (Unflushed(index_.at(id))) unflushed_fifo_.push_back(id);  // retried later
  return false;
}

void TieredStoreImpl::LimitUnflushed() {
  while (over_debt_.load(std::memory_order_relaxed)) {
    if (!FlushOldest()) return;
  }
}

void TieredStoreImpl::UnmarkBusyLocked(BlockId id) {
  Entry& e = index_.at(id);
  e.flags &= ~Entry::kBusy;
  if (e.flags & Entry::kHot) {
    UpdateEligibilityLocked(id);
  } else {
    index_.MaybeFree(id);  // the busy mark kept a removed entry alive
  }
}

void TieredStoreImpl::StartFlusher() {
  if (FlusherEnabled(options_)) flusher_ = std::thread([this] { FlusherLoop(); });
}

void TieredStoreImpl::FlusherLoop() {
  while (true) {
    {
      common::MutexLock lock(&mu_);
      while (!stopping_ && !DebtAboveLocked(3, 4)) flush_cv_.Wait(&mu_);
      if (stopping_) return;
    }
    // Down to half the bound, so Puts rarely meet the hard bound; a failed write (cold
    // tier unavailable) waits for the next wake-up.
    while (true) {
      {
        common::MutexLock lock(&mu_);
        if (stopping_ || !DebtAboveLocked(1, 2)) break;
      }
      if (!FlushOldest()) {
        common::MutexLock lock(&mu_);
        if (!stopping_) flush_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
        break;
      }
    }
  }
}

absl::StatusOr<FlushProgress> TieredStoreImpl::Flush(std::string_view ns_name,
                                                     int64_t deadline_ms) {
  int ns_id = -1;
  BlockId limit;
  {
    common::MutexLock lock(&mu_);
    if (!ns_name.empty()) {
      ASSIGN_OR_RETURN(NsState * ns, FindNsLocked(ns_name));
      ns_id = ns->id;
    }
    limit = index_.id_limit();
  }
  FlushProgress progress;
  bool failed = false;
  bool stopped = false;
  std::vector<BlockId> batch;
  for (BlockId start = 0; start < limit && !stopped; start += kFlushScanIds) {
    batch.clear();
    {
      common::MutexLock lock(&mu_);
      const BlockId end = std::min<BlockId>(start + kFlushScanIds, index_.id_limit());
      for (BlockId id = start; id < end; ++id) {
        Entry& e = index_.at(id);
        if (Unflushed(e) && !(e.flags & Entry::kBusy) && (ns_id < 0 || e.ns == ns_id)) {
          e.flags |= Entry::kBusy;
          UpdateEligibilityLocked(id);
          batch.push_back(id);
        }
      }
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      // At least one block per call, so a caller looping on Flush always progresses.
      if (progress.flushed_blocks > 0 && clock_->NowMillis() >= deadline_ms) {
        stopped = true;
        common::MutexLock lock(&mu_);
        for (size_t j = i; j < batch.size(); ++j) UnmarkBusyLocked(batch[j]);
        break;
      }
      // kGone is fine: the block was deleted or replaced after Flush picked it.
      switch (DemoteMarked(batch[i], DemoteMode::kCopyOnly)) {
        case DemoteResult::kMoved:
          ++progress.flushed_blocks;
          break;
        case DemoteResult::kFailed:
          failed = true;
          break;
        case DemoteResult::kGone:
          break;
      }
    }
  }
  RETURN_IF_ERROR(cold_->Sync());
  if (failed) return absl::UnavailableError("flush: some blocks could not be written to cold");
  common::MutexLock lock(&mu_);
  if (ns_id < 0) {
    progress.remaining_blocks = unflushed_blocks_;
    progress.remaining_bytes = unflushed_bytes_;
  } else {
    progress.remaining_blocks = namespaces_[ns_id]->unflushed_blocks;
    progress.remaining_bytes = namespaces_[ns_id]->unflushed_bytes;
  }
  progress.done = !stopped;
  return progress;
}

}  // namespace kvtier::storage
