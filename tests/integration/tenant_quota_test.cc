// Per-tenant quotas end to end (ServerConfig.tenant_quotas, storage/tenant_quota.h): a
// real kvtierd with two bearer-token tenants, tenant A under a hot quota writing far past
// it while tenant B replays a working set that fits in its share, then A with nothing of
// its own left to demote.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "protocol/error_detail.h"
#include "tests/integration/sequences.h"
#include "tests/testing/layouts.h"
#include "tests/testing/namespace_spec.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::client {
namespace {

namespace v1 = ::kvtier::v1;
using ::testing::HasSubstr;
using testing::ServerProcess;
using testing::TempDir;

constexpr kv::Layout kLayout = testing::SmallLayout();
constexpr int kQuotaBlocks = 16;  // A's hot quota, in blocks
constexpr int kBSequences = 8;    // B's working set: 8 sequences of 4 blocks
constexpr int kChain = 4;

// token-a / token-b (tests/integration/auth_test.cc).
constexpr char kTenantsConfig[] =
    "tenants { tenant: \"team-a\" token_sha256: "
    "\"a70bf50e531ce1a817561f2f5d5b6645d4e806becf58ccc5e8cf6b8045a090a8\" }\n"
    "tenants { tenant: \"team-b\" token_sha256: "
    "\"49e2bb7eab54cf09b409ffafd3fa8a8a955a60eb972faacaefbed3dbd3207132\" }\n"
    // 4 MiB hot (~127 blocks); plain prefix LRU, which protects nothing by reuse.
    "hot_capacity_bytes: 4194304\n"
    "eviction_policy: \"prefix_lru\"\n";

v1::NamespaceSpec Spec(const std::string& name) {
  return testing::NamespaceSpecOf(name, kLayout);
}

class TenantQuotaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    block_bytes_ = MakeSequence("x", kLayout, 1, 1).encoded[0].size();
    std::ofstream(dir_.Sub("kvtierd.textproto"))
        << kTenantsConfig << "tenant_quotas { tenant: \"team-a\" hot_bytes: "
        << kQuotaBlocks * block_bytes_ << " }\n";
    auto p = ServerProcess::StartKvtierd(dir_.Sub("data"),
                                         {"--config", dir_.Sub("kvtierd.textproto")});
    ASSERT_OK(p);
    server_ = std::make_unique<ServerProcess>(std::move(*p));
    a_ = Connect("token-a", "a-ns");
    b_ = Connect("token-b", "b-ns");
    ASSERT_TRUE(a_ != nullptr && b_ != nullptr);
  }

  std::unique_ptr<Client> Connect(const std::string& token, const std::string& ns) {
    ClientOptions o;
    o.server = server_->address();
    o.auth_token = token;
    o.namespace_spec = Spec(ns);
    o.num_channels = 1;
    o.max_attempts = 1;
    auto c = Client::Connect(o);
    EXPECT_OK(c);
    return c.ok() ? *std::move(c) : nullptr;
  }

  // B's share of hot hits while replaying its working set `rounds` times, A putting
  // `a_blocks` new blocks (sequences of kChain) before each replay.
  double ReplayB(int rounds, int a_blocks) {
    uint64_t hot0 = 0, gets0 = 0;
    StatsOfB(&hot0, &gets0);
    for (int r = 0; r < rounds; ++r) {
      for (int s = 0; s < a_blocks / kChain; ++s) {
        const Sequence seq = MakeSequence("a-ns", kLayout, kChain, next_a_seed_++);
        EXPECT_OK(a_->PutBlocks("a-ns", seq.blocks));
      }
      for (const Sequence& seq : b_set_) {
        auto got = b_->GetBlocks("b-ns", seq.keys);
        EXPECT_OK(got);
      }
    }
    uint64_t hot1 = 0, gets1 = 0;
    StatsOfB(&hot1, &gets1);
    return static_cast<double>(hot1 - hot0) / static_cast<double>(gets1 - gets0);
  }

  void StatsOfB(uint64_t* hot_hits, uint64_t* gets) {
    auto st = b_->Stats("b-ns");
    ASSERT_OK(st);
    ASSERT_EQ(st->namespaces_size(), 1);
    *hot_hits = st->namespaces(0).hot().hits();
    *gets = st->namespaces(0).gets();
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Client> a_, b_;
  uint64_t block_bytes_ = 0;
  std::vector<Sequence> b_set_;
  uint64_t next_a_seed_ = 1;
};

