// TieredStoreImpl: prefetch on Lookup (tiered_store_impl.h, docs/prefetch.md). A Lookup
// with LeaseOptions::prefetch hands its reported prefix to the reader threads (O(1) on
// its thread); a reader queues the run's cold blocks, and the readers promote them to
// hot in queue order, a batch per cold-tier read. Each tracked block moves kQueued ->
// kInFlight -> kUnread and is forgotten when a Get reads it (a hit), when it leaves hot
// unread (wasted, evicted), when its lease or deadline ends first (wasted, expired; or
// cancelled while still queued), or when it stops being a cold block worth reading
// (cancelled). An unread prefetched block is not an eligible victim, so only the
// fallback of a hot tier with nothing else to demote evicts it, and that is counted.
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/logging.h"
#include "common/mutex.h"
#include "storage/tiered_store_impl.h"

namespace kvtier::storage {

void TieredStoreImpl::StartPrefetchers() {
  for (uint32_t i = 0; i < options_.prefetch_threads; ++i) {
    prefetchers_.emplace_back([this] { PrefetchLoop(); });
  }
}

void TieredStoreImpl::QueuePrefetchLocked(NsState* ns, std::vector<BlockId> ids,
                                          const LookupResult& out) {
  // On the Lookup's thread: hand the run over as is; the per-block work (bounds, the map
  // of tracked blocks, the queue) is the readers' (ExpandPrefetchRunLocked).
  if (prefetchers_.empty() || ns->dropped) return;
  const int64_t now = clock_->NowMillis();
  PrefetchRun run;
  run.ns = ns;
  run.end = std::min<size_t>(out.prefix_blocks, ids.size());
  run.deadline_ms = now + static_cast<int64_t>(options_.prefetch_unread_ms);
  if (out.lease_id != 0) {
    // Only the leased part: the lease keeps it resident while it is read.
    run.end = std::min<size_t>(run.end, out.leased_blocks);
    run.lease_id = out.lease_id;
    run.deadline_ms = leases_.DeadlineIfActive(out.lease_id, now).value_or(now);
  }
  run.ids = std::move(ids);
  prefetch_runs_.push_back(std::move(run));
  prefetch_cv_.Signal();
}

void TieredStoreImpl::ExpandPrefetchRunLocked(PrefetchRun run) {
  ExpirePrefetchesLocked();
  NsState* ns = run.ns;
  const int64_t now = clock_->NowMillis();
  bool live = !ns->dropped && run.deadline_ms > now;
  if (live && run.lease_id != 0) live = leases_.DeadlineIfActive(run.lease_id, now).has_value();
  const auto worth = [&](BlockId id) {
    const Entry& e = index_.at(id);
    return e.ns == ns->id && (e.flags & Entry::kCold) &&
           !(e.flags & (Entry::kHot | Entry::kStandalone | Entry::kBusy));
  };
  const auto hot_share = static_cast<uint64_t>(options_.prefetch_max_hot_fraction *
                                               static_cast<double>(hot_->capacity_bytes()));
  bool queued = false;
  for (size_t i = 0; i < run.end; ++i) {
    const BlockId id = run.ids[i];
    if (id == kNoEntry || !worth(id) || prefetch_.contains(id)) continue;
    if (!live) {
      prefetch_stats_.cancelled++;  // its lease or deadline ended before it was queued
      continue;
    }
    const uint64_t b = index_.at(id).payload_bytes;
    if (prefetch_inflight_bytes_ + b > options_.prefetch_max_inflight_bytes ||
        prefetch_inflight_bytes_ + prefetch_unread_bytes_ + b > hot_share ||
        !ns->tenant->HotFits(b)) {
      for (size_t j = i; j < run.end; ++j) {
        if (run.ids[j] != kNoEntry && worth(run.ids[j])) prefetch_stats_.skipped_blocks++;
      }
      break;
    }
    Prefetch p;
    p.bytes = static_cast<uint32_t>(b);
    p.lease_id = run.lease_id;
    p.deadline_ms = run.deadline_ms;
    prefetch_.emplace(id, p);
    prefetch_queue_.push_back(id);
    prefetch_inflight_bytes_ += b;
    prefetch_stats_.queued_blocks++;
    queued = true;
  }
  if (!queued) return;
  next_prefetch_expiry_ms_ = std::min(next_prefetch_expiry_ms_, run.deadline_ms);
  prefetch_cv_.SignalAll();
}

void TieredStoreImpl::ForgetPrefetchLocked(absl::flat_hash_map<BlockId, Prefetch>::iterator it) {
  const BlockId id = it->first;
  const bool unread = it->second.state == Prefetch::kUnread;
  if (unread) {
    prefetch_unread_bytes_ -= it->second.bytes;
  } else {
    prefetch_inflight_bytes_ -= it->second.bytes;
  }
  prefetch_.erase(it);
  if (unread && (index_.at(id).flags & Entry::kHot)) UpdateEligibilityLocked(id);
}

void TieredStoreImpl::OnPrefetchLeftLocked(BlockId id, bool removed) {
  if (prefetch_.empty()) return;
  const auto it = prefetch_.find(id);
  if (it == prefetch_.end()) return;
  if (it->second.state == Prefetch::kUnread) {
    prefetch_stats_.wasted_evicted++;
    ForgetPrefetchLocked(it);
  } else if (removed) {
    // Queued or being read, and the block is gone: its reader finds it untracked.
    prefetch_stats_.cancelled++;
    ForgetPrefetchLocked(it);
    prefetch_done_cv_.SignalAll();
  }
}

void TieredStoreImpl::ExpirePrefetchesLocked() {
  const int64_t now = clock_->NowMillis();
  if (now < next_prefetch_expiry_ms_) return;
  int64_t next = kPinForever;
  std::vector<BlockId> due;
  for (const auto& [id, p] : prefetch_) {
    const bool lease_over =
        p.lease_id != 0 && !leases_.DeadlineIfActive(p.lease_id, now).has_value();
    if ((p.deadline_ms <= now || lease_over) && p.state != Prefetch::kInFlight) {
      due.push_back(id);
    } else {
      next = std::min(next, p.deadline_ms);  // in flight: its reader decides; look again
    }
  }
  for (BlockId id : due) {
    const auto it = prefetch_.find(id);
    if (it->second.state == Prefetch::kUnread) {
      prefetch_stats_.wasted_expired++;
    } else {
      prefetch_stats_.cancelled++;
    }
    ForgetPrefetchLocked(it);
  }
  next_prefetch_expiry_ms_ = std::max(next, now + 1);
  if (prefetch_.empty()) next_prefetch_expiry_ms_ = kPinForever;
}

bool TieredStoreImpl::GetMeetsPrefetchLocked(BlockId id) {
  const auto it = prefetch_.find(id);
  if (it == prefetch_.end()) return false;
  if (index_.at(id).flags & Entry::kHot) {
    if (it->second.state == Prefetch::kUnread) {
      prefetch_stats_.hits++;
      ForgetPrefetchLocked(it);
    }
    return false;
  }
  if (it->second.state == Prefetch::kInFlight) return true;
  // Still queued: this Get reads it now, the reader skips it.
  prefetch_stats_.cancelled++;
  ForgetPrefetchLocked(it);
  return false;
}

std::vector<BlockId> TieredStoreImpl::TakePrefetchBatchLocked() {
  std::vector<BlockId> batch;
  uint64_t bytes = 0;
  uint16_t batch_ns = 0;
  const int64_t now = clock_->NowMillis();
  while (!prefetch_queue_.empty() && (batch.empty() || bytes < options_.prefetch_batch_bytes)) {
    const BlockId id = prefetch_queue_.front();
    const auto it = prefetch_.find(id);
    if (it == prefetch_.end() || it->second.state != Prefetch::kQueued) {
      prefetch_queue_.pop_front();  // stale: taken by a Get, cancelled, or re-queued
      continue;
    }
    const Entry& e = index_.at(id);
    if (!batch.empty() && e.ns != batch_ns) break;  // one namespace per read
    prefetch_queue_.pop_front();
    NsState* ns = namespaces_[e.ns].get();
    bool worth = (e.flags & Entry::kCold) &&
                 !(e.flags & (Entry::kHot | Entry::kBusy | Entry::kStandalone)) &&
                 !ns->dropped && ns->tenant->HotFits(it->second.bytes) &&
                 it->second.deadline_ms > now;
    if (worth && it->second.lease_id != 0) {
      worth = leases_.DeadlineIfActive(it->second.lease_id, now).has_value();
    }
    if (!worth) {
      prefetch_stats_.cancelled++;
      ForgetPrefetchLocked(it);
      continue;
    }
    it->second.state = Prefetch::kInFlight;
    batch_ns = e.ns;
    bytes += it->second.bytes;
    batch.push_back(id);
  }
  return batch;
}

void TieredStoreImpl::PrefetchBatch(NsState* ns, std::vector<BlockId> ids,
                                    std::vector<std::string> keys, std::vector<uint32_t> bytes) {
  struct Read {
    BlockId id = kNoEntry;
    std::string key;
    uint32_t payload_bytes = 0;
    uint64_t reserved = 0;
    std::optional<SlotId> slot;
    HotTier::SlotView dst;
    bool size_ok = true;
    absl::Status st = absl::ResourceExhaustedError("no hot room for a prefetch");
  };
  std::vector<Read> reads(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    reads[k].id = ids[k];
    reads[k].key = std::move(keys[k]);
    reads[k].payload_bytes = bytes[k];
  }
  // As Promote, but never a heap copy: no hot room means no prefetch.
  std::vector<std::string_view> views;
  std::vector<size_t> of_key;  // views[j] is reads[of_key[j]]
  for (size_t k = 0; k < reads.size(); ++k) {
    Read& r = reads[k];
    if (ReserveTenantHot(ns, r.payload_bytes, /*count_rejection=*/false, /*parent_key=*/{},
                         &r.reserved)
            .ok()) {
      r.slot = AllocSlot(std::max<uint64_t>(ns->slot_bytes, r.payload_bytes));
    }
    if (!r.slot) continue;
    r.dst = hot_->View(*r.slot);
    views.push_back(r.key);
    of_key.push_back(k);
  }
  if (!views.empty()) {
    // Read straight into the slots (verified there before the sink sees them).
    const ColdTier::MultiDestination into_slots = [&](size_t j) -> std::span<uint8_t> {
      const Read& r = reads[of_key[j]];
      return std::span<uint8_t>(r.dst.data, r.dst.alloc_bytes);
    };
    std::vector<absl::Status> st = cold_->MultiGetBlock(
        ns->id, views,
        [&](size_t j, std::span<const uint8_t> bytes, uint64_t /*checksum*/) {
          Read& r = reads[of_key[j]];
          r.payload_bytes = static_cast<uint32_t>(bytes.size());
          if (bytes.size() > r.dst.alloc_bytes) {
            r.size_ok = false;
          } else if (bytes.data() != r.dst.data) {
            std::memcpy(r.dst.data, bytes.data(), bytes.size());
          }
        },
        &into_slots);
    for (size_t j = 0; j < views.size(); ++j) {
      Read& r = reads[of_key[j]];
      r.st = std::move(st[j]);
      if (r.st.ok() && !r.size_ok) r.st = absl::DataLossError("cold payload larger than its slot");
      if (r.st.ok()) hot_->SetPayload(*r.slot, r.payload_bytes);
    }
  }
  common::MutexLock lock(&mu_);
  prefetch_done_cv_.SignalAll();
  const int64_t now = clock_->NowMillis();
  for (Read& r : reads) {
    UnreserveTenantHotLocked(ns, &r.reserved);
    const BlockId id = r.id;
    const auto it = prefetch_.find(id);
    const bool tracked = it != prefetch_.end() && it->second.state == Prefetch::kInFlight;
    bool publish = r.st.ok() && tracked && index_.Find(ns->id, r.key) == id &&
                   (index_.at(id).flags & Entry::kCold) && !(index_.at(id).flags & Entry::kHot);
    if (publish && it->second.lease_id != 0) {
      publish = leases_.DeadlineIfActive(it->second.lease_id, now).has_value();
    }
    if (!publish) {
      if (r.slot) hot_->Release(*r.slot);
      if (tracked) {
        if (r.st.ok() || absl::IsResourceExhausted(r.st)) {
          prefetch_stats_.cancelled++;
        } else {
          prefetch_stats_.failed++;  // a corrupt copy is dropped by the Get that reads it
        }
        ForgetPrefetchLocked(it);
      }
      continue;
    }
    // Unread before it enters hot, so it never becomes an eligible victim.
    it->second.state = Prefetch::kUnread;
    prefetch_inflight_bytes_ -= it->second.bytes;
    prefetch_unread_bytes_ += it->second.bytes;
    prefetch_stats_.prefetched_blocks++;
    TouchLocked(id);
    EnterHotLocked(id, *r.slot);  // the allocation's reference: the index owns the slot now
    ns->stats.promotions++;
  }
  MaybeWakeDemoterLocked();
}

void TieredStoreImpl::PrefetchLoop() {
  // Background work: below the threads that answer calls, so the Lookup that queued a
  // prefetch is answered before its reads take the CPU (Linux: nice is per thread).
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 5);
  while (true) {
    std::vector<BlockId> batch;
    std::vector<std::string> keys;
    std::vector<uint32_t> bytes;
    NsState* ns = nullptr;
    {
      common::MutexLock lock(&mu_);
      while (!stopping_ && prefetch_queue_.empty() && prefetch_runs_.empty()) {
        prefetch_cv_.Wait(&mu_);
      }
      if (stopping_) return;
      if (!prefetch_runs_.empty()) {
        // Woken by a Lookup, which still has its answer to send: this thread slept, so the
        // scheduler lets it preempt the Lookup's thread, and expanding a 2,048-block run
        // held the answer back by 0.3-0.8 ms. Let the runnable threads go first.
        mu_.Unlock();
        sched_yield();
        mu_.Lock();
        if (stopping_) return;
      }
      if (!prefetch_runs_.empty()) {
        PrefetchRun run = std::move(prefetch_runs_.front());
        prefetch_runs_.pop_front();
        ExpandPrefetchRunLocked(std::move(run));
      }
      batch = TakePrefetchBatchLocked();
      if (batch.empty()) continue;
      // Captured under the lock that marked them in flight (an entry may go meanwhile).
      ns = namespaces_[index_.at(batch[0]).ns].get();
      for (BlockId id : batch) {
        keys.emplace_back(index_.key(id));
        bytes.push_back(index_.at(id).payload_bytes);
      }
    }
    PrefetchBatch(ns, std::move(batch), std::move(keys), std::move(bytes));
  }
}

}  // namespace kvtier::storage
