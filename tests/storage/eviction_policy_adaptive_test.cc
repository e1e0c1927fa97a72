// Tests for the adaptive eviction policy (storage/eviction_policy_adaptive.h); its trace
// results are checked in tests/tools/replay_test.cc and agree with the real store in
// tests/tools/store_model_test.cc.
#include "storage/eviction_policy_adaptive.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

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

TEST(AdaptivePolicyTest, OnlyEligibleBlocksInRecencyOrderAtFirst) {
  // Before the shadows disagree the live cache follows prefix_lru.
  AdaptivePolicy p;
  EXPECT_EQ(p.candidate(), 0);
  p.OnInsert(1, At(9, /*hits=*/1));
  p.OnInsert(2, At(10));
  EXPECT_EQ(p.PickVictim(), kInvalidBlock);  // nothing eligible yet
  p.OnEligible(2, true);
  EXPECT_EQ(p.PickVictim(), 2u);
  p.OnEligible(1, true);
  EXPECT_EQ(p.PickVictim(), 1u);  // the older, reused or not
  p.OnEligible(1, false);  // pinned, or gained a hot child
  EXPECT_EQ(p.PickVictim(), 2u);
  p.OnEligible(1, true);
  p.OnAccess(1, At(11, 2));  // now the most recent: 2 goes first
  EXPECT_EQ(p.PickVictim(), 2u);
  p.OnScore(2, 100.0f, At(12, 1));  // worker scores do not move a block
  EXPECT_EQ(p.PickVictim(), 2u);
  p.OnRemove(2);
  EXPECT_EQ(p.PickVictim(), 1u);
  p.OnRemove(1);
  EXPECT_EQ(p.PickVictim(), kInvalidBlock);
  EXPECT_GT(p.MemoryBytes(), 0u);
}

TEST(AdaptivePolicyTest, ClassesAreLog2BucketsOfHits) {
  EXPECT_EQ(AdaptiveClassOf(0), 0);
  EXPECT_EQ(AdaptiveClassOf(1), 1);
  EXPECT_EQ(AdaptiveClassOf(3), 2);
  EXPECT_EQ(AdaptiveClassOf(4), 3);
  EXPECT_EQ(AdaptiveClassOf(1u << 20), kAdaptiveClasses - 1);
}

// Shadow candidates by index into kAdaptiveCandidates.
constexpr int kPrefixLru = 0, kReuse = 1, kLfu = 2;

TEST(AdaptiveShadowTest, EvictsByTheCandidatesRule) {
  // Capacity 2: a reused key (class 1) at tick 1, then fresh keys at ticks 2 and 3.
  for (int cand : {kPrefixLru, kReuse}) {
    AdaptiveShadow s(kAdaptiveCandidates[cand]);
    EXPECT_FALSE(s.Reference(/*key=*/7, /*cls=*/1, /*tick=*/1, /*capacity=*/2, true));
    EXPECT_FALSE(s.Reference(8, 0, 2, 2, true));
    EXPECT_FALSE(s.Reference(9, 0, 3, 2, true));  // evicts 7 (lru) or 8 (head start)
    EXPECT_EQ(s.size(), 2u);
    EXPECT_EQ(s.Reference(7, 1, 4, 2, true), cand == kReuse) << cand;
  }
}

TEST(AdaptiveShadowTest, DeepestBlockOfARequestGoesFirst) {
  // One request: keys 1, 2, 3 root first. Like leaves in the live cache, 3 goes first.
  AdaptiveShadow s(kAdaptiveCandidates[kPrefixLru]);
  s.Reference(1, 0, 1, 3, /*new_request=*/true);
  s.Reference(2, 0, 1, 3, false);
  s.Reference(3, 0, 1, 3, false);
  s.Reference(4, 0, 2, 3, true);  // next request: evicts 3
  EXPECT_TRUE(s.Reference(1, 0, 3, 3, true));
  EXPECT_TRUE(s.Reference(2, 0, 3, 3, false));
  EXPECT_FALSE(s.Reference(3, 0, 3, 3, false));
}

TEST(AdaptiveShadowTest, ShrinksWithTheCapacityAndClears) {
  AdaptiveShadow s(kAdaptiveCandidates[kLfu]);
  for (uint32_t k = 0; k < 10; ++k) s.Reference(k, 0, k + 1, 10, true);
  EXPECT_EQ(s.size(), 10u);
  EXPECT_TRUE(s.Reference(9, 1, 11, 4, true));  // a hit, then down to 4 entries
  EXPECT_EQ(s.size(), 4u);
  EXPECT_TRUE(s.Reference(9, 1, 12, 4, true));  // lfu: the reused key stayed
  s.Clear();
  EXPECT_EQ(s.size(), 0u);
  EXPECT_FALSE(s.Reference(9, 1, 13, 4, true));
}

