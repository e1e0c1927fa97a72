// TieredStoreImpl: prefetch on Lookup (tiered_store_impl.h, docs/prefetch.md). A Lookup
// with LeaseOptions::prefetch queues the cold blocks of its reported prefix; reader
// threads promote them to hot in queue order. Each tracked block moves kQueued ->
// kInFlight -> kUnread and is forgotten when a Get reads it (a hit), when it leaves hot
// unread (wasted, evicted), when its lease or deadline ends first (wasted, expired; or
// cancelled while still queued), or when it stops being a cold block worth reading
// (cancelled). An unread prefetched block is not an eligible victim, so only the
// fallback of a hot tier with nothing else to demote evicts it, and that is counted.
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

void TieredStoreImpl::QueuePrefetchLocked(NsState* ns, std::span<const BlockId> ids,
                                          const LookupResult& out) {
  if (prefetchers_.empty() || ns->dropped) return;
  ExpirePrefetchesLocked();
  prefetch_.reserve(prefetch_.size() + out.prefix_blocks);
  const int64_t now = clock_->NowMillis();
  int64_t deadline = now + static_cast<int64_t>(options_.prefetch_unread_ms);
  size_t end = out.prefix_blocks;
  if (out.lease_id != 0) {
    // Only the leased part: the lease keeps it resident while it is read.
    end = std::min<size_t>(end, out.leased_blocks);
    deadline = leases_.DeadlineIfActive(out.lease_id, now).value_or(now);
  }
  const auto hot_share = static_cast<uint64_t>(options_.prefetch_max_hot_fraction *
                                               static_cast<double>(hot_->capacity_bytes()));
  bool queued = false;
  for (size_t i = 0; i < end && i < ids.size(); ++i) {
    if (out.tiers[i] != Tier::kCold) continue;
    const BlockId id = ids[i];
    const Entry& e = index_.at(id);
    if (e.flags & (Entry::kHot | Entry::kStandalone | Entry::kBusy)) continue;
    if (prefetch_.contains(id)) continue;
    const uint64_t b = e.payload_bytes;
    if (prefetch_inflight_bytes_ + b > options_.prefetch_max_inflight_bytes ||
        prefetch_inflight_bytes_ + prefetch_unread_bytes_ + b > hot_share ||
        !ns->tenant->HotFits(b)) {
      for (size_t j = i; j < end && j < ids.size(); ++j) {
        if (out.tiers[j] == Tier::kCold) prefetch_stats_.skipped_blocks++;
      }
      break;
    }
    Prefetch p;
    p.bytes = static_cast<uint32_t>(b);
    p.lease_id = out.lease_id;
    p.deadline_ms = deadline;
    prefetch_.emplace(id, p);
    prefetch_queue_.push_back(id);
    prefetch_inflight_bytes_ += b;
    prefetch_stats_.queued_blocks++;
    queued = true;
  }
  if (!queued) return;
  next_prefetch_expiry_ms_ = std::min(next_prefetch_expiry_ms_, deadline);
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

void TieredStoreImpl::PrefetchOne(BlockId id) {
  NsState* ns;
  std::string key;
  uint32_t payload_bytes;
  {
    common::MutexLock lock(&mu_);
    const auto it = prefetch_.find(id);
    if (it == prefetch_.end() || it->second.state != Prefetch::kQueued) return;
    const Entry& e = index_.at(id);
    ns = namespaces_[e.ns].get();
    const int64_t now = clock_->NowMillis();
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
      return;
    }
    it->second.state = Prefetch::kInFlight;
    key.assign(index_.key(id));
    payload_bytes = e.payload_bytes;
  }
  // As Promote, but never a heap copy: no hot room means no prefetch.
  uint64_t reserved = 0;
  std::optional<SlotId> slot;
  if (ReserveTenantHot(ns, payload_bytes, /*count_rejection=*/false, /*parent_key=*/{}, &reserved)
          .ok()) {
    slot = AllocSlot(std::max<uint64_t>(ns->slot_bytes, payload_bytes));
  }
  absl::Status st = absl::ResourceExhaustedError("no hot room for a prefetch");
  if (slot) {
    const HotTier::SlotView dst = hot_->View(*slot);
    bool size_ok = true;
    st = cold_->GetBlock(ns->id, key, [&](std::span<const uint8_t> bytes, uint64_t /*checksum*/) {
      payload_bytes = static_cast<uint32_t>(bytes.size());
      if (bytes.size() > dst.alloc_bytes) {
        size_ok = false;
      } else {
        std::memcpy(dst.data, bytes.data(), bytes.size());
      }
    });
    if (st.ok() && !size_ok) st = absl::DataLossError("cold payload larger than its slot");
    if (st.ok()) hot_->SetPayload(*slot, payload_bytes);
  }
  common::MutexLock lock(&mu_);
  UnreserveTenantHotLocked(ns, &reserved);
  prefetch_done_cv_.SignalAll();
  const auto it = prefetch_.find(id);
  const bool tracked = it != prefetch_.end() && it->second.state == Prefetch::kInFlight;
  bool publish = st.ok() && tracked && index_.Find(ns->id, key) == id &&
                 (index_.at(id).flags & Entry::kCold) && !(index_.at(id).flags & Entry::kHot);
  const int64_t now = clock_->NowMillis();
  if (publish && it->second.lease_id != 0) {
    publish = leases_.DeadlineIfActive(it->second.lease_id, now).has_value();
  }
  if (!publish) {
    if (slot) hot_->Release(*slot);
    if (tracked) {
      if (st.ok() || absl::IsResourceExhausted(st)) {
        prefetch_stats_.cancelled++;
      } else {
        prefetch_stats_.failed++;  // a corrupt copy is dropped by the Get that reads it
      }
      ForgetPrefetchLocked(it);
    }
    return;
  }
  // Unread before it enters hot, so it never becomes an eligible victim.
  it->second.state = Prefetch::kUnread;
  prefetch_inflight_bytes_ -= it->second.bytes;
  prefetch_unread_bytes_ += it->second.bytes;
  prefetch_stats_.prefetched_blocks++;
  TouchLocked(id);
  EnterHotLocked(id, *slot);  // the allocation's reference: the index owns the slot now
  ns->stats.promotions++;
  MaybeWakeDemoterLocked();
}

void TieredStoreImpl::PrefetchLoop() {
  // Background work: below the threads that answer calls, so the Lookup that queued a
  // prefetch is answered before its reads take the CPU (Linux: nice is per thread).
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 5);
  while (true) {
    BlockId id;
    {
      common::MutexLock lock(&mu_);
      while (!stopping_ && prefetch_queue_.empty()) prefetch_cv_.Wait(&mu_);
      if (stopping_) return;
      id = prefetch_queue_.front();
      prefetch_queue_.pop_front();
    }
    PrefetchOne(id);
  }
}

}  // namespace kvtier::storage
