// Prefetch on Lookup (LeaseOptions::prefetch, docs/prefetch.md): the cold blocks of a
// looked-up prefix are promoted in the background, the Gets that follow read them hot or
// wait for their read, and every prefetch ends counted: a hit, wasted (evicted or
// expired unread) or cancelled. Over the fault-injecting FakeColdTier and a FakeClock.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "storage/tiered_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/fake_cold_tier.h"
#include "tests/testing/poll_until.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::storage::testing {
namespace {

using kvtier::testing::FakeColdTier;
using kvtier::testing::PollUntil;

class TieredStorePrefetchTest : public StoreTest {
 protected:
  static LeaseOptions Prefetch(uint64_t lease_ms = 0) {
    LeaseOptions o;
    o.lease_ms = lease_ms;
    o.prefetch = true;
    return o;
  }
  static std::vector<std::string> ChainKeys(uint64_t seq, uint32_t n) {
    std::vector<std::string> keys;
    for (uint32_t i = 0; i < n; ++i) keys.push_back(KeyOf(seq, i));
    return keys;
  }
  static uint64_t BlockBytes() { return MakePayload(SmallLayout(), 0, 1).size(); }

  // Opens a store of `hot_blocks` over a FakeColdTier (kept in cold_), registers "ns",
  // puts chain 1 of `n` blocks and demotes it all to cold.
  std::unique_ptr<TieredStore> OpenWithColdChain(StoreOptions o, uint32_t n) {
    auto cold = std::make_unique<FakeColdTier>();
    cold_ = cold.get();
    auto store = Open(o, std::move(cold));
    EXPECT_OK(store->RegisterNamespace(SmallNamespace()));
    payloads_ = PutChain(store.get(), 1, n);
    EXPECT_OK(store->Evict("ns", {}, /*drop=*/false));
    for (uint32_t i = 0; i < n; ++i) EXPECT_EQ(TierOf(store.get(), KeyOf(1, i)), Tier::kCold);
    return store;
  }
  static bool Prefetched(const TieredStore& store, uint64_t n) {
    return PollUntil([&] { return store.Stats().prefetch.prefetched_blocks >= n; },
                     std::chrono::seconds(10));
  }

  FakeColdTier* cold_ = nullptr;
  std::vector<std::string> payloads_;
};

TEST_F(TieredStorePrefetchTest, GetsAfterAPrefetchReadHot) {
  auto store = OpenWithColdChain(Options(/*hot_blocks=*/32), 4);
  const std::vector<std::string> keys = ChainKeys(1, 4);
  auto r = store->Lookup("ns", keys, Prefetch());
  ASSERT_OK(r);
  EXPECT_EQ(r->prefix_blocks, 4u);
  EXPECT_EQ(r->tiers, std::vector<Tier>(4, Tier::kCold));  // what it found, not what it started
  ASSERT_TRUE(Prefetched(*store, 4));
  for (uint32_t i = 0; i < 4; ++i) {
    auto ref = store->Get("ns", keys[i]);
    ASSERT_OK(ref);
    EXPECT_EQ(ref->tier(), Tier::kHot) << i;
    EXPECT_EQ(RefBytes(*ref), payloads_[i]) << i;
  }
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.prefetch.queued_blocks, 4u);
  EXPECT_EQ(stats.prefetch.prefetched_blocks, 4u);
  EXPECT_EQ(stats.prefetch.hits, 4u);
  EXPECT_EQ(stats.prefetch.wasted_evicted + stats.prefetch.wasted_expired, 0u);
  EXPECT_EQ(stats.prefetch.inflight_bytes, 0u);
  EXPECT_EQ(stats.prefetch.unread_bytes, 0u);
  EXPECT_EQ(NsStats(*store).cold.hits, 0u);
  EXPECT_EQ(NsStats(*store).hot.hits, 4u);
  // A second read of a block is a plain hot hit, not a prefetch hit.
  ASSERT_OK(store->Get("ns", keys[0]));
  EXPECT_EQ(store->Stats().prefetch.hits, 4u);
}

