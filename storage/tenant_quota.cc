#include "storage/tenant_quota.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/strings.h"
#include "storage/store_types.h"

namespace kvtier::storage {

namespace {

// "64 MiB" when exact, else the byte count.
std::string HumanBytes(uint64_t bytes) {
  if (bytes != 0 && bytes % (1ull << 30) == 0) return absl::StrCat(bytes >> 30, " GiB");
  if (bytes != 0 && bytes % (1ull << 20) == 0) return absl::StrCat(bytes >> 20, " MiB");
  if (bytes != 0 && bytes % (1ull << 10) == 0) return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " bytes");
}

const char* QuotaHumanName(QuotaKind kind) {
  switch (kind) {
    case QuotaKind::kHotBytes:
      return "hot";
    case QuotaKind::kColdBytes:
      return "cold";
    case QuotaKind::kLeasedBytes:
      return "leased";
  }
  return "hot";
}

}  // namespace

const char* QuotaKindName(QuotaKind kind) {
  switch (kind) {
    case QuotaKind::kHotBytes:
      return "hot_bytes";
    case QuotaKind::kColdBytes:
      return "cold_bytes";
    case QuotaKind::kLeasedBytes:
      return "leased_bytes";
  }
  return "hot_bytes";
}

absl::Status ValidateTenantQuotas(std::span<const TenantQuota> quotas) {
  absl::flat_hash_set<std::string> seen;
  for (size_t i = 0; i < quotas.size(); ++i) {
    if (!IsValidName(quotas[i].tenant)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tenant_quotas[", i, "].tenant must be 1..", kMaxNameBytes,
          " chars of [A-Za-z0-9._/-], got '", quotas[i].tenant, "'"));
    }
    if (!seen.insert(quotas[i].tenant).second) {
      return absl::InvalidArgumentError(absl::StrCat("tenant_quotas[", i, "]: tenant '",
                                                     quotas[i].tenant, "' is listed twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status TenantQuotaExhausted(std::string_view tenant, QuotaKind kind, uint64_t limit,
                                  std::string_view why) {
  absl::Status st = absl::ResourceExhaustedError(absl::StrCat(
      "tenant ", Sv(tenant), ": ", QuotaHumanName(kind), " quota ", HumanBytes(limit),
      " exhausted (", Sv(why), ")"));
  st.SetPayload(Sv(kTenantQuotaPayloadKey), absl::Cord(QuotaKindName(kind)));
  return st;
}

std::optional<std::string> ExhaustedQuotaName(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(Sv(kTenantQuotaPayloadKey));
  if (!payload) return std::nullopt;
  return std::string(*payload);
}

TenantQuotaTable::TenantQuotaTable(std::span<const TenantQuota> quotas) {
  for (const TenantQuota& q : quotas) {
    TenantUsage& u = usage_[q.tenant];
    u.quota = q;
    any_hot_quota_ |= q.hot_bytes != 0;
    any_cold_quota_ |= q.cold_bytes != 0;
  }
}

TenantUsage* TenantQuotaTable::ForTenant(std::string_view tenant) {
  auto [it, inserted] = usage_.try_emplace(std::string(tenant));
  if (inserted) it->second.quota.tenant = std::string(tenant);
  return &it->second;
}

absl::flat_hash_map<std::string, uint64_t> LeasedQuotas(std::span<const TenantQuota> quotas) {
  absl::flat_hash_map<std::string, uint64_t> out;
  for (const TenantQuota& q : quotas) {
    if (q.leased_bytes != 0) out[q.tenant] = q.leased_bytes;
  }
  return out;
}

TenantUsage* TenantQuotaTable::OverHotQuota() {
  if (!any_hot_quota_) return nullptr;
  for (auto& [name, u] : usage_) {
    if (u.OverHot()) return &u;
  }
  return nullptr;
}

TenantUsage* TenantQuotaTable::OverColdQuota() {
  if (!any_cold_quota_) return nullptr;
  for (auto& [name, u] : usage_) {
    if (u.OverCold()) return &u;
  }
  return nullptr;
}

}  // namespace kvtier::storage
