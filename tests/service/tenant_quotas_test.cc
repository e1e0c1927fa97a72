// Tenant quotas in the server config and at the gRPC edge (service/tenant_quotas.h).
#include "service/tenant_quotas.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "protocol/error_detail.h"
#include "service/config.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::service {
namespace {

using ::testing::HasSubstr;

TEST(TenantQuotasTest, FlagsAndConfigReachTheStoreOptions) {
  auto cl = ParseCommandLine(
      {"--tenant-quota", "team-a:64MiB:1GiB:8MiB", "--tenant-quota=team-b:1MiB"});
  ASSERT_OK(cl);
  const storage::StoreOptions o = ToStoreOptions(cl->config);
  ASSERT_EQ(o.tenant_quotas.size(), 2u);
  EXPECT_EQ(o.tenant_quotas[0].tenant, "team-a");
  EXPECT_EQ(o.tenant_quotas[0].hot_bytes, 64ull << 20);
  EXPECT_EQ(o.tenant_quotas[0].cold_bytes, 1ull << 30);
  EXPECT_EQ(o.tenant_quotas[0].leased_bytes, 8ull << 20);
  EXPECT_EQ(o.tenant_quotas[1].tenant, "team-b");
  EXPECT_EQ(o.tenant_quotas[1].hot_bytes, 1ull << 20);
  EXPECT_EQ(o.tenant_quotas[1].cold_bytes, 0u);  // unlimited
  EXPECT_EQ(o.tenant_quotas[1].leased_bytes, 0u);
}

TEST(TenantQuotasTest, BadQuotasAreRejectedNamingTheEntry) {
  EXPECT_THAT(std::string(ParseCommandLine({"--tenant-quota", "team-a"}).status().message()),
              HasSubstr("TENANT:HOT[:COLD[:LEASED]]"));
  EXPECT_THAT(
      std::string(ParseCommandLine({"--tenant-quota", "team-a:12XB"}).status().message()),
      HasSubstr("--tenant-quota"));
  EXPECT_THAT(std::string(ParseCommandLine({"--tenant-quota", "a:1M", "--tenant-quota", "a:2M"})
                              .status()
                              .message()),
              HasSubstr("tenant_quotas[1]: tenant 'a' is listed twice"));
  EXPECT_THAT(
      std::string(ParseCommandLine({"--tenant-quota", "bad name:1M"}).status().message()),
      HasSubstr("tenant_quotas[0].tenant"));
}

TEST(TenantQuotasTest, AStoreQuotaRefusalGetsAStructuredDetail) {
  const absl::Status refused = WithTenantQuotaDetail(storage::TenantQuotaExhausted(
      "team-a", storage::QuotaKind::kHotBytes, 64ull << 20, "all pinned"));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("tenant team-a: hot quota 64 MiB exhausted"));
  auto detail = protocol::GetErrorDetail(refused);
  ASSERT_TRUE(detail.has_value());
  EXPECT_EQ(detail->reason(), v1::TENANT_QUOTA_EXHAUSTED);
  EXPECT_EQ(detail->field(), "tenant_quotas.hot_bytes");
  // Any other status passes unchanged.
  const absl::Status busy = WithTenantQuotaDetail(absl::ResourceExhaustedError("server busy"));
  EXPECT_FALSE(protocol::GetErrorDetail(busy).has_value());
  EXPECT_OK(WithTenantQuotaDetail(absl::OkStatus()));
}

}  // namespace
}  // namespace kvtier::service