TEST_F(TieredStorePrefetchTest, WithoutTheFlagNothingIsPrefetched) {
  auto store = OpenWithColdChain(Options(/*hot_blocks=*/32), 4);
  const std::vector<std::string> keys = ChainKeys(1, 4);
  ASSERT_OK(store->Lookup("ns", keys, LeaseOptions{}));
  auto ref = store->Get("ns", keys[0]);
  ASSERT_OK(ref);
  EXPECT_EQ(ref->tier(), Tier::kCold);
  EXPECT_EQ(store->Stats().prefetch.queued_blocks, 0u);
}

TEST_F(TieredStorePrefetchTest, GetWaitsForTheInFlightReadInsteadOfReadingTwice) {
  StoreOptions o = Options(/*hot_blocks=*/32);
  o.prefetch_threads = 1;
  auto store = OpenWithColdChain(o, 1);
  cold_->BlockReads();
  const std::vector<std::string> keys = ChainKeys(1, 1);
  ASSERT_OK(store->Lookup("ns", keys, Prefetch()));
  cold_->WaitForBlockedReads(1);  // the prefetch's read
  absl::StatusOr<BlockRef> got = absl::UnknownError("not run");
  std::thread getter([&] { got = store->Get("ns", keys[0]); });
  // The Get either waits for the prefetch (what it should do) or issues a second read,
  // which blocks too; give it time to get there, then let the reads go.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  cold_->ReleaseReads();
  getter.join();
  ASSERT_OK(got);
  EXPECT_EQ(got->tier(), Tier::kHot);
  EXPECT_EQ(RefBytes(*got), payloads_[0]);
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.prefetch.get_waits, 1u);
  EXPECT_GT(stats.prefetch.get_wait_us, 0u);
  EXPECT_EQ(stats.prefetch.hits, 1u);
  EXPECT_EQ(NsStats(*store).cold.hits, 0u);  // no second cold read was served
}

TEST_F(TieredStorePrefetchTest, AGetOfAQueuedBlockReadsItItselfAndTheQueueSkipsIt) {
  StoreOptions o = Options(/*hot_blocks=*/32);
  o.prefetch_threads = 1;
  o.prefetch_batch_bytes = 1;  // one block per read
  auto store = OpenWithColdChain(o, 3);
  cold_->BlockReads();
  const std::vector<std::string> keys = ChainKeys(1, 3);
  ASSERT_OK(store->Lookup("ns", keys, Prefetch()));
  cold_->WaitForBlockedReads(1);  // block 0 in flight, 1 and 2 queued
  absl::StatusOr<BlockRef> got = absl::UnknownError("not run");
  std::thread getter([&] { got = store->Get("ns", keys[2]); });
  cold_->WaitForBlockedReads(2);  // the Get's own read of block 2
  cold_->ReleaseReads();
  getter.join();
  ASSERT_OK(got);
  EXPECT_EQ(got->tier(), Tier::kCold);
  ASSERT_TRUE(Prefetched(*store, 2));  // blocks 0 and 1
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.prefetch.prefetched_blocks, 2u);
  EXPECT_EQ(stats.prefetch.cancelled, 1u);
  EXPECT_EQ(stats.prefetch.get_waits, 0u);
}

TEST_F(TieredStorePrefetchTest, BoundedByItsShareOfTheHotTier) {
  StoreOptions o = Options(/*hot_blocks=*/16);
  o.prefetch_max_hot_fraction = 0.25;  // 4 blocks
  auto store = OpenWithColdChain(o, 8);
  ASSERT_OK(store->Lookup("ns", ChainKeys(1, 8), Prefetch()));
  ASSERT_TRUE(Prefetched(*store, 4));
  StoreStats stats = store->Stats();
  EXPECT_EQ(stats.prefetch.queued_blocks, 4u);
  EXPECT_EQ(stats.prefetch.skipped_blocks, 4u);
  EXPECT_EQ(stats.prefetch.unread_bytes, 4 * BlockBytes());
  // Reading them frees the share: the next Lookup queues the rest.
  for (uint32_t i = 0; i < 4; ++i) ASSERT_OK(store->Get("ns", KeyOf(1, i)));
  ASSERT_OK(store->Lookup("ns", ChainKeys(1, 8), Prefetch()));
  ASSERT_TRUE(Prefetched(*store, 8));
  for (uint32_t i = 4; i < 8; ++i) EXPECT_EQ(store->Get("ns", KeyOf(1, i))->tier(), Tier::kHot);
  EXPECT_EQ(store->Stats().prefetch.hits, 8u);
}

