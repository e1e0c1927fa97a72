// TieredStoreImpl: Lookup and the leases it grants (tiered_store_impl.h, lease_table.h).
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/status_macros.h"
#include "storage/tiered_store_impl.h"

namespace kvtier::storage {

absl::StatusOr<LookupResult> TieredStoreImpl::Lookup(std::string_view ns_name,
                                                     std::span<const std::string_view> keys,
                                                     const LeaseOptions& lease) {
  common::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(NsState * ns, FindNsLocked(ns_name));
  LookupResult out;
  out.tiers.reserve(keys.size());
  std::vector<BlockId> ids;  // kept for the lease
  const bool keep_ids = lease.lease_ms > 0 || lease.prefetch;
  if (keep_ids) ids.reserve(keys.size());
  bool prefix = true;
  uint64_t hits = 0;
  uint64_t prefix_hot = 0;
  BlockId prev = kNoEntry;
  for (const std::string_view key : keys) {
    const BlockId id = index_.FindAfter(ns->id, key, prev);
    prev = id;
    if (keep_ids) ids.push_back(id);
    Tier tier = Tier::kNone;
    if (id != kNoEntry) {
      const uint8_t f = index_.at(id).flags;
      tier = (f & Entry::kHot) ? Tier::kHot : (f & Entry::kCold) ? Tier::kCold : Tier::kNone;
    }
    out.tiers.push_back(tier);
    if (tier != Tier::kNone) {
      ++hits;
      if (prefix) {
        ++out.prefix_blocks;
        if (tier == Tier::kHot) ++prefix_hot;
      }
    } else {
      prefix = false;
    }
  }
  ns->stats.lookups++;
  ns->stats.lookup_blocks += keys.size();
  ns->stats.lookup_hit_blocks += hits;
  ns->stats.lookup_prefix_hit_blocks += out.prefix_blocks;
  ns->stats.lookup_prefix_hit_blocks_hot += prefix_hot;
  ns->stats.lookup_prefix_hit_blocks_cold += out.prefix_blocks - prefix_hot;
  if (lease.lease_ms > 0) {
    ExpireLeasesLocked();
    LeaseLocked(*ns, ids, lease, &out);
  }
  if (lease.prefetch && out.prefix_blocks > prefix_hot && (lease.lease_ms == 0 || out.lease_id != 0)) {
    QueuePrefetchLocked(ns, std::move(ids), out);
  }
  return out;
}

void TieredStoreImpl::LeaseLocked(const NsState& ns, std::span<const BlockId> ids,
                                  const LeaseOptions& lease, LookupResult* out) {
  std::vector<LeaseTable::Hold> holds;
  uint64_t bytes = 0;
  const size_t end = lease.every_resident_key ? ids.size() : out->prefix_blocks;
  holds.reserve(end);
  const LeaseTable::Room room = leases_.RoomFor(ns.opts.tenant);
  for (size_t i = 0; i < end; ++i) {
    if (out->tiers[i] == Tier::kNone) continue;
    const BlockId id = ids[i];
    const uint64_t b = index_.at(id).payload_bytes;
    if (bytes + b > room.node) {
      out->lease_limit = LeaseLimit::kNodeBytes;
      break;
    }
    if (bytes + b > room.tenant) {
      out->lease_limit = LeaseLimit::kTenantBytes;
      break;
    }
    bytes += b;
    holds.push_back({id, out->tiers[i] == Tier::kHot});
  }
  if (holds.empty()) return;
  out->leased_blocks = static_cast<uint32_t>(holds.size());
  std::vector<BlockId> hot;
  for (const LeaseTable::Hold& h : holds) {
    if (h.keep_hot) hot.push_back(h.id);
  }
  out->lease_id = leases_.Grant(ns.id, ns.opts.tenant, std::move(holds), bytes,
                                clock_->NowMillis() + static_cast<int64_t>(lease.lease_ms));
  for (BlockId id : hot) UpdateEligibilityLocked(id);  // no longer a victim
}

absl::StatusOr<uint64_t> TieredStoreImpl::ReleaseLease(std::string_view ns_name,
                                                       uint64_t lease_id) {
  common::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(NsState * ns, FindNsLocked(ns_name));
  ExpireLeasesLocked();
  const std::vector<LeaseTable::Hold> holds = leases_.Release(ns->id, lease_id);
  OnHoldsEndedLocked(holds);
  return holds.size();
}

void TieredStoreImpl::ExpireLeasesLocked() {
  OnHoldsEndedLocked(leases_.Expire(clock_->NowMillis()));
}

void TieredStoreImpl::OnHoldsEndedLocked(const std::vector<LeaseTable::Hold>& holds) {
  if (holds.empty()) return;
  for (const LeaseTable::Hold& h : holds) {
    if (h.keep_hot) UpdateEligibilityLocked(h.id);
  }
  if (!prefetch_.empty()) {
    // Prefetches under an ended lease are dropped now, not at their deadline.
    next_prefetch_expiry_ms_ = std::numeric_limits<int64_t>::min();
    ExpirePrefetchesLocked();
  }
  MaybeWakeDemoterLocked();
}

}  // namespace kvtier::storage