TEST_F(TenantQuotaTest, ANoisyTenantNeverEvictsAnothersBlocksAndIsRefusedAtItsQuota) {
  for (int s = 0; s < kBSequences; ++s) {
    b_set_.push_back(MakeSequence("b-ns", kLayout, kChain, 1000 + s));
    ASSERT_OK(b_->PutBlocks("b-ns", b_set_.back().blocks));
  }
  const double idle = ReplayB(3, 0);
  // A writes eight times its hot quota (more than the hot tier's high watermark, so
  // without the quota B's blocks would be demoted) between two replays of B, 5 times over.
  const double flooded = ReplayB(5, 8 * kQuotaBlocks);
  std::printf("B's hot hit rate: A idle %.4f, A writing 8x its hot quota %.4f\n", idle, flooded);
  EXPECT_NEAR(flooded, idle, 0.01);

  auto sb = b_->Stats();
  ASSERT_OK(sb);
  ASSERT_EQ(sb->namespaces_size(), 1);  // B sees only its own namespace and tenant
  EXPECT_EQ(sb->namespaces(0).demotions(), 0u);
  EXPECT_EQ(sb->namespaces(0).evictions_hot_capacity(), 0u);
  EXPECT_EQ(sb->namespaces(0).distinct_blocks(), static_cast<uint64_t>(kBSequences * kChain));
  ASSERT_EQ(sb->tenants_size(), 1);
  EXPECT_EQ(sb->tenants(0).tenant(), "team-b");
  EXPECT_EQ(sb->tenants(0).hot_limit_bytes(), 0u);

  auto sa = a_->Stats();
  ASSERT_OK(sa);
  ASSERT_EQ(sa->tenants_size(), 1);
  const v1::TenantStats& ta = sa->tenants(0);
  EXPECT_EQ(ta.tenant(), "team-a");
  EXPECT_EQ(ta.hot_limit_bytes(), kQuotaBlocks * block_bytes_);
  EXPECT_LE(ta.hot_used_bytes(), ta.hot_limit_bytes());
  EXPECT_EQ(ta.evictions_caused(), 5u * 8 * kQuotaBlocks - kQuotaBlocks);
  EXPECT_EQ(ta.quota_rejections(), 0u);

  // A pins what it has hot: with nothing of its own left to demote, its next Put is
  // refused with RESOURCE_EXHAUSTED naming the quota, and B is untouched.
  std::vector<std::string> a_keys;
  for (uint64_t seed = 1; seed < next_a_seed_; ++seed) {
    for (const std::string& k : MakeSequence("a-ns", kLayout, kChain, seed).keys) {
      a_keys.push_back(k);
    }
  }
  auto pinned = a_->Pin("a-ns", a_keys, /*ttl_ms=*/0);
  ASSERT_OK(pinned);
  EXPECT_EQ(*pinned, static_cast<uint64_t>(kQuotaBlocks));
  const Sequence extra = MakeSequence("a-ns", kLayout, 1, 999999);
  auto refused = a_->PutBlocks("a-ns", extra.blocks);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("tenant team-a: hot quota"));
  auto detail = protocol::GetErrorDetail(refused.status());
  ASSERT_TRUE(detail.has_value()) << refused.status();
  EXPECT_EQ(detail->reason(), v1::TENANT_QUOTA_EXHAUSTED);
  EXPECT_EQ(detail->field(), "tenant_quotas.hot_bytes");
  EXPECT_EQ(a_->Stats()->tenants(0).quota_rejections(), 1u);
  // B still puts and hits.
  const Sequence more = MakeSequence("b-ns", kLayout, kChain, 5000);
  EXPECT_OK(b_->PutBlocks("b-ns", more.blocks));
  EXPECT_NEAR(ReplayB(1, 0), 1.0, 1e-9);
}

}  // namespace
}  // namespace kvtier::client
