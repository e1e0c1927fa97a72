// TieredStoreImpl: Get, promotion from the cold tier, Pin (tiered_store_impl.h).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "storage/tiered_store_impl.h"

namespace kvtier::storage {

absl::StatusOr<BlockRef> TieredStoreImpl::Get(std::string_view ns_name, std::string_view key) {
  NsState* ns;
  {
    common::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(ns, FindNsLocked(ns_name));
    std::optional<absl::StatusOr<BlockRef>> resident = GetResidentLocked(ns, key);
    if (resident) return *std::move(resident);
  }
  return Promote(ns, key, false, 0);
}

std::optional<absl::StatusOr<BlockRef>> TieredStoreImpl::GetResidentLocked(NsState* ns,
                                                                          std::string_view key) {
  ns->stats.gets++;
  BlockId id = index_.Find(ns->id, key);
  if (id == kNoEntry || !index_.at(id).resident()) {
    ns->stats.get_misses++;
    return absl::NotFoundError("block not found");
  }
  if (!prefetch_.empty() && GetMeetsPrefetchLocked(id)) {
    // Being promoted by a prefetch: wait for it rather than read the block twice.
    const auto start = std::chrono::steady_clock::now();
    do {
      prefetch_done_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
      id = index_.Find(ns->id, key);
      if (id == kNoEntry || !index_.at(id).resident()) break;
    } while (GetMeetsPrefetchLocked(id));
    prefetch_stats_.get_waits++;
    prefetch_stats_.get_wait_us += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                              start)
            .count());
    if (id == kNoEntry || !index_.at(id).resident()) {
      ns->stats.get_misses++;
      return absl::NotFoundError("block not found");
    }
  }
  Entry& e = index_.at(id);
  if (e.flags & Entry::kHot) {
    e.hits++;
    TouchLocked(id);
    policy_->OnAccess(id, InfoLocked(id));
    ns->stats.hot.hits++;
    return hot_->NewRef(e.slot, Tier::kHot, e.block_index);
  }
  return std::nullopt;
}

std::vector<absl::StatusOr<BlockRef>> TieredStoreImpl::GetMany(std::string_view ns_name,
                                                               std::span<const std::string> keys) {
  std::vector<absl::StatusOr<BlockRef>> out;
  out.reserve(keys.size());
  NsState* ns;
  std::vector<size_t> cold;
  {
    common::MutexLock lock(&mu_);
    absl::StatusOr<NsState*> found = FindNsLocked(ns_name);
    if (!found.ok()) {
      out.assign(keys.size(), found.status());
      return out;
    }
    ns = *found;
    for (size_t i = 0; i < keys.size(); ++i) {
      std::optional<absl::StatusOr<BlockRef>> resident = GetResidentLocked(ns, keys[i]);
      if (resident) {
        out.push_back(*std::move(resident));
      } else {
        out.push_back(absl::NotFoundError("block not found"));  // replaced below
        cold.push_back(i);
      }
    }
  }
  if (cold.size() == 1) {
    out[cold[0]] = Promote(ns, keys[cold[0]], false, 0);
  } else if (!cold.empty()) {
    PromoteMany(ns, keys, cold, &out);
  }
  return out;
}

