// Per-tenant quotas of the store (docs/design.md §4 Tiers and eviction): how many hot
// payload bytes, cold stored bytes and leased payload bytes one tenant's namespaces may
// hold, the bytes each tenant holds now, and the errors a Put gets at a quota.
//
// TieredStoreImpl keeps one TenantUsage per tenant (every tenant that has a namespace or
// a quota) and updates it on every residency change, under its index mutex. Over its hot
// quota a tenant's Put demotes that tenant's own blocks first (never another tenant's);
// when none of them can be demoted (pinned, leased, busy) the Put gets
// TenantQuotaExhausted. Over its cold quota the tenant's own least recently used cold
// leaves are deleted first. The leased quota replaces StoreOptions::max_leased_bytes_per_tenant
// for that tenant (lease_table.h).
//
// Thread-compatible: TenantQuotaTable is used only under TieredStoreImpl's index mutex;
// the free functions are pure and thread-safe.
#ifndef KVTIER_STORAGE_TENANT_QUOTA_H_
#define KVTIER_STORAGE_TENANT_QUOTA_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"

namespace kvtier::storage {

// Quotas of one tenant (StoreOptions::tenant_quotas). 0 = unlimited.
struct TenantQuota {
  std::string tenant;
  uint64_t hot_bytes = 0;     // payload bytes of its hot blocks
  uint64_t cold_bytes = 0;    // stored bytes of its cold blocks
  uint64_t leased_bytes = 0;  // payload bytes its leases hold (overrides the per-tenant bound)
};

// Returns INVALID_ARGUMENT naming the entry: an invalid tenant name or a tenant listed
// twice.
absl::Status ValidateTenantQuotas(std::span<const TenantQuota> quotas);

// The leased quotas of `quotas` (tenant -> bytes; only tenants that set one), for
// LeaseTable.
absl::flat_hash_map<std::string, uint64_t> LeasedQuotas(std::span<const TenantQuota> quotas);

// One tenant's use against its quotas (StoreStats::tenants); limits of 0 are unlimited.
struct TenantStats {
  std::string tenant;
  uint64_t hot_used_bytes = 0;
  uint64_t hot_limit_bytes = 0;
  uint64_t cold_used_bytes = 0;
  uint64_t cold_limit_bytes = 0;
  uint64_t leased_used_bytes = 0;
  uint64_t leased_limit_bytes = 0;  // the leased quota, else max_leased_bytes_per_tenant
  uint64_t evictions_caused = 0;    // its own blocks demoted / deleted to keep it in quota
  uint64_t quota_rejections = 0;    // its blocks refused by TenantQuotaExhausted
};

// Which quota a TenantQuotaExhausted error names. Stable names (they appear in
// ErrorDetail.field as "tenant_quotas.<name>").
enum class QuotaKind : uint8_t { kHotBytes = 0, kColdBytes = 1, kLeasedBytes = 2 };
const char* QuotaKindName(QuotaKind kind);  // "hot_bytes", "cold_bytes", "leased_bytes"

// The absl::Status payload key under which TenantQuotaExhausted records the quota name.
inline constexpr std::string_view kTenantQuotaPayloadKey = "kvtier.storage/tenant_quota";

// Returns RESOURCE_EXHAUSTED "tenant A: hot quota 64 MiB exhausted (...)" with the quota
// name attached under kTenantQuotaPayloadKey.
absl::Status TenantQuotaExhausted(std::string_view tenant, QuotaKind kind, uint64_t limit,
                                  std::string_view why);
// Returns the quota name ("hot_bytes", ...) a TenantQuotaExhausted status carries, or
// nullopt for any other status.
std::optional<std::string> ExhaustedQuotaName(const absl::Status& status);

// What the store tracks for one tenant.
struct TenantUsage {
  TenantQuota quota;          // quota.tenant is the tenant's name
  uint64_t hot_used = 0;      // payload bytes of its hot blocks
  uint64_t hot_reserved = 0;  // bytes admitted by Puts not yet published
  uint64_t cold_used = 0;     // stored bytes of its cold blocks
  uint64_t evictions_caused = 0;
  uint64_t quota_rejections = 0;

  // True when `bytes` more hot bytes keep the tenant within its hot quota.
  bool HotFits(uint64_t bytes) const {
    return quota.hot_bytes == 0 || hot_used + hot_reserved + bytes <= quota.hot_bytes;
  }
  bool OverHot() const { return quota.hot_bytes != 0 && hot_used > quota.hot_bytes; }
  bool OverCold() const { return quota.cold_bytes != 0 && cold_used > quota.cold_bytes; }
};

class TenantQuotaTable {
 public:
  // REQUIRES: ValidateTenantQuotas(quotas) is OK.
  explicit TenantQuotaTable(std::span<const TenantQuota> quotas);

  // Returns the usage record of `tenant`, created (without quota) on first use. The
  // pointer stays valid for the table's lifetime.
  TenantUsage* ForTenant(std::string_view tenant);

  // Returns a tenant over its hot (cold) quota, or nullptr when none is.
  TenantUsage* OverHotQuota();
  TenantUsage* OverColdQuota();

  // Calls fn(const TenantUsage&) for every tenant, in name order.
  template <typename Fn>
  void ForEachSorted(Fn fn) const {
    std::vector<const TenantUsage*> all;
    all.reserve(usage_.size());
    for (const auto& [name, u] : usage_) all.push_back(&u);
    std::sort(all.begin(), all.end(), [](const TenantUsage* a, const TenantUsage* b) {
      return a->quota.tenant < b->quota.tenant;
    });
    for (const TenantUsage* u : all) fn(*u);
  }

 private:
  absl::node_hash_map<std::string, TenantUsage> usage_;  // node map: stable pointers
  bool any_hot_quota_ = false;
  bool any_cold_quota_ = false;
};

}  // namespace kvtier::storage

#endif  // KVTIER_STORAGE_TENANT_QUOTA_H_
