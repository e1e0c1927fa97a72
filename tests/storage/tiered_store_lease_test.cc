// Leases taken by Lookup (storage/lease_table.h): a leased prefix survives pressure, an
// expired or released lease frees it, leased bytes stay under their bounds.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/tiered_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::storage::testing {
namespace {

class TieredStoreLeaseTest : public StoreTest {
 protected:
  static LeaseOptions Lease(uint64_t ms, bool every_resident_key = false) {
    LeaseOptions o;
    o.lease_ms = ms;
    o.every_resident_key = every_resident_key;
    return o;
  }
  static std::vector<std::string> ChainKeys(uint64_t seq, uint32_t n) {
    std::vector<std::string> keys;
    for (uint32_t i = 0; i < n; ++i) keys.push_back(KeyOf(seq, i));
    return keys;
  }
  static uint64_t BlockBytes() { return MakePayload(SmallLayout(), 0, 1).size(); }
  // Puts `n` one-block sequences seq0.. : enough to push every unleased block out of a
  // small hot and cold tier.
  static void Pressure(TieredStore* store, uint64_t seq0, int n) {
    for (int s = 0; s < n; ++s) PutChain(store, seq0 + s, 1);
  }
};

TEST_F(TieredStoreLeaseTest, LeasedPrefixSurvivesPressureThatEvictsEverythingElse) {
  auto store = Open(Options(/*hot_blocks=*/8, /*cold_blocks=*/8));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChain(store.get(), 1, 3);
  // Block 3 of the chain is cold when leased: it may move, never leave.
  PutChain(store.get(), 1, 4);
  const std::vector<std::string> last = {KeyOf(1, 3)};
  ASSERT_EQ(*store->Evict("ns", last, /*drop=*/false), 1u);
  PutChain(store.get(), 2, 2);  // unleased
  const std::vector<std::string> keys = ChainKeys(1, 4);
  auto r = store->Lookup("ns", keys, Lease(1000));
  ASSERT_OK(r);
  EXPECT_EQ(r->prefix_blocks, 4u);
  EXPECT_EQ(r->leased_blocks, 4u);
  EXPECT_NE(r->lease_id, 0u);
  EXPECT_EQ(r->lease_limit, LeaseLimit::kNone);
  ASSERT_EQ(r->tiers, (std::vector<Tier>{Tier::kHot, Tier::kHot, Tier::kHot, Tier::kCold}));

  Pressure(store.get(), 100, 40);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(TierOf(store.get(), KeyOf(1, i)), Tier::kHot) << i;
  EXPECT_NE(TierOf(store.get(), KeyOf(1, 3)), Tier::kNone);
  EXPECT_EQ(TierOf(store.get(), KeyOf(2, 0)), Tier::kNone);  // unleased: gone
  EXPECT_EQ(TierOf(store.get(), KeyOf(100, 0)), Tier::kNone);
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.leases.granted, 1u);
  EXPECT_EQ(stats.leases.active, 1u);
  EXPECT_EQ(stats.leases.leased_bytes, 4 * BlockBytes());
}

TEST_F(TieredStoreLeaseTest, ExpiredLeaseFreesThePrefix) {
  auto store = Open(Options(/*hot_blocks=*/8, /*cold_blocks=*/8));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChain(store.get(), 1, 3);
  const std::vector<std::string> keys = ChainKeys(1, 3);
  ASSERT_EQ(store->Lookup("ns", keys, Lease(1000))->leased_blocks, 3u);
  clock_.AdvanceMillis(999);
  Pressure(store.get(), 100, 40);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 0)), Tier::kHot);
  clock_.AdvanceMillis(1);
  Pressure(store.get(), 200, 40);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(TierOf(store.get(), KeyOf(1, i)), Tier::kNone) << i;
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.leases.expired_unused, 1u);
  EXPECT_EQ(stats.leases.released, 0u);
  EXPECT_EQ(stats.leases.active, 0u);
  EXPECT_EQ(stats.leases.leased_bytes, 0u);
}

TEST_F(TieredStoreLeaseTest, ReleaseFreesThePrefix) {
  auto store = Open(Options(/*hot_blocks=*/8, /*cold_blocks=*/8));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChain(store.get(), 1, 3);
  const std::vector<std::string> keys = ChainKeys(1, 3);
  const uint64_t id = store->Lookup("ns", keys, Lease(60'000))->lease_id;
  EXPECT_EQ(store->ReleaseLease("other", id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*store->ReleaseLease("ns", id), 3u);
  EXPECT_EQ(*store->ReleaseLease("ns", id), 0u);  // already ended
  Pressure(store.get(), 100, 40);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 0)), Tier::kNone);
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.leases.released, 1u);
  EXPECT_EQ(stats.leases.expired_unused, 0u);
}