TEST_F(TieredStorePrefetchTest, BoundedByBytesInFlight) {
  StoreOptions o = Options(/*hot_blocks=*/32);
  o.prefetch_max_inflight_bytes = 2 * BlockBytes();
  o.prefetch_threads = 1;
  auto store = OpenWithColdChain(o, 6);
  cold_->BlockReads();
  ASSERT_OK(store->Lookup("ns", ChainKeys(1, 6), Prefetch()));
  // The Lookup hands its run over; a reader queues it.
  ASSERT_TRUE(PollUntil(
      [&] {
        const PrefetchStats p = store->Stats().prefetch;
        return p.queued_blocks + p.skipped_blocks == 6;
      },
      std::chrono::seconds(10)));
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.prefetch.queued_blocks, 2u);
  EXPECT_EQ(stats.prefetch.skipped_blocks, 4u);
  EXPECT_EQ(stats.prefetch.inflight_bytes, 2 * BlockBytes());
  cold_->ReleaseReads();
  ASSERT_TRUE(Prefetched(*store, 2));
}

TEST_F(TieredStorePrefetchTest, RespectsTheTenantHotQuota) {
  StoreOptions o = Options(/*hot_blocks=*/32);
  o.tenant_quotas.push_back(TenantQuota{"default", 2 * BlockBytes(), 0, 0});
  o.prefetch_threads = 1;  // one read at a time: the quota check sees the one before
  auto store = OpenWithColdChain(o, 6);
  ASSERT_OK(store->Lookup("ns", ChainKeys(1, 6), Prefetch()));
  ASSERT_TRUE(PollUntil(
      [&] {
        const PrefetchStats p = store->Stats().prefetch;
        return p.prefetched_blocks + p.cancelled + p.skipped_blocks == 6;
      },
      std::chrono::seconds(10)));
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.prefetch.prefetched_blocks, 2u);
  ASSERT_EQ(stats.tenants.size(), 1u);
  EXPECT_LE(stats.tenants[0].hot_used_bytes, 2 * BlockBytes());
}

TEST_F(TieredStorePrefetchTest, UnreadPrefetchedBlocksSurvivePressure) {
  auto store = OpenWithColdChain(Options(/*hot_blocks=*/16), 2);
  ASSERT_OK(store->Lookup("ns", ChainKeys(1, 2), Prefetch()));
  ASSERT_TRUE(Prefetched(*store, 2));
  for (uint64_t s = 100; s < 140; ++s) PutChain(store.get(), s, 1);  // 2.5x the hot tier
  for (uint32_t i = 0; i < 2; ++i) {
    auto ref = store->Get("ns", KeyOf(1, i));
    ASSERT_OK(ref);
    EXPECT_EQ(ref->tier(), Tier::kHot) << i;
  }
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.prefetch.hits, 2u);
  EXPECT_EQ(stats.prefetch.wasted_evicted, 0u);
}

TEST_F(TieredStorePrefetchTest, EvictedUnreadCountsWasted) {
  auto store = OpenWithColdChain(Options(/*hot_blocks=*/16), 2);
  ASSERT_OK(store->Lookup("ns", ChainKeys(1, 2), Prefetch()));
  ASSERT_TRUE(Prefetched(*store, 2));
  const std::vector<std::string> last = {KeyOf(1, 1)};
  ASSERT_EQ(*store->Evict("ns", last, /*drop=*/false), 1u);
  ASSERT_EQ(*store->Delete("ns", std::vector<std::string>{KeyOf(1, 0)}), 1u);
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.prefetch.wasted_evicted, 2u);
  EXPECT_EQ(stats.prefetch.hits, 0u);
  EXPECT_EQ(stats.prefetch.unread_bytes, 0u);
}

