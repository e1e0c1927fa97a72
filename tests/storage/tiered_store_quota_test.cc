// Per-tenant quotas (storage/tenant_quota.h): a tenant over its hot or cold quota gives up
// its own blocks, never another tenant's, keeps the prefix invariants while doing so,
// and gets RESOURCE_EXHAUSTED naming the quota once nothing of its own can go.
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/tenant_quota.h"
#include "storage/tiered_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::storage::testing {
namespace {

uint64_t BlockBytes() { return MakePayload(SmallLayout(), 1, 1).size(); }

NamespaceOptions TenantNamespace(const std::string& name, const std::string& tenant) {
  NamespaceOptions ns = SmallNamespace(name);
  ns.tenant = tenant;
  return ns;
}

TenantStats TenantOf(const TieredStore& store, const std::string& tenant) {
  for (const TenantStats& t : store.Stats().tenants) {
    if (t.tenant == tenant) return t;
  }
  return {};
}

class TieredStoreQuotaTest : public StoreTest {
 protected:
  // Hot: 64 slots (demotion above 57, down to 51). Tenant "a" may hold `a_hot_blocks` hot
  // blocks and `a_cold_blocks` cold ones (0: unlimited).
  std::unique_ptr<TieredStore> OpenTwoTenants(uint64_t a_hot_blocks, uint64_t a_cold_blocks = 0,
                                              const std::string& db = "db") {
    StoreOptions o = TestStoreOptions(dir_.Sub(db), /*hot_blocks=*/64, 1 << 20, &clock_);
    // Plain prefix LRU: the adaptive default already shields b's re-read blocks from a's
    // one-shot writes, which would hide what the quota does.
    o.policy = EvictionPolicyKind::kPrefixLru;
    if (a_hot_blocks != 0 || a_cold_blocks != 0) {
      o.tenant_quotas.push_back(
          TenantQuota{"a", a_hot_blocks * BlockBytes(), a_cold_blocks * BlockBytes(), 0});
    }
    auto store = Open(o);
    EXPECT_OK(store->RegisterNamespace(TenantNamespace("na", "a")));
    EXPECT_OK(store->RegisterNamespace(TenantNamespace("nb", "b")));
    return store;
  }