TEST_F(TieredStoreLeaseTest, LeasedBytesNeverExceedTheNodeBound) {
  StoreOptions o = Options(/*hot_blocks=*/16);
  o.max_leased_bytes = 5 * BlockBytes();
  auto store = Open(o);
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChain(store.get(), 1, 4);
  const std::vector<std::string> keys = ChainKeys(1, 4);
  auto first = store->Lookup("ns", keys, Lease(1000));
  EXPECT_EQ(first->prefix_blocks, 4u);
  EXPECT_EQ(first->leased_blocks, 4u);
  auto second = store->Lookup("ns", keys, Lease(1000));
  EXPECT_EQ(second->prefix_blocks, 4u);  // still reported resident ...
  EXPECT_EQ(second->leased_blocks, 1u);  // ... but leased only as far as the bound allows
  EXPECT_EQ(second->lease_limit, LeaseLimit::kNodeBytes);
  auto third = store->Lookup("ns", keys, Lease(1000));
  EXPECT_EQ(third->leased_blocks, 0u);
  EXPECT_EQ(third->lease_id, 0u);
  EXPECT_EQ(third->lease_limit, LeaseLimit::kNodeBytes);
  EXPECT_LE(store->Stats().leases.leased_bytes, o.max_leased_bytes);
  EXPECT_EQ(store->Stats().leases.granted, 2u);
}

TEST_F(TieredStoreLeaseTest, LeasedBytesNeverExceedTheTenantBound) {
  StoreOptions o = Options(/*hot_blocks=*/16);
  o.max_leased_bytes = 100 * BlockBytes();
  o.max_leased_bytes_per_tenant = 3 * BlockBytes();
  auto store = Open(o);
  NamespaceOptions a = SmallNamespace("a");
  a.tenant = "alice";
  NamespaceOptions b = SmallNamespace("b");
  b.tenant = "bob";
  ASSERT_OK(store->RegisterNamespace(a));
  ASSERT_OK(store->RegisterNamespace(b));
  PutChain(store.get(), 1, 4, "a");
  PutChain(store.get(), 1, 4, "b");
  const std::vector<std::string> keys = ChainKeys(1, 4);
  auto ra = store->Lookup("a", keys, Lease(1000));
  EXPECT_EQ(ra->leased_blocks, 3u);
  EXPECT_EQ(ra->lease_limit, LeaseLimit::kTenantBytes);
  auto rb = store->Lookup("b", keys, Lease(1000));  // another tenant has its own bound
  EXPECT_EQ(rb->leased_blocks, 3u);
  EXPECT_EQ(store->Stats().leases.leased_bytes, 6 * BlockBytes());
}

TEST_F(TieredStoreLeaseTest, DeleteEndsTheHoldAndLookupStaysReadOnly) {
  auto store = Open(Options(/*hot_blocks=*/8, /*cold_blocks=*/8));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChain(store.get(), 1, 2);
  const std::vector<std::string> keys = ChainKeys(1, 2);
  const uint64_t id = store->Lookup("ns", keys, Lease(1000))->lease_id;
  const std::vector<std::string> tail = {KeyOf(1, 1)};
  EXPECT_EQ(*store->Delete("ns", tail), 1u);  // an explicit delete wins over the lease
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 1)), Tier::kNone);
  PutChain(store.get(), 7, 2);  // may reuse the freed entry: it is not leased
  Pressure(store.get(), 100, 40);
  EXPECT_EQ(TierOf(store.get(), KeyOf(7, 1)), Tier::kNone);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 0)), Tier::kHot);
  EXPECT_EQ(*store->ReleaseLease("ns", id), 1u);
  // Lookup without a lease grants nothing.
  auto plain = store->Lookup("ns", keys);
  EXPECT_EQ(plain->lease_id, 0u);
  EXPECT_EQ(store->Stats().leases.granted, 1u);
}

TEST_F(TieredStoreLeaseTest, EveryResidentKeyLeasesPastAGap) {
  auto store = Open(Options(/*hot_blocks=*/8, /*cold_blocks=*/8));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChain(store.get(), 1, 4);
  const std::vector<std::string> gap = {KeyOf(1, 1)};
  ASSERT_EQ(*store->Delete("ns", gap), 1u);  // held elsewhere in a cluster, say
  const std::vector<std::string> keys = ChainKeys(1, 4);
  auto prefix_only = store->Lookup("ns", keys, Lease(1000));
  EXPECT_EQ(prefix_only->prefix_blocks, 1u);
  EXPECT_EQ(prefix_only->leased_blocks, 1u);
  auto every = store->Lookup("ns", keys, Lease(1000, /*every_resident_key=*/true));
  EXPECT_EQ(every->prefix_blocks, 1u);
  EXPECT_EQ(every->leased_blocks, 3u);  // keys 0, 2 and 3
  Pressure(store.get(), 100, 40);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 3)), Tier::kHot);
}

TEST_F(TieredStoreLeaseTest, DistinctBlocksCountABlockInBothTiersOnce) {
  auto store = Open(Options(/*hot_blocks=*/8));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChain(store.get(), 1, 4);
  ASSERT_OK(store->Flush("ns"));  // every block now in both tiers
  NamespaceStats s = NsStats(*store);
  EXPECT_EQ(s.hot.blocks, 4u);
  EXPECT_EQ(s.cold.blocks, 4u);
  EXPECT_EQ(s.distinct_blocks, 4u);
  const std::vector<std::string> del = {KeyOf(1, 3)};
  ASSERT_EQ(*store->Delete("ns", del), 1u);
  EXPECT_EQ(NsStats(*store).distinct_blocks, 3u);
}

}  // namespace
}  // namespace kvtier::storage::testing
