#include "service/tenant_quotas.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/byte_size.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "protocol/error_detail.h"

namespace kvtier::service {

std::vector<storage::TenantQuota> TenantQuotasFromConfig(const v1::ServerConfig& config) {
  std::vector<storage::TenantQuota> out;
  for (const v1::TenantQuota& q : config.tenant_quotas()) {
    out.push_back(
        storage::TenantQuota{q.tenant(), q.hot_bytes(), q.cold_bytes(), q.leased_bytes()});
  }
  return out;
}

absl::Status AddTenantQuotaFlag(std::string_view value, v1::ServerConfig* config) {
  const std::vector<std::string> parts = absl::StrSplit(Sv(value), ':');
  if (parts.size() < 2 || parts.size() > 4 || parts[0].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tenant-quota: \"", Sv(value), "\" is not TENANT:HOT[:COLD[:LEASED]]"));
  }
  v1::TenantQuota* q = config->add_tenant_quotas();
  q->set_tenant(parts[0]);
  uint64_t sizes[3] = {0, 0, 0};
  for (size_t i = 1; i < parts.size(); ++i) {
    ASSIGN_OR_RETURN(sizes[i - 1], common::ParseByteSize(parts[i], "--tenant-quota"));
  }
  q->set_hot_bytes(sizes[0]);
  q->set_cold_bytes(sizes[1]);
  q->set_leased_bytes(sizes[2]);
  return absl::OkStatus();
}

absl::Status WithTenantQuotaDetail(absl::Status status) {
  std::optional<std::string> quota = storage::ExhaustedQuotaName(status);
  if (!quota) return status;
  return protocol::WithErrorDetail(std::move(status), v1::TENANT_QUOTA_EXHAUSTED,
                                   absl::StrCat("tenant_quotas.", *quota));
}

}  // namespace kvtier::service