TEST_F(TieredStorePrefetchTest, ExpiredUnreadCountsWastedAndBecomesEvictable) {
  StoreOptions o = Options(/*hot_blocks=*/16);
  o.prefetch_unread_ms = 1000;
  auto store = OpenWithColdChain(o, 2);
  ASSERT_OK(store->Lookup("ns", ChainKeys(1, 2), Prefetch()));
  ASSERT_TRUE(Prefetched(*store, 2));
  clock_.AdvanceMillis(1000);
  for (uint64_t s = 100; s < 140; ++s) PutChain(store.get(), s, 1);
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.prefetch.wasted_expired, 2u);
  EXPECT_EQ(stats.prefetch.wasted_evicted, 0u);  // evicted after it expired: counted once
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 1)), Tier::kCold);
}

TEST_F(TieredStorePrefetchTest, ReleasingTheLeaseCancelsWhatIsQueuedAndInFlight) {
  StoreOptions o = Options(/*hot_blocks=*/32);
  o.prefetch_threads = 1;
  o.prefetch_batch_bytes = 1;  // one block per read: two stay queued
  auto store = OpenWithColdChain(o, 3);
  cold_->BlockReads();
  auto r = store->Lookup("ns", ChainKeys(1, 3), Prefetch(/*lease_ms=*/5000));
  ASSERT_OK(r);
  ASSERT_EQ(r->leased_blocks, 3u);
  cold_->WaitForBlockedReads(1);
  ASSERT_EQ(*store->ReleaseLease("ns", r->lease_id), 3u);
  EXPECT_EQ(store->Stats().prefetch.cancelled, 2u);  // the queued two at once
  cold_->ReleaseReads();
  ASSERT_TRUE(PollUntil([&] { return store->Stats().prefetch.cancelled == 3; },
                        std::chrono::seconds(10)));
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.prefetch.prefetched_blocks, 0u);
  EXPECT_EQ(stats.prefetch.inflight_bytes, 0u);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(TierOf(store.get(), KeyOf(1, i)), Tier::kCold);
}

TEST_F(TieredStorePrefetchTest, LeaseExpiryCountsUnreadAsWasted) {
  auto store = OpenWithColdChain(Options(/*hot_blocks=*/32), 2);
  auto r = store->Lookup("ns", ChainKeys(1, 2), Prefetch(/*lease_ms=*/100));
  ASSERT_OK(r);
  ASSERT_TRUE(Prefetched(*store, 2));
  clock_.AdvanceMillis(100);
  ASSERT_OK(store->Lookup("ns", ChainKeys(1, 1), LeaseOptions{.lease_ms = 10}));
  EXPECT_EQ(store->Stats().prefetch.wasted_expired, 2u);
}

TEST_F(TieredStorePrefetchTest, ACorruptColdCopyIsNeverPrefetchedNorServed) {
  auto store = OpenWithColdChain(Options(/*hot_blocks=*/32), 2);
  const StoreStats before = store->Stats();
  ASSERT_FALSE(before.namespaces.empty());
  ASSERT_TRUE(cold_->CorruptValue(/*ns_id=*/0, KeyOf(1, 1)) ||
              cold_->CorruptValue(/*ns_id=*/1, KeyOf(1, 1)));
  ASSERT_OK(store->Lookup("ns", ChainKeys(1, 2), Prefetch()));
  ASSERT_TRUE(PollUntil(
      [&] {
        const PrefetchStats p = store->Stats().prefetch;
        return p.prefetched_blocks == 1 && p.failed == 1;
      },
      std::chrono::seconds(10)));
  EXPECT_TRUE(absl::IsNotFound(store->Get("ns", KeyOf(1, 1)).status()));
  EXPECT_EQ(NsStats(*store).checksum_failures, 1u);
  EXPECT_EQ(store->Get("ns", KeyOf(1, 0))->tier(), Tier::kHot);
}

