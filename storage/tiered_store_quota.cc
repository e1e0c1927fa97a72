// TieredStoreImpl: per-tenant quotas (tenant_quota.h, tiered_store_impl.h): room within
// a tenant's hot quota, made by demoting that tenant's own blocks, and the victims of
// quota enforcement in both tiers.
#include <string>

#include "common/mutex.h"
#include "storage/tiered_store_impl.h"

namespace kvtier::storage {

absl::Status TieredStoreImpl::ReserveTenantHot(NsState* ns, uint64_t bytes, bool count_rejection,
                                               std::string_view parent_key, uint64_t* reserved) {
  TenantUsage* const t = ns->tenant;
  *reserved = 0;
  if (t->quota.hot_bytes == 0) return absl::OkStatus();  // the quota is constant
  while (true) {
    BlockId id;
    {
      common::MutexLock lock(&mu_);
      if (t->HotFits(bytes)) {
        t->hot_reserved += bytes;
        *reserved = bytes;
        return absl::OkStatus();
      }
      ExpirePinsLocked();
      ExpireLeasesLocked();
      // The parent of the block being put is demoted last: as a cold leaf it could be
      // deleted (cold quota) before its child arrives, leaving a hole in the prefix.
      const BlockId parent = parent_key.empty() ? kNoEntry : index_.Find(ns->id, parent_key);
      id = bytes <= t->quota.hot_bytes ? ScanVictimLocked(t, parent) : kNoEntry;
      if (id == kNoEntry) {
        if (count_rejection) t->quota_rejections++;
        return TenantQuotaExhausted(
            t->quota.tenant, QuotaKind::kHotBytes, t->quota.hot_bytes,
            bytes > t->quota.hot_bytes
                ? "the block alone is larger than the quota"
                : "every hot block of the tenant is pinned, leased or being written");
      }
      index_.at(id).flags |= Entry::kBusy;
      UpdateEligibilityLocked(id);
      t->evictions_caused++;
    }
    DemoteMarked(id, DemoteMode::kWatermark);
  }
}

void TieredStoreImpl::UnreserveTenantHotLocked(NsState* ns, uint64_t* bytes) {
  ns->tenant->hot_reserved -= *bytes;
  *bytes = 0;
}

BlockId TieredStoreImpl::ScanVictimLocked(const TenantUsage* tenant, BlockId avoid) {
  // Preference: an eligible block (the policy's own rules: unpinned, not a protected
  // sink, a leaf for structure-aware policies), then a hot leaf, then an interior block,
  // and last a sink block (index < sink_blocks, eligible or not) or `avoid`; the least
  // recent first. For a tenant's quota a sink with a hot child is never a candidate (the
  // node-wide fallback, tenant == null, may still take one when nothing else is left).
  // Demoting keeps a block resident (cold), so every prefix stays whole. One sequential
  // pass over the index entries.
  BlockId best = kNoEntry;
  uint32_t best_age = 0;
  int best_class = -1;
  for (BlockId i = 0; i < index_.id_limit(); ++i) {
    const Entry& e = index_.at(i);
    if (!(e.flags & Entry::kHot) || (e.flags & (Entry::kPinned | Entry::kBusy)) ||
        leases_.KeepsHot(i)) {
      continue;
    }
    const NsState& ns = *namespaces_[e.ns];
    const bool sink = e.block_index < ns.opts.sink_blocks;
    if (tenant != nullptr) {
      // Quota enforcement never demotes a sink block while a child of it is hot.
      if (ns.tenant != tenant || (sink && e.hot_children() > 0)) continue;
    }
    int cls = (e.flags & Entry::kEligible) ? 3 : (e.hot_children() == 0 ? 2 : 1);
    if (i == avoid || sink) cls = 0;
    const uint32_t age = static_cast<uint32_t>(tick_) - e.recency;
    if (cls > best_class || (cls == best_class && age > best_age)) {
      best = i;
      best_age = age;
      best_class = cls;
    }
  }
  return best;
}

BlockId TieredStoreImpl::PickColdVictimLocked(TenantUsage** charged) {
  *charged = tenants_.OverColdQuota();
  for (int pass = 0; pass < 2; ++pass) {
    // Pass 0: a tenant over its cold quota loses its own least recently used leaf; pass
    // 1 (only over the node's capacity): the least recently used leaf of anyone.
    if (pass == 0 && *charged == nullptr) continue;
    if (pass == 1) {
      *charged = nullptr;
      if (cold_used_ <= options_.cold_capacity_bytes) return kNoEntry;
    }
    BlockId id = index_.cold_head();
    while (id != kNoEntry) {
      const Entry& e = index_.at(id);
      // A leased block that is cold only must stay resident.
      const bool keep = (e.flags & Entry::kBusy) ||
                        (!(e.flags & Entry::kHot) && leases_.KeepsResident(id)) ||
                        (*charged != nullptr && namespaces_[e.ns]->tenant != *charged);
      if (!keep) return id;
      id = e.cold_next();
    }
  }
  return kNoEntry;
}

}  // namespace kvtier::storage
