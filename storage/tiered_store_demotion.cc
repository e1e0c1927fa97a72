// TieredStoreImpl: room in the hot tier, demotion to the cold tier, cold-capacity
// eviction and the background demoter (tiered_store_impl.h).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "common/logging.h"
#include "common/mutex.h"
#include "storage/checksum.h"
#include "storage/tiered_store_impl.h"

namespace kvtier::storage {

std::optional<SlotId> TieredStoreImpl::AllocSlot(uint64_t bytes) {
  if (HotArena::RoundUp(bytes) > hot_->capacity_bytes()) return std::nullopt;
  while (true) {
    if (std::optional<SlotId> slot = hot_->Allocate(bytes)) {
      common::MutexLock lock(&mu_);
      MaybeWakeDemoterLocked();
      return slot;
    }
    // No room: demote synchronously (the background demoter normally keeps headroom).
    if (!DemoteOne()) {
      // Nothing evictable now; blocks being read or demoted by others may still have
      // freed room meanwhile, so retry once before giving up.
      return hot_->Allocate(bytes);
    }
  }
}

void TieredStoreImpl::ExpirePinsLocked() {
  const int64_t now = clock_->NowMillis();
  if (now < next_pin_expiry_ms_) return;
  int64_t next = kPinForever;
  std::vector<BlockId> expired;
  for (const auto& [id, until] : pins_) {
    if (until <= now) {
      expired.push_back(id);
    } else {
      next = std::min(next, until);
    }
  }
  for (BlockId id : expired) {
    pins_.erase(id);
    index_.at(id).flags &= ~Entry::kPinned;
    UpdateEligibilityLocked(id);
  }
  next_pin_expiry_ms_ = next;
}

BlockId TieredStoreImpl::PickVictimLocked() {
  ExpirePinsLocked();
  ExpireLeasesLocked();
  ExpirePrefetchesLocked();
  // A tenant over its hot quota (a promotion or a concurrent Put raced it there) gives
  // up its own blocks before anyone else does.
  if (const TenantUsage* over = tenants_.OverHotQuota()) {
    if (BlockId own = ScanVictimLocked(over); own != kNoEntry) return own;
  }
  BlockId id = policy_->PickVictim();
  if (id != kInvalidBlock) return id;
  // No eligible block: the hot tier holds only pinned blocks, interior blocks and sinks
  // protected by cold descendants. Demoting keeps a block resident, so fall back to the
  // least recent unpinned hot leaf (a protected sink becomes cold, its prefix stays
  // whole), and only then to any unpinned hot block. Rare.
  return ScanVictimLocked(nullptr);
}

bool TieredStoreImpl::DemoteOne() {
  BlockId id;
  {
    common::MutexLock lock(&mu_);
    id = PickVictimLocked();
    if (id == kNoEntry) return false;
    index_.at(id).flags |= Entry::kBusy;
    UpdateEligibilityLocked(id);
  }
  DemoteMarked(id, DemoteMode::kWatermark);
  return true;
}

TieredStoreImpl::DemoteResult TieredStoreImpl::DemoteMarked(BlockId id, DemoteMode mode) {
  const DemoteResult result = DemoteMarkedOnly(id, mode);
  // Also after kGone: entries skipped as busy by another thread's enforcement are
  // candidates again now.
  EnforceColdCapacity();
  return result;
}

TieredStoreImpl::DemoteResult TieredStoreImpl::DemoteMarkedOnly(BlockId id, DemoteMode mode) {
  uint16_t ns_id;
  std::string key;
  {
    common::MutexLock lock(&mu_);
    ns_id = index_.at(id).ns;
    key.assign(index_.key(id));
  }
  common::MutexLock stripe(&Stripe(ns_id, key));
  SlotId slot;
  HotTier::SlotView view;
  ColdIndexRecord rec;
  bool compress;
  bool need_write;
  {
    common::MutexLock lock(&mu_);
    Entry& e = index_.at(id);
    // The busy mark keeps the entry alive; a Delete or re-Put that ran before we took the
    // stripe may have changed its residency, so look again.
    if (!(e.flags & Entry::kHot)) {
      e.flags &= ~Entry::kBusy;
      index_.MaybeFree(id);
      return DemoteResult::kGone;
    }
    slot = e.slot;
    // Our reference keeps the slot's bytes stable while we hash and write them.
    view = hot_->Acquire(slot);
    need_write = !(e.flags & Entry::kCold);
    compress = namespaces_[e.ns]->opts.cold_zstd;
    rec.ns_id = e.ns;
    rec.key = key;
    if (e.parent != kNoEntry) rec.parent_key.assign(index_.key(e.parent));
    rec.block_index = e.block_index;
    rec.standalone = e.flags & Entry::kStandalone;
  }
  absl::StatusOr<uint32_t> stored = 0u;
  if (need_write) {
    const std::span<const uint8_t> bytes(view.data, view.payload_bytes);
    stored = cold_->PutBlock(rec, bytes, PayloadChecksum(bytes), compress);
  }
  hot_->Release(slot);
  common::MutexLock lock(&mu_);
  FinishDemotionLocked(id, mode, need_write, stored);
  return stored.ok() ? DemoteResult::kMoved : DemoteResult::kFailed;
}

void TieredStoreImpl::FinishDemotionLocked(BlockId id, DemoteMode mode, bool wrote,
                                           const absl::StatusOr<uint32_t>& stored) {
  Entry& e = index_.at(id);
  e.flags &= ~Entry::kBusy;
  NsState& ns = *namespaces_[e.ns];
  if (!stored.ok()) {
    KVTIER_LOG(WARNING) << "demotion to cold failed: " << stored.status().ToString();
    if (mode != DemoteMode::kCopyOnly) {
      // Cold cannot take it: drop it from the hot tier anyway so the arena drains. It is
      // a miss from now on, never a partial block.
      LeaveHotLocked(id);
      ns.stats.evictions_hot_capacity++;
      if (!e.resident()) leases_.Forget(id);
      index_.MaybeFree(id);
    } else {
      UpdateEligibilityLocked(id);
    }
    return;
  }
  if (wrote) EnterColdLocked(id, *stored);
  if (mode == DemoteMode::kWatermark) {
    LeaveHotLocked(id);
    ns.stats.demotions++;
    ns.stats.evictions_hot_capacity++;
  } else if (mode == DemoteMode::kAdmin) {
    LeaveHotLocked(id);
    ns.stats.evictions_admin++;
  } else {
    UpdateEligibilityLocked(id);
  }
}

void TieredStoreImpl::DemoteUntilBelow(uint64_t target_bytes) {
  while (true) {
    {
      common::MutexLock lock(&mu_);
      if (hot_->used_bytes() <= target_bytes || stopping_) return;
    }
    if (!DemoteOne()) return;
  }
}

void TieredStoreImpl::DemoteIfSynchronous() {
  if (options_.background_demotion || hot_->used_bytes() <= high_bytes_) return;
  DemoteUntilBelow(low_bytes_);
}

void TieredStoreImpl::MaybeWakeDemoterLocked() {
  if (options_.background_demotion && hot_->used_bytes() > high_bytes_) {
    ++demote_requests_;
    demote_cv_.Signal();
  }
}

void TieredStoreImpl::BackgroundLoop() {
  uint64_t seen = 0;
  while (true) {
    {
      common::MutexLock lock(&mu_);
      while (!stopping_ && demote_requests_ == seen) demote_cv_.Wait(&mu_);
      if (stopping_) return;
      seen = demote_requests_;
    }
    DemoteUntilBelow(low_bytes_);
  }
}

void TieredStoreImpl::EnforceColdCapacity() {
  while (true) {
    uint16_t ns_id;
    std::string key;
    TenantUsage* charged = nullptr;  // the tenant over its cold quota, if that is why
    {
      common::MutexLock lock(&mu_);
      if (cold_used_ <= options_.cold_capacity_bytes && tenants_.OverColdQuota() == nullptr) {
        return;
      }
      ExpireLeasesLocked();
      const BlockId id = PickColdVictimLocked(&charged);
      if (id == kNoEntry) return;
      ns_id = index_.at(id).ns;
      key.assign(index_.key(id));
    }
    common::MutexLock stripe(&Stripe(ns_id, key));
    bool delete_record = false;
    {
      common::MutexLock lock(&mu_);
      BlockId id = index_.Find(ns_id, key);
      if (id == kNoEntry) continue;
      Entry& e = index_.at(id);
      if (!(e.flags & Entry::kInColdList) || (e.flags & Entry::kBusy)) continue;
      if (!(e.flags & Entry::kHot) && leases_.KeepsResident(id)) continue;
      NsState& ns = *namespaces_[e.ns];
      delete_record = true;
      if (charged != nullptr) charged->evictions_caused++;
      if (e.flags & Entry::kHot) {
        LeaveColdLocked(id);  // still resident in hot: only the copy goes
      } else {
        ns.stats.evictions_cold_capacity++;
        RemoveLocked(id);
      }
    }
    if (delete_record) {
      absl::Status st = cold_->DeleteBlock(ns_id, key);
      if (!st.ok()) KVTIER_LOG(WARNING) << "cold eviction failed: " << st.ToString();
    }
  }
}

}  // namespace kvtier::storage
