// Write-back debt (storage/write_back.h, tiered_store_write_back.cc): the bounds hold on
// every Put, the flusher drains the debt, and Flush stops at its deadline with progress.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "storage/tiered_store.h"
#include "storage/write_back.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::storage {
namespace {

using ::kvtier::storage::testing::KeyOf;
using ::kvtier::storage::testing::MakePayload;
using ::kvtier::storage::testing::SmallLayout;
using ::kvtier::storage::testing::SmallNamespace;
using ::kvtier::storage::testing::TierOf;

class WriteBackTest : public testing::StoreTest {
 protected:
  // Puts chain `seq` of n blocks and checks the debt bound after every block.
  void PutChainWithinBound(TieredStore* store, uint64_t seq, uint32_t n, uint64_t max_blocks) {
    for (uint32_t i = 0; i < n; ++i) {
      const std::string payload = MakePayload(SmallLayout(), i, seq);
      const std::string key = KeyOf(seq, i);
      const std::string parent = i == 0 ? "" : KeyOf(seq, i - 1);
      BlockPut put{key, parent, i, payload};
      ASSERT_OK(store->Put("ns", {&put, 1}));
      ASSERT_LE(store->Stats().unflushed_blocks, max_blocks) << "after block " << i;
    }
  }
};

TEST(WriteBackBoundsTest, DerivedFromTheGrace) {
  // Half of a 10 s grace at 64 MiB/s and 20k blocks/s.
  constexpr WriteBackBounds b = WriteBackBoundsForGrace(10000);
  EXPECT_EQ(b.max_unflushed_blocks, 100000u);
  EXPECT_EQ(b.max_unflushed_bytes, kConservativeFlushBytesPerSecond / 1000 * 5000);
  EXPECT_EQ(StoreOptions().max_unflushed_bytes, b.max_unflushed_bytes);
  EXPECT_EQ(StoreOptions().max_unflushed_blocks, b.max_unflushed_blocks);
  // Floors for tiny graces.
  EXPECT_EQ(WriteBackBoundsForGrace(0).max_unflushed_bytes, 1ull << 20);
  EXPECT_EQ(WriteBackBoundsForGrace(0).max_unflushed_blocks, 256u);
}

TEST_F(WriteBackTest, PutKeepsTheDebtUnderTheBlockBound) {
  StoreOptions o = Options(/*hot_blocks=*/256);
  o.max_unflushed_blocks = 10;
  auto store = Open(o);
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChainWithinBound(store.get(), 1, 40, 10);
  const StoreStats st = store->Stats();
  EXPECT_EQ(st.unflushed_blocks, 10u);
  EXPECT_EQ(st.max_unflushed_blocks, 10u);
  // The oldest blocks were written back: still hot, now also cold.
  const NamespaceStats ns = testing::NsStats(*store);
  EXPECT_EQ(ns.hot.blocks, 40u);
  EXPECT_EQ(ns.cold.blocks, 30u);
  EXPECT_EQ(ns.demotions, 0u);
}

TEST_F(WriteBackTest, PutKeepsTheDebtUnderTheByteBound) {
  StoreOptions o = Options(/*hot_blocks=*/256);
  o.max_unflushed_blocks = 0;  // bytes only
  const uint64_t block_bytes = MakePayload(SmallLayout(), 1, 1).size();
  o.max_unflushed_bytes = 5 * block_bytes + block_bytes / 2;
  auto store = Open(o);
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChainWithinBound(store.get(), 1, 20, 5);
  EXPECT_LE(store->Stats().unflushed_bytes, o.max_unflushed_bytes);
  EXPECT_EQ(store->Stats().unflushed_blocks, 5u);
}

TEST_F(WriteBackTest, WriteThroughBlocksAreNeverDebt) {
  StoreOptions o = Options(/*hot_blocks=*/256);
  o.max_unflushed_blocks = 4;
  auto store = Open(o);
  ASSERT_OK(store->RegisterNamespace(SmallNamespace("ns", /*write_through=*/true)));
  PutChainWithinBound(store.get(), 1, 20, 0);
}

TEST_F(WriteBackTest, BackgroundFlusherDrainsToHalfTheBound) {
  StoreOptions o = Options(/*hot_blocks=*/512);
  o.background_demotion = true;
  o.max_unflushed_blocks = 40;
  auto store = Open(o);
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  // 31 blocks: only the last one takes the debt above 3/4 of the bound (the flusher
  // wakes once, after the last Put) and none above the bound (Put itself writes nothing
  // back), so only the background flusher drains the debt, with no Put racing it.
  PutChainWithinBound(store.get(), 1, 31, 40);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (store->Stats().unflushed_blocks > 20 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  EXPECT_EQ(store->Stats().unflushed_blocks, 20u);  // stops at half
  EXPECT_EQ(testing::NsStats(*store).cold.blocks, 11u);
}

TEST_F(WriteBackTest, FlushStopsAtItsDeadlineAndReportsProgress) {
  StoreOptions o = Options(/*hot_blocks=*/256);
  o.max_unflushed_blocks = 0;
  o.max_unflushed_bytes = 0;  // unbounded: everything stays debt
  auto store = Open(o);
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChainWithinBound(store.get(), 1, 30, 30);
  ASSERT_EQ(store->Stats().unflushed_blocks, 30u);

  // A deadline already passed: one block written (every call progresses), not done, the
  // rest of the debt reported.
  auto r = store->Flush("ns", clock_.NowMillis());
  ASSERT_OK(r);
  EXPECT_EQ(r->flushed_blocks, 1u);
  EXPECT_FALSE(r->done);
  EXPECT_EQ(r->remaining_blocks, 29u);
  EXPECT_EQ(r->remaining_bytes, store->Stats().unflushed_bytes);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 1)), Tier::kHot);  // picked blocks released

  r = store->Flush("ns", clock_.NowMillis() + 1000);
  ASSERT_OK(r);
  EXPECT_EQ(r->flushed_blocks, 29u);
  EXPECT_TRUE(r->done);
  EXPECT_EQ(r->remaining_blocks, 0u);
  EXPECT_EQ(r->remaining_bytes, 0u);
  EXPECT_EQ(store->Stats().unflushed_bytes, 0u);
  EXPECT_EQ(testing::NsStats(*store).cold.blocks, 30u);

  // Blocks released by the first call are still evictable and deletable.
  EXPECT_TRUE(absl::IsNotFound(store->Flush("nope", 0).status()));
  std::vector<std::string> keys = {KeyOf(1, 29)};
  EXPECT_EQ(*store->Delete("ns", keys), 1u);
}

TEST_F(WriteBackTest, DebtFollowsDeleteAndReput) {
  StoreOptions o = Options(/*hot_blocks=*/256);
  o.max_unflushed_blocks = 0;
  o.max_unflushed_bytes = 0;
  auto store = Open(o);
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChainWithinBound(store.get(), 1, 4, 4);
  std::vector<std::string> keys = {KeyOf(1, 3)};
  ASSERT_EQ(*store->Delete("ns", keys), 1u);
  EXPECT_EQ(store->Stats().unflushed_blocks, 3u);
  ASSERT_OK(store->Flush("ns"));
  EXPECT_EQ(store->Stats().unflushed_blocks, 0u);
  // A re-put with other bytes replaces the cold copy: debt again.
  const std::string payload = MakePayload(SmallLayout(), 0, 99);
  const std::string key = KeyOf(1, 0);
  BlockPut put{key, "", 0, payload};
  ASSERT_OK(store->Put("ns", {&put, 1}));
  EXPECT_EQ(store->Stats().unflushed_blocks, 1u);
  EXPECT_EQ(store->Stats().unflushed_bytes, payload.size());
}

}  // namespace
}  // namespace kvtier::storage
