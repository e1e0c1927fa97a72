// TieredStore over a fault-injecting cold tier (tests/testing/fake_cold_tier.h): failed
// cold writes, corrupt cold reads and slow cold reads. What a user must never see is a
// partial or wrong block; what they may see is a clear error or a miss.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "storage/tiered_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/fake_cold_tier.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::storage {
namespace {

using ::kvtier::storage::testing::KeyOf;
using ::kvtier::storage::testing::MakePayload;
using ::kvtier::storage::testing::NsStats;
using ::kvtier::storage::testing::PutChain;
using ::kvtier::storage::testing::RefBytes;
using ::kvtier::storage::testing::SmallLayout;
using ::kvtier::storage::testing::SmallNamespace;
using ::kvtier::storage::testing::TierOf;
using ::kvtier::testing::FakeColdTier;

class TieredStoreFaultTest : public testing::StoreTest {
 protected:
  // Opens a store over a new FakeColdTier (kept in cold_) with one namespace "ns".
  std::unique_ptr<TieredStore> OpenFake(uint64_t hot_blocks, bool write_through) {
    auto cold = std::make_unique<FakeColdTier>();
    cold_ = cold.get();
    auto store = Open(Options(hot_blocks), std::move(cold));
    EXPECT_OK(store->RegisterNamespace(SmallNamespace("ns", write_through)));
    return store;
  }
  static absl::Status PutOne(TieredStore* store, const std::string& key, uint32_t index,
                             const std::string& payload, const std::string& parent = "") {
    BlockPut put{key, parent, index, payload};
    return store->Put("ns", {&put, 1});
  }