  // Tenant b's working set: 8 chains of 4 blocks (32 blocks).
  static void PutWorkingSet(TieredStore* store) {
    for (uint64_t s = 0; s < 8; ++s) PutChain(store, 1000 + s, 4, "nb");
  }
  // Reads b's working set once; returns the blocks served from the hot tier.
  static int ReplayWorkingSet(TieredStore* store) {
    int hot = 0;
    for (uint64_t s = 0; s < 8; ++s) {
      for (uint32_t i = 0; i < 4; ++i) {
        auto ref = store->Get("nb", KeyOf(1000 + s, i));
        EXPECT_OK(ref);
        if (ref.ok() && ref->tier() == Tier::kHot) ++hot;
      }
    }
    return hot;
  }
  // b's hot hit rate over `rounds` replays while tenant a writes `a_blocks_per_round`
  // one-block sequences per round (0: a is idle).
  static double HitRateUnder(TieredStore* store, int rounds, int a_blocks_per_round) {
    PutWorkingSet(store);
    int hot = 0;
    int asked = 0;
    uint64_t seq = 1;
    for (int r = 0; r < rounds; ++r) {
      for (int i = 0; i < a_blocks_per_round; ++i) PutChain(store, seq++, 1, "na");
      hot += ReplayWorkingSet(store);
      asked += 32;
    }
    return static_cast<double>(hot) / asked;
  }
};

TEST_F(TieredStoreQuotaTest, NoisyTenantOverItsHotQuotaEvictsOnlyItsOwnBlocks) {
  double baseline;
  {
    auto store = OpenTwoTenants(/*a_hot_blocks=*/16);
    baseline = HitRateUnder(store.get(), 10, 0);
  }
  auto store = OpenTwoTenants(/*a_hot_blocks=*/16, 0, "db2");
  // Between two replays of b, a writes four times its hot quota (the hot tier's size).
  const double flooded = HitRateUnder(store.get(), 10, 64);
  std::printf("b's hot hit rate: a idle %.4f, a flooding within its quota %.4f\n", baseline,
              flooded);
  EXPECT_NEAR(flooded, baseline, 0.01);
  const NamespaceStats b = NsStats(*store, "nb");
  EXPECT_EQ(b.demotions, 0u);
  EXPECT_EQ(b.evictions_hot_capacity, 0u);
  EXPECT_EQ(b.evictions_cold_capacity, 0u);
  EXPECT_EQ(b.distinct_blocks, 32u);
  const TenantStats a = TenantOf(*store, "a");
  EXPECT_LE(a.hot_used_bytes, a.hot_limit_bytes);
  EXPECT_EQ(a.hot_limit_bytes, 16 * BlockBytes());
  EXPECT_EQ(a.evictions_caused, 10u * 64 - 16);
  EXPECT_EQ(a.quota_rejections, 0u);
  EXPECT_EQ(NsStats(*store, "na").demotions, a.evictions_caused);
}

TEST_F(TieredStoreQuotaTest, WithoutAQuotaTheNoisyTenantEvictsTheOthers) {
  // The control of the test above: the same load without a quota costs b its hot hits,
  // so the quota is what keeps them.
  auto store = OpenTwoTenants(/*a_hot_blocks=*/0);
  const double flooded = HitRateUnder(store.get(), 10, 64);
  std::printf("b's hot hit rate: a flooding without a quota %.4f\n", flooded);
  EXPECT_LT(flooded, 0.5);
  EXPECT_GT(NsStats(*store, "nb").demotions, 0u);
}

TEST_F(TieredStoreQuotaTest, QuotaEnforcementKeepsPrefixesWholeAndSinksLast) {
  auto store = OpenTwoTenants(/*a_hot_blocks=*/4, /*a_cold_blocks=*/8);
  std::vector<std::string> payloads;
  for (uint32_t i = 0; i < 24; ++i) {
    payloads.push_back(MakePayload(SmallLayout(), i, 7));
    const std::string key = KeyOf(7, i);
    const std::string parent = i == 0 ? "" : KeyOf(7, i - 1);
    BlockPut put{key, parent, i, payloads.back()};
    ASSERT_OK(store->Put("na", {&put, 1})) << i;
    // Every block put so far is resident (its descendants keep it out of cold
    // eviction), the sink block is demoted last, a stays within its hot quota.
    for (uint32_t j = 0; j <= i; ++j) {
      EXPECT_NE(TierOf(store.get(), KeyOf(7, j), "na"), Tier::kNone) << i << " " << j;
    }
    EXPECT_EQ(TierOf(store.get(), KeyOf(7, 0), "na"), Tier::kHot) << i;
    EXPECT_EQ(TierOf(store.get(), key, "na"), Tier::kHot) << i;
    EXPECT_LE(TenantOf(*store, "a").hot_used_bytes, 4 * BlockBytes()) << i;
  }
  // Cold quota enforcement deletes leaves only, so the chain stays whole even over the
  // cold quota.
  EXPECT_GT(TenantOf(*store, "a").cold_used_bytes, 8 * BlockBytes());
  // More of a's writes: its least recent leaves go, the chain from its tip inward, so
  // what stays resident of it is still a prefix (no hole).
  for (uint64_t s = 100; s < 140; ++s) PutChain(store.get(), s, 1, "na");
  EXPECT_EQ(TierOf(store.get(), KeyOf(7, 23), "na"), Tier::kNone);
  for (uint32_t i = 1; i < 24; ++i) {
    if (TierOf(store.get(), KeyOf(7, i), "na") != Tier::kNone) {
      EXPECT_NE(TierOf(store.get(), KeyOf(7, i - 1), "na"), Tier::kNone) << i;
    }
  }
  EXPECT_LE(TenantOf(*store, "a").cold_used_bytes, 8 * BlockBytes());
  EXPECT_GT(NsStats(*store, "na").evictions_cold_capacity, 0u);
}

TEST_F(TieredStoreQuotaTest, PutIsRefusedWhenNothingOfItsOwnCanBeDemoted) {
  auto store = OpenTwoTenants(/*a_hot_blocks=*/4);
  std::vector<std::string> keys;
  for (uint64_t s = 1; s <= 4; ++s) {
    PutChain(store.get(), s, 1, "na");
    keys.push_back(KeyOf(s, 0));
  }
  ASSERT_EQ(*store->Pin("na", keys, /*ttl_ms=*/0), 4u);
  PutChain(store.get(), 1000, 4, "nb");  // b holds hot blocks a could have taken

  const std::string payload = MakePayload(SmallLayout(), 0, 99);
  const std::string key = KeyOf(99, 0);
  BlockPut put{key, "", 0, payload};
  const absl::Status st = store->Put("na", {&put, 1});
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("tenant a: hot quota"), std::string::npos) << st;
  EXPECT_EQ(ExhaustedQuotaName(st), "hot_bytes");
  EXPECT_EQ(ExhaustedQuotaName(absl::ResourceExhaustedError("other")), std::nullopt);
  EXPECT_EQ(TierOf(store.get(), key, "na"), Tier::kNone);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(TierOf(store.get(), KeyOf(1000, i), "nb"), Tier::kHot);
  EXPECT_EQ(TenantOf(*store, "a").quota_rejections, 1u);
  EXPECT_EQ(TenantOf(*store, "a").evictions_caused, 0u);

