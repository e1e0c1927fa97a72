#include "storage/eviction_policy.h"

#include <string>
#include <string_view>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::storage {
namespace {

BlockInfo At(uint64_t tick, uint32_t hits = 0, float attention = 0) {
  BlockInfo info;
  info.tick = tick;
  info.hits = hits;
  info.attention = attention;
  return info;
}

TEST(EvictionPolicyTest, LruPicksLeastRecentEligible) {
  auto p = NewEvictionPolicy(EvictionPolicyKind::kPrefixLru);
  EXPECT_TRUE(p->structure_aware());
  EXPECT_STREQ(p->name(), "prefix_lru");
  for (BlockId id = 0; id < 3; ++id) {
    p->OnInsert(id, At(10 + id));
    p->OnEligible(id, true);
  }
  EXPECT_EQ(p->PickVictim(), 0u);
  p->OnAccess(0, At(20));
  EXPECT_EQ(p->PickVictim(), 1u);
  p->OnEligible(1, false);  // e.g. a child became hot
  EXPECT_EQ(p->PickVictim(), 2u);
  p->OnRemove(2);
  EXPECT_EQ(p->PickVictim(), 0u);
  p->OnEligible(1, true);
  EXPECT_EQ(p->PickVictim(), 1u);
  p->OnRemove(1);
  p->OnRemove(0);
  EXPECT_EQ(p->PickVictim(), kInvalidBlock);
  EXPECT_FALSE(NewEvictionPolicy(EvictionPolicyKind::kLru)->structure_aware());
}

TEST(EvictionPolicyTest, LfuPrefersFewestHits) {
  auto p = NewEvictionPolicy(EvictionPolicyKind::kLfu);
  p->OnInsert(1, At(1));
  p->OnInsert(2, At(2));
  p->OnEligible(1, true);
  p->OnEligible(2, true);
  p->OnAccess(1, At(3, /*hits=*/5));
  EXPECT_EQ(p->PickVictim(), 2u);
  p->OnAccess(2, At(4, /*hits=*/9));
  EXPECT_EQ(p->PickVictim(), 1u);
}

TEST(EvictionPolicyTest, HeavyHitterKeepsHighAttentionAndDecays) {
  EvictionPolicyOptions options;
  options.heavy_hitter_half_life_ticks = 100;
  auto p = NewEvictionPolicy(EvictionPolicyKind::kHeavyHitter, options);
  p->OnInsert(1, At(0));
  p->OnInsert(2, At(0));
  p->OnEligible(1, true);
  p->OnEligible(2, true);
  p->OnScore(1, 50.0f, At(1));
  EXPECT_EQ(p->PickVictim(), 2u);  // block 1 drew the attention
  // Much later, block 2 is hit a few times: block 1's old mass has decayed away.
  for (uint64_t t = 2000; t < 2004; ++t) p->OnAccess(2, At(t));
  EXPECT_EQ(p->PickVictim(), 1u);
}

TEST(EvictionPolicyTest, StaleHeapItemsAreCompacted) {
  auto p = NewEvictionPolicy(EvictionPolicyKind::kPrefixLru);
  p->OnInsert(1, At(0));
  p->OnEligible(1, true);
  for (uint64_t t = 1; t < 100000; ++t) p->OnAccess(1, At(t));
  EXPECT_EQ(p->PickVictim(), 1u);
  EXPECT_LT(p->MemoryBytes(), 16u << 10);
}

TEST(EvictionPolicyNamesTest, RoundTripAndErrorListsEveryName) {
  ASSERT_EQ(EvictionPolicyNames().size(), 6u);
  for (auto kind : {EvictionPolicyKind::kLru, EvictionPolicyKind::kPrefixLru,
                    EvictionPolicyKind::kLfu, EvictionPolicyKind::kHeavyHitter,
                    EvictionPolicyKind::kReuseLru, EvictionPolicyKind::kAdaptive}) {
    auto parsed = ParseEvictionPolicy(EvictionPolicyName(kind));
    ASSERT_OK(parsed);
    EXPECT_EQ(*parsed, kind);
    EXPECT_EQ(EvictionPolicyNames()[static_cast<size_t>(kind)], EvictionPolicyName(kind));
    EXPECT_STREQ(NewEvictionPolicy(kind)->name(), EvictionPolicyName(kind));
  }
  absl::Status bad = ParseEvictionPolicy("mru").status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad));
  for (std::string_view name : EvictionPolicyNames()) {
    EXPECT_NE(std::string(bad.message()).find(std::string(name)), std::string::npos) << name;
  }
  EXPECT_NE(std::string(bad.message()).find("'mru'"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::storage
