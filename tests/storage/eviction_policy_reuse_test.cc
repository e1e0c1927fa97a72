// Tests for the reuse_lru eviction policy (storage/eviction_policy_reuse.h); the trace
// simulations that motivate it are in tests/tools/replay_test.cc.
#include "storage/eviction_policy_reuse.h"

#include "gtest/gtest.h"
#include "storage/eviction_policy.h"

namespace kvtier::storage {
namespace {

TEST(ReuseRankTest, ReusedBlocksOutrankFreshOnesForSeveralLifetimes) {
  EXPECT_LT(ReuseRank(1000, 0, 100), ReuseRank(900, 1, 100));
  EXPECT_GT(ReuseRank(1000, 0, 100), ReuseRank(500, 1, 100));  // aged out (> 4 x 100)
  EXPECT_EQ(ReuseRank(7, 0, 100), 7.0);
}

TEST(ReuseLruPolicyTest, EvictsFreshLeavesBeforeReusedOnes) {
  ReuseLruPolicy policy;
  EXPECT_STREQ(policy.name(), "reuse_lru");
  EXPECT_TRUE(policy.structure_aware());
  BlockInfo fresh;
  fresh.tick = 10;
  BlockInfo reused;  // older, but referenced before: its head start (4 x resident) wins
  reused.tick = 9;
  reused.hits = 2;
  policy.OnInsert(1, reused);
  policy.OnInsert(2, fresh);
  EXPECT_EQ(policy.PickVictim(), kInvalidBlock);  // nothing eligible yet
  policy.OnEligible(1, true);
  policy.OnEligible(2, true);
  EXPECT_EQ(policy.PickVictim(), 2u);  // newer but never reused
  policy.OnRemove(2);
  EXPECT_EQ(policy.PickVictim(), 1u);
  policy.OnEligible(1, false);
  EXPECT_EQ(policy.PickVictim(), kInvalidBlock);
}

}  // namespace
}  // namespace kvtier::storage
