// The prefix metadata rules TieredStore::Put enforces (tiered_store.h): block 0 and only
// block 0 has no parent; a child of a parent this node holds has the parent's index + 1;
// a stored key never changes its parent; a parent held elsewhere is accepted. A rejected
// block changes nothing stored.
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/tiered_store.h"
#include "tests/storage/store_test_util.h"
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
using ::testing::HasSubstr;

class PrefixRulesTest : public testing::StoreTest {
 protected:
  void SetUp() override {
    store_ = Open(Options(/*hot_blocks=*/4));
    ASSERT_OK(store_->RegisterNamespace(SmallNamespace("ns", /*write_through=*/true)));
    chain_ = PutChain(store_.get(), 1, 3);  // k1-0 <- k1-1 <- k1-2
    PutChain(store_.get(), 2, 2);           // k2-0 <- k2-1 (hot tier full: some demoted)
    before_ = Snapshot();
  }

  absl::Status PutBlock(const std::string& key, const std::string& parent, uint32_t index) {
    const std::string payload = MakePayload(SmallLayout(), index, 99);
    BlockPut put{key, parent, index, payload};
    return store_->Put("ns", {&put, 1});
  }

  // Everything a rejected Put must leave as it was: each key's tier and bytes, counters.
  struct State {
    std::map<std::string, Tier> tiers;
    std::map<std::string, std::string> bytes;
    uint64_t puts, hot_blocks, cold_blocks, demotions, hot_used;
    bool operator==(const State&) const = default;
  };
  State Snapshot() {
    State s;
    for (uint64_t seq : {1, 2, 3}) {
      for (uint32_t i = 0; i < 3; ++i) s.tiers[KeyOf(seq, i)] = TierOf(store_.get(), KeyOf(seq, i));
    }
    s.tiers["elsewhere-9"] = TierOf(store_.get(), "elsewhere-9");
    const NamespaceStats st = NsStats(*store_);
    s.puts = st.puts;
    s.hot_blocks = st.hot.blocks;
    s.cold_blocks = st.cold.blocks;
    s.demotions = st.demotions;
    s.hot_used = store_->Stats().hot_used_bytes;
    return s;
  }
  void ExpectUnchanged() {
    EXPECT_TRUE(Snapshot() == before_);
    for (uint32_t i = 0; i < 3; ++i) {
      auto ref = store_->Get("ns", KeyOf(1, i));
      ASSERT_OK(ref);
      EXPECT_EQ(RefBytes(*ref), chain_[i]);
    }
  }

  std::unique_ptr<TieredStore> store_;
  std::vector<std::string> chain_;
  State before_;
};

TEST_F(PrefixRulesTest, OnlyBlockZeroHasNoParent) {
  absl::Status st = PutBlock(KeyOf(3, 0), "", 1);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("blocks[0].block_index"));
  st = PutBlock(KeyOf(3, 1), "elsewhere-9", 0);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("blocks[0].block_index"));
  ExpectUnchanged();
}

TEST_F(PrefixRulesTest, ChildOfAHeldParentHasTheParentsIndexPlusOne) {
  // k1-2 holds index 2, so its child must be 3.
  absl::Status st = PutBlock(KeyOf(3, 0), KeyOf(1, 2), 5);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("blocks[0].block_index"));
  ExpectUnchanged();
  EXPECT_OK(PutBlock(KeyOf(3, 0), KeyOf(1, 2), 3));
}

TEST_F(PrefixRulesTest, TheFailingBlockIsNamedByItsPositionInTheCall) {
  const std::string p0 = MakePayload(SmallLayout(), 0, 7);
  const std::string p1 = MakePayload(SmallLayout(), 2, 7);
  const std::string k0 = KeyOf(3, 0), k1 = KeyOf(3, 1);
  std::vector<BlockPut> puts = {{k0, "", 0, p0}, {k1, k0, 2, p1}};  // 2 should be 1
  absl::Status st = store_->Put("ns", puts);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("blocks[1].block_index"));
  EXPECT_NE(TierOf(store_.get(), k0), Tier::kNone);  // blocks before it stay stored
  EXPECT_EQ(TierOf(store_.get(), k1), Tier::kNone);
}

TEST_F(PrefixRulesTest, AStoredKeyNeverChangesItsParent) {
  // k1-1's parent is k1-0; k2-0 holds index 0, so index 1 alone would be fine.
  absl::Status st = PutBlock(KeyOf(1, 1), KeyOf(2, 0), 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("blocks[0].parent_key"));
  // Nor may it become a root.
  st = PutBlock(KeyOf(1, 1), "", 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("blocks[0].parent_key"));
  ExpectUnchanged();
  // The link is intact: dropping k1-0 drops its descendants, k1-1 among them.
  std::vector<std::string> root = {KeyOf(1, 0)};
  EXPECT_EQ(*store_->Evict("ns", root, /*drop=*/true), 3u);
  EXPECT_EQ(TierOf(store_.get(), KeyOf(1, 1)), Tier::kNone);
  EXPECT_NE(TierOf(store_.get(), KeyOf(2, 0)), Tier::kNone);
}

TEST_F(PrefixRulesTest, ReputUnderTheSameParentIsAccepted) {
  const std::string key = KeyOf(1, 1), parent = KeyOf(1, 0);
  BlockPut put{key, parent, 1, chain_[1]};
  EXPECT_OK(store_->Put("ns", {&put, 1}));
  auto ref = store_->Get("ns", KeyOf(1, 1));
  ASSERT_OK(ref);
  EXPECT_EQ(RefBytes(*ref), chain_[1]);
}

TEST_F(PrefixRulesTest, AParentHeldElsewhereIsAccepted) {
  // In a cluster the parent may live on another node: any index > 0 is taken as is.
  ASSERT_OK(PutBlock(KeyOf(3, 7), "elsewhere-9", 7));
  auto ref = store_->Get("ns", KeyOf(3, 7));
  ASSERT_OK(ref);
  EXPECT_EQ(ref->block_index(), 7u);
  EXPECT_EQ(TierOf(store_.get(), "elsewhere-9"), Tier::kNone);
}

TEST_F(PrefixRulesTest, StandaloneEntriesAreExempt) {
  const std::string payload = MakePayload(SmallLayout(), 0, 5);
  const std::string key = KeyOf(3, 2);
  BlockPut put{key, "", 4, payload};
  put.standalone = true;
  EXPECT_OK(store_->Put("ns", {&put, 1}));
}

}  // namespace
}  // namespace kvtier::storage