  // Once one of its own blocks may go again, the Put demotes it and succeeds.
  const std::vector<std::string> one = {keys[0]};
  ASSERT_EQ(*store->Unpin("na", one), 1u);
  EXPECT_OK(store->Put("na", {&put, 1}));
  EXPECT_EQ(TierOf(store.get(), keys[0], "na"), Tier::kCold);
  EXPECT_EQ(TierOf(store.get(), key, "na"), Tier::kHot);
  EXPECT_EQ(TenantOf(*store, "a").evictions_caused, 1u);
}

TEST_F(TieredStoreQuotaTest, ColdQuotaDeletesTheTenantsOwnColdBlocksFirst) {
  auto store = OpenTwoTenants(/*a_hot_blocks=*/4, /*a_cold_blocks=*/8);
  PutChain(store.get(), 1000, 4, "nb");
  ASSERT_EQ(*store->Evict("nb", {}, /*drop=*/false), 4u);  // b's blocks are cold now
  for (uint64_t s = 1; s <= 40; ++s) PutChain(store.get(), s, 1, "na");
  const TenantStats a = TenantOf(*store, "a");
  EXPECT_LE(a.cold_used_bytes, a.cold_limit_bytes);
  EXPECT_GT(a.cold_used_bytes, 0u);
  EXPECT_GT(NsStats(*store, "na").evictions_cold_capacity, 0u);
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(TierOf(store.get(), KeyOf(1000, i), "nb"), Tier::kCold);
  }
  EXPECT_EQ(NsStats(*store, "nb").evictions_cold_capacity, 0u);
  // The 4 newest of a's blocks are hot, the next 8 cold, the rest gone.
  EXPECT_EQ(TierOf(store.get(), KeyOf(40, 0), "na"), Tier::kHot);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 0), "na"), Tier::kNone);
}

TEST_F(TieredStoreQuotaTest, LeasedQuotaOverridesThePerTenantBound) {
  StoreOptions o = Options(/*hot_blocks=*/64);
  o.max_leased_bytes_per_tenant = 100 * BlockBytes();
  o.tenant_quotas.push_back(TenantQuota{"a", 0, 0, 2 * BlockBytes()});
  auto store = Open(o);
  ASSERT_OK(store->RegisterNamespace(TenantNamespace("na", "a")));
  ASSERT_OK(store->RegisterNamespace(TenantNamespace("nb", "b")));
  PutChain(store.get(), 1, 4, "na");
  PutChain(store.get(), 2, 4, "nb");
  std::vector<std::string> a_keys, b_keys;
  for (uint32_t i = 0; i < 4; ++i) {
    a_keys.push_back(KeyOf(1, i));
    b_keys.push_back(KeyOf(2, i));
  }
  LeaseOptions lease;
  lease.lease_ms = 60'000;
  auto ra = store->Lookup("na", a_keys, lease);
  ASSERT_OK(ra);
  EXPECT_EQ(ra->leased_blocks, 2u);
  EXPECT_EQ(ra->lease_limit, LeaseLimit::kTenantBytes);
  EXPECT_EQ(store->Lookup("nb", b_keys, lease)->leased_blocks, 4u);
  const TenantStats a = TenantOf(*store, "a");
  EXPECT_EQ(a.leased_used_bytes, 2 * BlockBytes());
  EXPECT_EQ(a.leased_limit_bytes, 2 * BlockBytes());
  EXPECT_EQ(TenantOf(*store, "b").leased_limit_bytes, 100 * BlockBytes());
}

TEST_F(TieredStoreQuotaTest, InvalidQuotasAreRefusedAtOpen) {
  StoreOptions o = Options();
  o.tenant_quotas = {TenantQuota{"a", 1, 0, 0}, TenantQuota{"a", 2, 0, 0}};
  auto twice = TieredStore::Open(o);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(twice.status().message().find("listed twice"), std::string::npos);
  o.tenant_quotas = {TenantQuota{"bad name", 1, 0, 0}};
  EXPECT_EQ(TieredStore::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::storage::testing
