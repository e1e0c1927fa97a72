// TieredStore::DropNamespace: every block leaves every tier and the spec goes, with one
// AllBlocksCleared (or one BlockRemoved per block when another namespace shares the
// topic); leases refuse it unless forced. Over a FakeColdTier, so the test sees the disk.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "events/block_event.h"
#include "gtest/gtest.h"
#include "storage/tiered_store.h"
#include "tests/events/recording_sink.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/fake_cold_tier.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::storage {
namespace {

using ::kvtier::events::BlockEvent;
using ::kvtier::events::EventKind;
using ::kvtier::events::testing::RecordingEventSink;
using ::kvtier::storage::testing::KeyOf;
using ::kvtier::storage::testing::MakePayload;
using ::kvtier::storage::testing::SmallLayout;
using ::kvtier::storage::testing::SmallNamespace;
using ::kvtier::storage::testing::TierOf;
using ::kvtier::testing::FakeColdTier;

class TieredStoreDropTest : public testing::StoreTest {
 protected:
  std::unique_ptr<TieredStore> OpenOver(std::shared_ptr<FakeColdTier::Disk> disk) {
    StoreOptions o = Options(/*hot_blocks=*/4, /*cold_blocks=*/1000);
    o.events = &sink_;
    auto cold = std::make_unique<FakeColdTier>(std::move(disk));
    cold_ = cold.get();
    return Open(o, std::move(cold));
  }
  // Puts a chain of n blocks of sequence `seq` into `ns`; returns its keys.
  std::vector<std::string> PutChain(TieredStore* store, const std::string& ns, uint64_t seq,
                                    uint32_t n) {
    std::vector<std::string> keys;
    for (uint32_t i = 0; i < n; ++i) {
      keys.push_back(KeyOf(seq, i));
      const std::string payload = MakePayload(SmallLayout(), i, seq);
      BlockPut put{keys[i], i == 0 ? std::string_view() : std::string_view(keys[i - 1]), i,
                   payload};
      EXPECT_OK(store->Put(ns, {&put, 1}));
    }
    return keys;
  }

  RecordingEventSink sink_;
  FakeColdTier* cold_ = nullptr;  // owned by the store
};

TEST_F(TieredStoreDropTest, RemovesEveryTierAndTheSpecWithRemovalListsThenAllBlocksCleared) {
  auto disk = std::make_shared<FakeColdTier::Disk>();
  auto store = OpenOver(disk);
  ASSERT_OK(store->RegisterNamespace(SmallNamespace("ns")));
  // 10 blocks into a 4-block hot tier: some hot, the rest demoted to cold.
  const std::vector<std::string> keys = PutChain(store.get(), "ns", 1, 10);
  ASSERT_OK(store->Flush("ns"));
  sink_.Take();

  absl::StatusOr<uint64_t> dropped = store->DropNamespace("ns", /*force=*/false);
  ASSERT_OK(dropped);
  EXPECT_EQ(*dropped, 10u);
  std::vector<BlockEvent> events = sink_.Take();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back().kind, EventKind::kAllCleared);
  EXPECT_EQ(events.back().ns, "ns");
  EXPECT_EQ(events.back().model_id, "test-model");
  // First the blocks as BlockRemoved per tier (one event per tier here), for consumers
  // that ignore AllBlocksCleared: every block at least once.
  std::set<std::string> removed;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i].kind, EventKind::kRemoved);
    EXPECT_EQ(events[i].ns, "ns");
    EXPECT_FALSE(events[i].keys.empty());
    removed.insert(events[i].keys.begin(), events[i].keys.end());
  }
  EXPECT_LE(events.size(), 3u);
  EXPECT_EQ(removed, std::set<std::string>(keys.begin(), keys.end()));
  for (const std::string& k : keys) EXPECT_FALSE(cold_->Contains(0, k)) << k;

  EXPECT_TRUE(absl::IsNotFound(store->GetNamespace("ns").status()));
  EXPECT_TRUE(absl::IsNotFound(store->Lookup("ns", keys).status()));
  EXPECT_TRUE(absl::IsNotFound(store->DropNamespace("ns", false).status()));
  EXPECT_TRUE(store->ListNamespaces().empty());
  const StoreStats stats = store->Stats();
  EXPECT_TRUE(stats.namespaces.empty());
  EXPECT_EQ(stats.hot_used_bytes, 0u);
  EXPECT_EQ(stats.cold_used_bytes, 0u);

  // The name comes back empty, with another spec.
  NamespaceOptions other = SmallNamespace("ns", /*write_through=*/true);
  ASSERT_OK(store->RegisterNamespace(other));
  EXPECT_EQ(TierOf(store.get(), keys[0]), Tier::kNone);
  PutChain(store.get(), "ns", 2, 2);

  // A restart knows only the new namespace and its blocks.
  store.reset();
  sink_.Take();
  store = OpenOver(disk);
  ASSERT_EQ(store->ListNamespaces().size(), 1u);
  EXPECT_TRUE(store->ListNamespaces()[0].write_through);
  EXPECT_EQ(TierOf(store.get(), keys[0]), Tier::kNone);
  EXPECT_NE(TierOf(store.get(), KeyOf(2, 1)), Tier::kNone);
}

TEST_F(TieredStoreDropTest, LeasesRefuseUnlessForced) {
  auto store = OpenOver(std::make_shared<FakeColdTier::Disk>());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace("ns")));
  const std::vector<std::string> keys = PutChain(store.get(), "ns", 1, 3);
  absl::StatusOr<LookupResult> leased = store->Lookup("ns", keys, LeaseOptions{60000});
  ASSERT_OK(leased);
  ASSERT_EQ(leased->leased_blocks, 3u);

  absl::StatusOr<uint64_t> refused = store->DropNamespace("ns", /*force=*/false);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_EQ(TierOf(store.get(), keys[0]), Tier::kHot);  // nothing happened

  // An expired lease does not refuse.
  clock_.AdvanceMillis(60001);
  ASSERT_OK(store->Lookup("ns", keys, LeaseOptions{60000}));
  absl::StatusOr<uint64_t> forced = store->DropNamespace("ns", /*force=*/true);
  ASSERT_OK(forced);
  EXPECT_EQ(*forced, 3u);
  EXPECT_EQ(store->Stats().leases.active, 0u);
  EXPECT_EQ(store->Stats().leases.leased_bytes, 0u);
}

TEST_F(TieredStoreDropTest, SharedTopicGetsOneRemovalPerBlock) {
  auto store = OpenOver(std::make_shared<FakeColdTier::Disk>());
  // Both namespaces publish under kv@<node>@test-model.
  ASSERT_OK(store->RegisterNamespace(SmallNamespace("a")));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace("b")));
  PutChain(store.get(), "a", 1, 2);
  const std::vector<std::string> kept = PutChain(store.get(), "b", 2, 2);
  sink_.Take();
  ASSERT_OK(store->DropNamespace("a", false));
  std::vector<BlockEvent> events = sink_.Take();
  ASSERT_EQ(events.size(), 2u);  // both hot only
  for (const BlockEvent& e : events) {
    EXPECT_EQ(e.kind, EventKind::kRemoved);
    EXPECT_EQ(e.ns, "a");
  }
  EXPECT_EQ(TierOf(store.get(), kept[1], "b"), Tier::kHot);
}

}  // namespace
}  // namespace kvtier::storage