void TieredStoreImpl::PromoteMany(NsState* ns, std::span<const std::string> keys,
                                  std::span<const size_t> at,
                                  std::vector<absl::StatusOr<BlockRef>>* out) {
  struct Read {
    size_t i = 0;  // into keys / *out
    uint32_t payload_bytes = 0;
    bool standalone = false;
    bool size_ok = true;
    uint64_t reserved = 0;
    std::optional<SlotId> slot;
    HotTier::SlotView dst;
    std::string heap_copy;
  };
  for (size_t from = 0; from < at.size();) {
    // One batch: about kGetBatchBytes of blocks that are still cold.
    std::vector<Read> reads;
    {
      common::MutexLock lock(&mu_);
      uint64_t bytes = 0;
      for (; from < at.size() && bytes < kGetBatchBytes; ++from) {
        const size_t i = at[from];
        const BlockId id = index_.Find(ns->id, keys[i]);
        if (id == kNoEntry || !(index_.at(id).flags & Entry::kCold)) {
          ns->stats.get_misses++;
          (*out)[i] = absl::NotFoundError("block not found");
          continue;
        }
        Read r;
        r.i = i;
        r.payload_bytes = index_.at(id).payload_bytes;
        r.standalone = index_.at(id).flags & Entry::kStandalone;
        bytes += r.payload_bytes;
        reads.push_back(std::move(r));
      }
    }
    // As Promote: into a hot slot within the tenant's quota, else a heap copy.
    std::vector<std::string_view> views;
    views.reserve(reads.size());
    for (Read& r : reads) {
      const bool to_hot =
          !r.standalone && ReserveTenantHot(ns, r.payload_bytes, /*count_rejection=*/false,
                                            /*parent_key=*/{}, &r.reserved)
                               .ok();
      if (to_hot) r.slot = AllocSlot(std::max<uint64_t>(ns->slot_bytes, r.payload_bytes));
      if (r.slot) r.dst = hot_->View(*r.slot);
      views.push_back(keys[r.i]);
    }
    // No lock is held during the reads. Payloads bound for hot slots are read straight
    // into them (verified there before the sink sees them).
    const ColdTier::MultiDestination into_slots = [&](size_t k) -> std::span<uint8_t> {
      const Read& r = reads[k];
      if (!r.slot) return {};
      return std::span<uint8_t>(r.dst.data, r.dst.alloc_bytes);
    };
    std::vector<absl::Status> st = cold_->MultiGetBlock(
        ns->id, views,
        [&](size_t k, std::span<const uint8_t> bytes, uint64_t /*checksum*/) {
          Read& r = reads[k];
          r.payload_bytes = static_cast<uint32_t>(bytes.size());
          if (!r.slot) {
            r.heap_copy.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          } else if (bytes.size() > r.dst.alloc_bytes) {
            r.size_ok = false;
          } else if (bytes.data() != r.dst.data) {
            std::memcpy(r.dst.data, bytes.data(), bytes.size());
          }
        },
        &into_slots);
    for (size_t k = 0; k < reads.size(); ++k) {
      Read& r = reads[k];
      if (st[k].ok() && !r.size_ok) {
        st[k] = absl::DataLossError("cold payload larger than its slot");
      }
      if (st[k].ok() && r.slot) hot_->SetPayload(*r.slot, r.payload_bytes);
    }
    std::vector<size_t> corrupt;
    {
      common::MutexLock lock(&mu_);
      for (size_t k = 0; k < reads.size(); ++k) {
        Read& r = reads[k];
        UnreserveTenantHotLocked(ns, &r.reserved);
        if (!st[k].ok()) {
          if (r.slot) hot_->Release(*r.slot);
          if (absl::IsDataLoss(st[k])) {
            corrupt.push_back(k);
            continue;
          }
          ns->stats.get_misses++;
          (*out)[r.i] =
              absl::IsNotFound(st[k]) ? absl::NotFoundError("block not found") : st[k];
          continue;
        }
        (*out)[r.i] = PublishPromotedLocked(ns, keys[r.i], r.slot, std::move(r.heap_copy),
                                            false, 0);
      }
    }
    for (size_t k : corrupt) (*out)[reads[k].i] = DropCorruptCold(ns, keys[reads[k].i], st[k]);
  }
}

absl::StatusOr<BlockRef> TieredStoreImpl::Promote(NsState* ns, std::string_view key, bool pin,
                                                  int64_t pin_until_ms) {
  uint32_t payload_bytes;
  bool standalone;
  {
    common::MutexLock lock(&mu_);
    const BlockId id = index_.Find(ns->id, key);
    if (id == kNoEntry || !(index_.at(id).flags & Entry::kCold)) {
      ns->stats.get_misses++;
      return absl::NotFoundError("block not found");
    }
    payload_bytes = index_.at(id).payload_bytes;
    standalone = index_.at(id).flags & Entry::kStandalone;
  }
  // Standalone entries stay cold-only; a hot tier full of pinned blocks, or a tenant at
  // its hot quota with nothing of its own to demote, serves a heap copy.
  uint64_t reserved = 0;
  const bool to_hot = !standalone && ReserveTenantHot(ns, payload_bytes, /*count_rejection=*/false,
                                                      /*parent_key=*/{}, &reserved)
                                         .ok();
  std::optional<SlotId> slot;
  if (to_hot) slot = AllocSlot(std::max<uint64_t>(ns->slot_bytes, payload_bytes));
  HotTier::SlotView dst;
  if (slot) dst = hot_->View(*slot);  // our allocation reference keeps it ours
  std::string heap_copy;
  bool size_ok = true;
  // No lock is held during the read: a slow cold read blocks only this call.
  absl::Status st = cold_->GetBlock(ns->id, key, [&](std::span<const uint8_t> bytes, uint64_t /*checksum*/) {
    payload_bytes = static_cast<uint32_t>(bytes.size());
    if (!slot) {
      heap_copy.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    } else if (bytes.size() > dst.alloc_bytes) {
      size_ok = false;
    } else {
      std::memcpy(dst.data, bytes.data(), bytes.size());
    }
  });
  if (st.ok() && !size_ok) st = absl::DataLossError("cold payload larger than its slot");
  if (!st.ok()) {
    if (slot) hot_->Release(*slot);
    if (reserved != 0) {
      common::MutexLock lock(&mu_);
      UnreserveTenantHotLocked(ns, &reserved);
    }
    if (absl::IsDataLoss(st)) return DropCorruptCold(ns, key, st);
    common::MutexLock lock(&mu_);
    ns->stats.get_misses++;
    if (absl::IsNotFound(st)) return absl::NotFoundError("block not found");
    return st;
  }
  if (slot) hot_->SetPayload(*slot, payload_bytes);
  common::MutexLock lock(&mu_);
  UnreserveTenantHotLocked(ns, &reserved);
  return PublishPromotedLocked(ns, key, slot, std::move(heap_copy), pin, pin_until_ms);
}