// The Lookup hands its run to the readers; one whose lease has ended by the time a reader
// takes it up queues nothing, and its blocks are counted cancelled.
TEST_F(TieredStorePrefetchTest, ARunWhoseLeaseEndedBeforeAReaderTookItQueuesNothing) {
  StoreOptions o = Options(/*hot_blocks=*/32);
  o.prefetch_threads = 1;
  auto store = OpenWithColdChain(o, 3);
  cold_->BlockReads();
  ASSERT_OK(store->Lookup("ns", ChainKeys(1, 1), Prefetch()));
  cold_->WaitForBlockedReads(1);  // the only reader is busy with block 0
  const std::vector<std::string> rest = {KeyOf(1, 1), KeyOf(1, 2)};
  auto r = store->Lookup("ns", rest, Prefetch(/*lease_ms=*/5000));
  ASSERT_OK(r);
  ASSERT_EQ(r->leased_blocks, 2u);
  ASSERT_EQ(*store->ReleaseLease("ns", r->lease_id), 2u);
  cold_->ReleaseReads();
  ASSERT_TRUE(PollUntil(
      [&] {
        const PrefetchStats p = store->Stats().prefetch;
        return p.prefetched_blocks == 1 && p.cancelled == 2;
      },
      std::chrono::seconds(10)));
  const StoreStats stats = store->Stats();
  EXPECT_EQ(stats.prefetch.queued_blocks, 1u);
  EXPECT_EQ(stats.prefetch.inflight_bytes, 0u);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 0)), Tier::kHot);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 1)), Tier::kCold);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 2)), Tier::kCold);
}

// GetMany answers each key as Get would (hot, cold then promoted, missing, a corrupt
// cold copy a miss for that key only), the cold ones read in one batch.
TEST_F(TieredStorePrefetchTest, GetManyAnswersEachKeyAsGetDoes) {
  auto store = OpenWithColdChain(Options(/*hot_blocks=*/32), 8);
  const std::vector<std::string> hot_payloads = PutChain(store.get(), 2, 1);
  ASSERT_EQ(TierOf(store.get(), KeyOf(2, 0)), Tier::kHot);
  ASSERT_TRUE(cold_->CorruptValue(/*ns_id=*/0, KeyOf(1, 3)) ||
              cold_->CorruptValue(/*ns_id=*/1, KeyOf(1, 3)));
  std::vector<std::string> keys = ChainKeys(1, 8);
  keys.push_back(KeyOf(2, 0));
  keys.push_back("never-stored");
  const std::vector<absl::StatusOr<BlockRef>> got = store->GetMany("ns", keys);
  ASSERT_EQ(got.size(), keys.size());
  for (uint32_t i = 0; i < 8; ++i) {
    if (i == 3) {
      EXPECT_TRUE(absl::IsNotFound(got[i].status())) << got[i].status();
      continue;
    }
    ASSERT_OK(got[i]) << i << ": " << got[i].status();
    EXPECT_EQ(got[i]->tier(), Tier::kCold) << i;
    EXPECT_EQ(RefBytes(*got[i]), payloads_[i]) << i;
    EXPECT_EQ(TierOf(store.get(), keys[i]), Tier::kHot) << i;  // promoted
  }
  ASSERT_OK(got[8]);
  EXPECT_EQ(got[8]->tier(), Tier::kHot);
  EXPECT_EQ(RefBytes(*got[8]), hot_payloads[0]);
  EXPECT_TRUE(absl::IsNotFound(got[9].status()));
  const NamespaceStats ns = NsStats(*store);
  EXPECT_EQ(ns.checksum_failures, 1u);
  EXPECT_EQ(ns.cold.hits, 7u);
  EXPECT_EQ(ns.hot.hits, 1u);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 3)), Tier::kNone);  // the corrupt copy is gone
  EXPECT_TRUE(absl::IsNotFound(store->GetMany("nope", keys)[0].status()));
}

}  // namespace
}  // namespace kvtier::storage::testing
