// Tests for the adaptive eviction policy (storage/eviction_policy_adaptive.h); its trace
// results are checked in tests/tools/replay_test.cc and agree with the real store in
// tests/tools/store_model_test.cc.
#include "storage/eviction_policy_adaptive.h"

#include <memory>

#include "gtest/gtest.h"
#include "storage/eviction_policy.h"
#include "storage/tiered_store.h"

namespace kvtier::storage {
namespace {

BlockInfo At(uint64_t tick, uint32_t hits = 0) {
  BlockInfo info;
  info.tick = tick;
  info.hits = hits;
  return info;
}

TEST(AdaptivePolicyTest, IsTheDefaultAndParses) {
  EXPECT_EQ(StoreOptions{}.policy, EvictionPolicyKind::kAdaptive);
  EXPECT_EQ(*ParseEvictionPolicy("adaptive"), EvictionPolicyKind::kAdaptive);
  std::unique_ptr<EvictionPolicy> p = NewEvictionPolicy(EvictionPolicyKind::kAdaptive);
  EXPECT_STREQ(p->name(), "adaptive");
  EXPECT_TRUE(p->structure_aware());
}

TEST(AdaptivePolicyTest, OnlyEligibleBlocksAndReusedOnesGetAHeadStart) {
  AdaptivePolicy p;
  p.OnInsert(1, At(9, /*hits=*/1));  // older, but referenced before
  p.OnInsert(2, At(10));
  EXPECT_EQ(p.PickVictim(), kInvalidBlock);  // nothing eligible yet
  p.OnEligible(1, true);
  EXPECT_EQ(p.PickVictim(), 1u);
  p.OnEligible(2, true);
  // Head start: 1 lifetime x 2 resident blocks = 2 ticks, so 9 + 2 > 10.
  EXPECT_EQ(p.PickVictim(), 2u);
  p.OnEligible(2, false);  // pinned, or gained a hot child
  EXPECT_EQ(p.PickVictim(), 1u);
  p.OnEligible(2, true);
  p.OnAccess(2, At(11, 1));  // now reused and the most recent: 1 goes first
  EXPECT_EQ(p.PickVictim(), 1u);
  p.OnScore(1, 100.0f, At(12, 1));  // worker scores do not move a block
  EXPECT_EQ(p.PickVictim(), 1u);
  p.OnRemove(1);
  EXPECT_EQ(p.PickVictim(), 2u);
  p.OnRemove(2);
  EXPECT_EQ(p.PickVictim(), kInvalidBlock);
  EXPECT_GT(p.MemoryBytes(), 0u);
}

// Fills the policy with `n` eligible blocks, fresh from id 0 and reused from id 1000.
void Fill(AdaptivePolicy* p, uint64_t* tick, int fresh, int reused) {
  for (int i = 0; i < fresh; ++i) {
    p->OnInsert(i, At(++*tick));
    p->OnEligible(i, true);
  }
  for (int i = 0; i < reused; ++i) {
    p->OnInsert(1000 + i, At(++*tick, 1));
    p->OnEligible(1000 + i, true);
  }
}

TEST(AdaptivePolicyTest, FreshVictimsThatComeBackShortenTheHeadStart) {
  AdaptivePolicy p;
  uint64_t tick = 0;
  Fill(&p, &tick, 50, 50);
  const double before = p.reuse_boost();
  for (int round = 0; round < 200; ++round) {
    const BlockId victim = p.PickVictim();
    ASSERT_NE(victim, kInvalidBlock);
    p.OnRemove(victim);
    if (victim >= 1000) continue;  // an aged-out reused block: gone for good
    // A fresh victim comes back at once, as a known key (promotion from the cold tier);
    // then it is stored again as a fresh key so there is always a fresh victim.
    p.OnInsert(victim, At(++tick, 1));
    p.OnRemove(victim);
    p.OnInsert(victim, At(++tick, 0));
    p.OnEligible(victim, true);
  }
  EXPECT_LT(p.reuse_boost(), before);
}

TEST(AdaptivePolicyTest, ReusedVictimsThatComeBackLengthenIt) {
  AdaptivePolicy p;
  uint64_t tick = 0;
  Fill(&p, &tick, 0, 100);
  const double before = p.reuse_boost();
  for (int round = 0; round < 200; ++round) {
    const BlockId victim = p.PickVictim();
    ASSERT_NE(victim, kInvalidBlock);
    p.OnRemove(victim);
    p.OnInsert(victim, At(++tick, 2));
    p.OnEligible(victim, true);
  }
  EXPECT_GT(p.reuse_boost(), before);
  EXPECT_LE(p.reuse_boost(), kAdaptiveMaxBoost);
}

TEST(AdaptivePolicyTest, GhostMemoryIsBoundedByTheIdsInUse) {
  // The store reuses the ids of keys it forgot; ghost state is dense over ids, so memory
  // stays bounded however long the run.
  AdaptivePolicy p;
  uint64_t tick = 0;
  Fill(&p, &tick, 100, 0);
  BlockId next = 0;
  size_t after_warmup = 0;
  for (int round = 0; round < 100000; ++round) {
    const BlockId victim = p.PickVictim();
    ASSERT_NE(victim, kInvalidBlock);
    p.OnRemove(victim);  // never comes back
    const BlockId id = 2000 + (next++ % 900);  // ids 2000..2899, reused
    p.OnInsert(id, At(++tick));
    p.OnEligible(id, true);
    if (round == 10000) after_warmup = p.MemoryBytes();
  }
  EXPECT_LE(p.MemoryBytes(), after_warmup);
  EXPECT_LT(p.MemoryBytes(), 64u * 1024);
}

}  // namespace
}  // namespace kvtier::storage