absl::Status TieredStoreImpl::DropCorruptCold(NsState* ns, std::string_view key,
                                              const absl::Status& cause) {
  // Never served: count, delete and report a miss.
  common::MutexLock stripe(&Stripe(ns->id, key));
  bool delete_record = false;
  {
    common::MutexLock lock(&mu_);
    ns->stats.checksum_failures++;
    ns->stats.get_misses++;
    const BlockId id = index_.Find(ns->id, key);
    if (id != kNoEntry && (index_.at(id).flags & Entry::kCold) &&
        !(index_.at(id).flags & Entry::kBusy)) {
      delete_record = true;
      if (index_.at(id).flags & Entry::kHot) {
        LeaveColdLocked(id);
      } else {
        RemoveLocked(id);
      }
    }
  }
  KVTIER_LOG(WARNING) << "cold block failed verification, deleted: " << cause.ToString();
  if (delete_record) {
    absl::Status st = cold_->DeleteBlock(ns->id, key);
    if (!st.ok()) KVTIER_LOG(WARNING) << "deleting a corrupt cold block failed: " << st.ToString();
  }
  return absl::NotFoundError("block not found (checksum failure)");
}

absl::StatusOr<BlockRef> TieredStoreImpl::PublishPromotedLocked(NsState* ns, std::string_view key,
                                                                std::optional<SlotId> slot,
                                                                std::string heap_copy, bool pin,
                                                                int64_t pin_until_ms) {
  const BlockId id = index_.Find(ns->id, key);
  if (id == kNoEntry || !index_.at(id).resident()) {
    // Deleted while we read: do not resurrect it.
    if (slot) hot_->Release(*slot);
    ns->stats.get_misses++;
    return absl::NotFoundError("block not found");
  }
  Entry& e = index_.at(id);
  e.hits++;
  TouchLocked(id);
  ns->stats.cold.hits++;
  if (!slot) {
    auto owned = std::make_shared<std::string>(std::move(heap_copy));
    std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(owned->data()), owned->size());
    return BlockRef(std::shared_ptr<const void>(owned, owned.get()), bytes, Tier::kCold,
                    e.block_index);
  }
  BlockRef ref = hot_->NewRef(*slot, Tier::kCold, e.block_index);
  if (e.flags & Entry::kHot) {
    // Someone else promoted or re-put it meanwhile: serve our copy, freed after the read.
    hot_->Release(*slot);
    return ref;
  }
  EnterHotLocked(id, *slot);  // the allocation's reference: the index owns the slot now
  ns->stats.promotions++;
  if (pin) PinLocked(id, pin_until_ms);
  policy_->OnAccess(id, InfoLocked(id));
  MaybeWakeDemoterLocked();
  return ref;
}

absl::StatusOr<uint64_t> TieredStoreImpl::Pin(std::string_view ns_name,
                                              std::span<const std::string> keys, uint64_t ttl_ms) {
  ASSIGN_OR_RETURN(NsState * ns, FindNs(ns_name));
  const int64_t until =
      ttl_ms == 0 ? kPinForever : clock_->NowMillis() + static_cast<int64_t>(ttl_ms);
  uint64_t pinned = 0;
  for (const std::string& key : keys) {
    {
      common::MutexLock lock(&mu_);
      const BlockId id = index_.Find(ns->id, key);
      if (id == kNoEntry) continue;
      const Entry& e = index_.at(id);
      if (e.flags & Entry::kHot) {
        PinLocked(id, until);
        ++pinned;
        continue;
      }
      if (!(e.flags & Entry::kCold) || (e.flags & Entry::kStandalone)) continue;
    }
    if (!Promote(ns, key, true, until).ok()) continue;
    common::MutexLock lock(&mu_);
    const BlockId id = index_.Find(ns->id, key);
    if (id != kNoEntry && (index_.at(id).flags & Entry::kHot)) {
      // A concurrent promotion may have won; make sure the resident copy is pinned.
      PinLocked(id, until);
      ++pinned;
    }
  }
  return pinned;
}

}  // namespace kvtier::storage
