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

TEST(AdaptivePolicyTest, OrderSurvivesTheTickRebase) {
  // Ticks are kept relative in 30 bits; crossing that range rebases without reordering.
  AdaptivePolicy p;
  const uint64_t start = (uint64_t{1} << 30) - 3;
  for (BlockId id = 0; id < 6; ++id) {
    p.OnInsert(id, At(start + id));
    p.OnEligible(id, true);
  }
  p.OnAccess(0, At(start + 100));  // 0 is now the most recent
  for (BlockId want : {1u, 2u, 3u, 4u, 5u, 0u}) {
    ASSERT_EQ(p.PickVictim(), want);
    p.OnRemove(want);
  }
  EXPECT_EQ(p.PickVictim(), kInvalidBlock);
}

TEST(AdaptivePolicyTest, MemoryIsBoundedByTheHotSize) {
  // Ghost state is bounded by one cache size of victims, not by the ids the store hands
  // out, so a long run with ever new ids stays within 64 bytes per hot block.
  AdaptivePolicy p;
  uint64_t tick = 0;
  constexpr int kHot = 10000;
  Fill(&p, &tick, kHot, 0);
  BlockId next = 100000;
  size_t after_warmup = 0;
  for (int round = 0; round < 200000; ++round) {
    const BlockId victim = p.PickVictim();
    ASSERT_NE(victim, kInvalidBlock);
    p.OnRemove(victim);
    // Every third victim comes back (as a promotion); the others are replaced by new ids.
    const BlockId id = round % 3 == 0 ? victim : next++;
    p.OnInsert(id, At(++tick, round % 3 == 0 ? 1 : 0));
    p.OnEligible(id, true);
    if (round == 50000) after_warmup = p.MemoryBytes();
  }
  EXPECT_LE(p.MemoryBytes(), after_warmup + after_warmup / 4);
  EXPECT_LE(p.MemoryBytes(), 64u * kHot) << p.MemoryBytes() / kHot << " bytes per hot block";
}

}  // namespace
}  // namespace kvtier::storage