  FakeColdTier* cold_ = nullptr;  // owned by the store
};

TEST_F(TieredStoreFaultTest, FailedWriteThroughPutStoresNothing) {
  auto store = OpenFake(/*hot_blocks=*/8, /*write_through=*/true);
  const std::string v1 = MakePayload(SmallLayout(), 0, 1);
  const std::string v2 = MakePayload(SmallLayout(), 0, 2);
  ASSERT_OK(PutOne(store.get(), KeyOf(1, 0), 0, v1));

  cold_->FailWrites(absl::UnavailableError("cold disk gone"));
  // A new key: the error is the cold tier's, and nothing of the block is stored.
  absl::Status st = PutOne(store.get(), KeyOf(2, 0), 0, v2);
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_NE(st.message().find("cold disk gone"), std::string::npos) << st;
  EXPECT_EQ(TierOf(store.get(), KeyOf(2, 0)), Tier::kNone);
  EXPECT_TRUE(absl::IsNotFound(store->Get("ns", KeyOf(2, 0)).status()));
  // A re-put of an existing key fails the same way and leaves the old bytes served.
  EXPECT_TRUE(absl::IsUnavailable(PutOne(store.get(), KeyOf(1, 0), 0, v2)));
  auto ref = store->Get("ns", KeyOf(1, 0));
  ASSERT_OK(ref);
  EXPECT_EQ(RefBytes(*ref), v1);
  NamespaceStats stats = NsStats(*store);
  EXPECT_EQ(stats.puts, 1u);
  EXPECT_EQ(stats.hot.blocks, 1u);
  EXPECT_EQ(stats.cold.blocks, 1u);
  EXPECT_EQ(store->Stats().hot_used_bytes, testing::SlotBytes());  // no leaked slot
  EXPECT_EQ(cold_->failed_writes(), 2);

  cold_->FailWrites(absl::OkStatus());
  ASSERT_OK(PutOne(store.get(), KeyOf(2, 0), 0, v2));
  ref = store->Get("ns", KeyOf(2, 0));
  ASSERT_OK(ref);
  EXPECT_EQ(RefBytes(*ref), v2);
}

TEST_F(TieredStoreFaultTest, FailedStandalonePutIsAnError) {
  auto store = OpenFake(/*hot_blocks=*/8, /*write_through=*/false);
  cold_->FailWrites(absl::UnavailableError("cold disk gone"));
  const std::string payload = MakePayload(SmallLayout(), 0, 3);
  const std::string key = KeyOf(3, 0);
  BlockPut put{key, "", 0, payload};
  put.standalone = true;  // cold only: no hot copy to fall back on
  EXPECT_TRUE(absl::IsUnavailable(store->Put("ns", {&put, 1})));
  EXPECT_EQ(TierOf(store.get(), KeyOf(3, 0)), Tier::kNone);
  EXPECT_EQ(cold_->num_blocks(), 0u);
}

TEST_F(TieredStoreFaultTest, FailedDemotionDropsBlocksButNeverServesPartialOnes) {
  auto store = OpenFake(/*hot_blocks=*/4, /*write_through=*/false);
  cold_->FailWrites(absl::UnavailableError("cold disk gone"));
  std::vector<std::vector<std::string>> payloads;
  for (uint64_t s = 0; s < 6; ++s) payloads.push_back(PutChain(store.get(), s, 2));
  uint64_t served = 0, missed = 0;
  for (uint64_t s = 0; s < 6; ++s) {
    for (uint32_t i = 0; i < 2; ++i) {
      auto ref = store->Get("ns", KeyOf(s, i));
      if (ref.ok()) {
        ++served;
        EXPECT_EQ(RefBytes(*ref), payloads[s][i]) << s << "/" << i;
        EXPECT_EQ(ref->tier(), Tier::kHot);
      } else {
        ++missed;
        EXPECT_TRUE(absl::IsNotFound(ref.status())) << ref.status();
      }
    }
  }
  EXPECT_GT(served, 0u);
  EXPECT_GT(missed, 0u);  // 12 blocks never fit in 4 slots, and cold took none
  EXPECT_GT(cold_->failed_writes(), 0);
  EXPECT_EQ(cold_->num_blocks(), 0u);
  EXPECT_EQ(NsStats(*store).cold.blocks, 0u);
  // Flush reports that the hot blocks could not be made durable.
  EXPECT_TRUE(absl::IsUnavailable(store->Flush("ns")));
  cold_->FailWrites(absl::OkStatus());
  EXPECT_OK(store->Flush("ns"));
  EXPECT_EQ(cold_->num_blocks(), NsStats(*store).hot.blocks);
}

TEST_F(TieredStoreFaultTest, CorruptColdReadIsACountedMissAndTheBlockIsDeleted) {
  auto store = OpenFake(/*hot_blocks=*/8, /*write_through=*/true);
  auto payloads = PutChain(store.get(), 4, 2);
  std::vector<std::string> keys = {KeyOf(4, 1)};
  ASSERT_EQ(*store->Evict("ns", keys, /*drop=*/false), 1u);  // cold only now
  ASSERT_EQ(TierOf(store.get(), KeyOf(4, 1)), Tier::kCold);
  ASSERT_TRUE(cold_->CorruptValue(0, KeyOf(4, 1)));

  auto bad = store->Get("ns", KeyOf(4, 1));
  EXPECT_TRUE(absl::IsNotFound(bad.status())) << bad.status();
  EXPECT_EQ(NsStats(*store).checksum_failures, 1u);
  EXPECT_EQ(NsStats(*store).get_misses, 1u);
  EXPECT_FALSE(cold_->Contains(0, KeyOf(4, 1)));
  EXPECT_EQ(TierOf(store.get(), KeyOf(4, 1)), Tier::kNone);
  // Asked again it is an ordinary miss, not a second failure.
  EXPECT_TRUE(absl::IsNotFound(store->Get("ns", KeyOf(4, 1)).status()));
  EXPECT_EQ(NsStats(*store).checksum_failures, 1u);
  // The parent is untouched.
  auto ref = store->Get("ns", KeyOf(4, 0));
  ASSERT_OK(ref);
  EXPECT_EQ(RefBytes(*ref), payloads[0]);
}

TEST_F(TieredStoreFaultTest, SlowColdReadDoesNotBlockHotGetsOfOtherBlocks) {
  auto store = OpenFake(/*hot_blocks=*/8, /*write_through=*/true);
  auto cold_payloads = PutChain(store.get(), 5, 1);
  auto hot_payloads = PutChain(store.get(), 6, 1);
  std::vector<std::string> keys = {KeyOf(5, 0)};
  ASSERT_EQ(*store->Evict("ns", keys, /*drop=*/false), 1u);

  cold_->BlockReads();
  absl::StatusOr<BlockRef> slow = absl::UnknownError("not run");
  std::thread reader([&] { slow = store->Get("ns", KeyOf(5, 0)); });
  cold_->WaitForBlockedReads(1);
  // While the cold read hangs: hot Gets, Lookups and Puts of other blocks go through.
  auto hot = store->Get("ns", KeyOf(6, 0));
  ASSERT_OK(hot);
  EXPECT_EQ(RefBytes(*hot), hot_payloads[0]);
  EXPECT_EQ(TierOf(store.get(), KeyOf(6, 0)), Tier::kHot);
  auto more = PutChain(store.get(), 7, 1);
  auto fresh = store->Get("ns", KeyOf(7, 0));
  ASSERT_OK(fresh);
  EXPECT_EQ(RefBytes(*fresh), more[0]);
  cold_->ReleaseReads();
  reader.join();
  ASSERT_OK(slow);
  EXPECT_EQ(RefBytes(*slow), cold_payloads[0]);
  EXPECT_EQ(slow->tier(), Tier::kCold);
  EXPECT_EQ(TierOf(store.get(), KeyOf(5, 0)), Tier::kHot);  // promoted
}

TEST_F(TieredStoreFaultTest, BlockDeletedDuringASlowReadIsNotResurrected) {
  auto store = OpenFake(/*hot_blocks=*/8, /*write_through=*/true);
  PutChain(store.get(), 8, 1);
  std::vector<std::string> keys = {KeyOf(8, 0)};
  ASSERT_EQ(*store->Evict("ns", keys, /*drop=*/false), 1u);
  cold_->BlockReads();
  absl::StatusOr<BlockRef> slow = absl::UnknownError("not run");
  std::thread reader([&] { slow = store->Get("ns", KeyOf(8, 0)); });
  cold_->WaitForBlockedReads(1);
  ASSERT_EQ(*store->Delete("ns", keys), 1u);
  cold_->ReleaseReads();
  reader.join();
  EXPECT_TRUE(absl::IsNotFound(slow.status())) << slow.status();
  EXPECT_EQ(TierOf(store.get(), KeyOf(8, 0)), Tier::kNone);
  EXPECT_EQ(store->Stats().hot_used_bytes, 0u);
}

TEST_F(TieredStoreFaultTest, TimedSlowReadFinishesOnItsOwn) {
  auto store = OpenFake(/*hot_blocks=*/8, /*write_through=*/true);
  auto payloads = PutChain(store.get(), 9, 1);
  std::vector<std::string> keys = {KeyOf(9, 0)};
  ASSERT_EQ(*store->Evict("ns", keys, /*drop=*/false), 1u);
  cold_->BlockReads(absl::Milliseconds(1));  // never released: times out
  auto ref = store->Get("ns", KeyOf(9, 0));
  ASSERT_OK(ref);
  EXPECT_EQ(RefBytes(*ref), payloads[0]);
}

}  // namespace
}  // namespace kvtier::storage
