// Per-tenant quotas in the server config (ServerConfig.tenant_quotas, the --tenant-quota
// flag) and their errors at the gRPC edge (docs/design.md §4 Tiers and eviction,
// storage/tenant_quota.h). Pure functions; thread-safe.
#ifndef KVTIER_SERVICE_TENANT_QUOTAS_H_
#define KVTIER_SERVICE_TENANT_QUOTAS_H_

#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "kvtier/v1/kvtier.pb.h"
#include "storage/tenant_quota.h"

namespace kvtier::service {

// Returns the quotas of `config` as the store takes them (StoreOptions::tenant_quotas).
std::vector<storage::TenantQuota> TenantQuotasFromConfig(const v1::ServerConfig& config);

// Adds the quota `value` ("TENANT:HOT[:COLD[:LEASED]]", sizes in common/byte_size.h syntax,
// 0 = unlimited) of the --tenant-quota flag to config->tenant_quotas. INVALID_ARGUMENT
// naming the flag for a malformed value.
absl::Status AddTenantQuotaFlag(std::string_view value, v1::ServerConfig* config);

// Returns `status` with ErrorDetail{TENANT_QUOTA_EXHAUSTED, "tenant_quotas.<quota>"}
// attached when the store refused a block at a tenant's quota
// (storage::ExhaustedQuotaName); any other status unchanged.
absl::Status WithTenantQuotaDetail(absl::Status status);

}  // namespace kvtier::service

#endif  // KVTIER_SERVICE_TENANT_QUOTAS_H_