// A reference as the store reports it, to a single-block request (block_index 0). The
// hash makes `key` sampled when it is a multiple of kAdaptiveSampleRate (one key in 16, as
// a real hash does) and the shadows' key `key`.
BlockInfo Ref(uint64_t tick, uint64_t key, uint32_t hits) {
  BlockInfo info = At(tick, hits);
  info.key_hash = key << 32 | key % kAdaptiveSampleRate;
  return info;
}

// Runs a cache of `hot` blocks (single-block requests, every block a leaf) over `refs`,
// the store's way: victim out, reference in. Returns the candidate followed at the end.
int RunCache(const std::vector<uint64_t>& refs, int hot) {
  AdaptivePolicy p;
  std::vector<uint64_t> key_of;  // by id
  absl::flat_hash_map<uint64_t, BlockId> id_of;
  absl::flat_hash_map<uint64_t, uint32_t> hits;
  uint64_t tick = 0;
  for (uint64_t key : refs) {
    ++tick;
    auto it = id_of.find(key);
    if (it != id_of.end()) {
      p.OnAccess(it->second, Ref(tick, key, ++hits[key]));
      continue;
    }
    BlockId id;
    if (static_cast<int>(id_of.size()) < hot) {
      id = static_cast<BlockId>(key_of.size());
      key_of.push_back(key);
    } else {
      id = p.PickVictim();
      EXPECT_NE(id, kInvalidBlock);
      p.OnRemove(id);
      id_of.erase(key_of[id]);
      key_of[id] = key;
    }
    id_of[key] = id;
    // The store remembers every key (a big cold tier): a returning key is known.
    const uint32_t h = hits.contains(key) ? ++hits[key] : (hits[key] = 0);
    p.OnInsert(id, Ref(tick, key, h));
    p.OnEligible(id, true);
  }
  EXPECT_GT(p.MemoryBytes(), 0u);
  return p.candidate();
}

TEST(AdaptivePolicyTest, FollowsLfuWhenPopularKeysAreHiddenByAScan) {
  // 640 popular keys round robin, each followed by a scan key read twice (so it counts as
  // reused too): 1,280 keys between two reads of a popular one do not fit 1,024 blocks.
  // Recency and reuse lose every popular key; frequency keeps them all.
  std::vector<uint64_t> refs;
  for (uint64_t i = 0; i < 150000; ++i) {
    refs.push_back(i % 3 == 0 ? (i / 3) % 640 : 1000000 + i / 3);
  }
  EXPECT_EQ(RunCache(refs, 1024), kLfu);
}

TEST(AdaptivePolicyTest, FollowsPrefixLruWhenRecencyWins) {
  // A working set that moves: each phase 640 new keys, six rounds each, in 1,024 blocks.
  // Frequency and the reuse head start keep the last phase's keys; recency drops them.
  std::vector<uint64_t> refs;
  for (uint64_t phase = 0; phase < 40; ++phase) {
    for (uint64_t i = 0; i < 640 * 6; ++i) refs.push_back(phase * 640 + i % 640);
  }
  EXPECT_EQ(RunCache(refs, 1024), kPrefixLru);
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

TEST(AdaptivePolicyTest, MemoryIsBoundedByTheHotSizeAndTheIds) {
  // Shadow state and heaps are bounded by the hot size (resident / kAdaptiveSampleRate
  // entries per candidate), not by the keys seen; the packed states take 4 bytes per id
  // (BlockIds are dense). A long run with ever new keys and ids stays within 64 bytes per
  // hot block plus 4 per id.
  AdaptivePolicy p;
  constexpr int kHot = 10000;
  std::vector<uint64_t> key_of;
  uint64_t tick = 0;
  for (BlockId id = 0; id < kHot; ++id) {
    key_of.push_back(id);
    p.OnInsert(id, Ref(++tick, id, 0));
    p.OnEligible(id, true);
  }
  BlockId next_id = 100000;
  uint64_t next_key = kHot;
  key_of.resize(next_id + 200000);
  for (int round = 0; round < 200000; ++round) {
    const BlockId victim = p.PickVictim();
    ASSERT_NE(victim, kInvalidBlock);
    p.OnRemove(victim);
    // Every third victim comes back (as a promotion); the others are replaced by new keys
    // under new ids.
    const bool back = round % 3 == 0;
    const BlockId id = back ? victim : next_id++;
    if (!back) key_of[id] = next_key++;
    p.OnInsert(id, Ref(++tick, key_of[id], back ? 1 : 0));
    p.OnEligible(id, true);
  }
  // States in chunks of 4,096 ids, one pointer (8 bytes, vector slack 2x) per chunk.
  const size_t chunks = next_id / 4096 + 1;
  const size_t per_ids = chunks * (4096 * 4 + 16);
  EXPECT_LE(p.MemoryBytes(), 64u * kHot + per_ids)
      << (p.MemoryBytes() - per_ids) / kHot << " bytes per hot block beyond the ids";
}

}  // namespace
}  // namespace kvtier::storage
