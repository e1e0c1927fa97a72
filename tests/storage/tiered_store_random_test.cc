// Randomized operation sequences against every eviction policy, checking the store's
// invariants after every step.
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/hot_arena.h"
#include "storage/tiered_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::storage {
namespace {

using ::kvtier::storage::testing::MakePayload;
using ::kvtier::storage::testing::RefBytes;
using ::kvtier::storage::testing::SmallLayout;
using ::kvtier::storage::testing::SmallNamespace;

struct ModelBlock {
  std::string parent;  // empty for block 0
  uint32_t index;
  std::string payload;
};

class RandomOpsTest : public ::testing::TestWithParam<EvictionPolicyKind> {};

TEST_P(RandomOpsTest, InvariantsHoldAfterEveryStep) {
  kvtier::testing::TempDir dir;
  kvtier::testing::FakeClock clock;
  const kv::Layout layout = SmallLayout();
  StoreOptions o = testing::TestStoreOptions(dir.Sub("db"), /*hot_blocks=*/16,
                                             /*cold_blocks=*/40, &clock);
  o.policy = GetParam();
  o.hot_allocator = "malloc";
  std::unique_ptr<TieredStore> store = testing::OpenStore(o);
  ASSERT_NE(store, nullptr);
  NamespaceOptions ns = SmallNamespace();
  ns.sink_blocks = 1;
  ASSERT_OK(store->RegisterNamespace(ns));

  std::mt19937_64 rng(1234 + static_cast<int>(GetParam()));
  std::map<std::string, ModelBlock> model;  // every key ever put (and not deleted by us)
  std::vector<std::string> keys;
  uint64_t next_key = 0;
  uint64_t gets_ok = 0, gets_cold = 0;

  auto tier_of = [&](const std::string& key) {
    std::vector<std::string> k = {key};
    auto r = store->Lookup("ns", k);
    EXPECT_OK(r);
    return r.ok() ? r->tiers[0] : Tier::kNone;
  };

  // Hot set before the step, to see which blocks the policy demoted during it.
  std::map<std::string, Tier> before;
  auto snapshot = [&] {
    before.clear();
    for (const auto& [key, block] : model) before[key] = tier_of(key);
  };
  const bool structure_aware =
      GetParam() != EvictionPolicyKind::kLru;  // lru is the structure-blind baseline
  auto check_invariants = [&](int step) {
    if (structure_aware) {
      // A block demoted in this step had no hot child when it left (leaves go first);
      // children put in this step after it are new and may be hot.
      std::map<std::string, std::vector<std::string>> children;
      for (const auto& [key, block] : model) {
        if (!block.parent.empty()) children[block.parent].push_back(key);
      }
      for (const auto& [key, tier] : before) {
        if (tier != Tier::kHot || tier_of(key) != Tier::kCold) continue;
        for (const std::string& child : children[key]) {
          if (before.count(child) && before[child] == Tier::kHot && tier_of(child) == Tier::kHot) {
            ADD_FAILURE() << "step " << step << ": " << key << " demoted before its hot child "
                          << child;
          }
        }
      }
    }
    StoreStats stats = store->Stats();
    ASSERT_LE(stats.hot_used_bytes, stats.hot_capacity_bytes) << "step " << step;
    for (const auto& [key, block] : model) {
      if (tier_of(key) == Tier::kNone) continue;
      // Every ancestor of a resident block is resident (so the sink, index 0 < sink_blocks,
      // is too): no parent was evicted before its child.
      std::string p = block.parent;
      while (!p.empty()) {
        ASSERT_NE(tier_of(p), Tier::kNone)
            << "step " << step << ": ancestor of a resident block was evicted";
        p = model.at(p).parent;
      }
    }
  };

  for (int step = 0; step < 600; ++step) {
    snapshot();
    const int op = static_cast<int>(rng() % 100);
    if (op < 35 || keys.empty()) {
      // A new sequence branching off a random existing block (or a fresh root).
      std::string parent;
      uint32_t index = 0;
      if (!keys.empty() && rng() % 3 != 0) {
        // Extend a resident prefix (a worker only pushes what follows a cached prefix).
        const std::string& candidate = keys[rng() % keys.size()];
        if (tier_of(candidate) != Tier::kNone) {
          parent = candidate;
          index = model[parent].index + 1;
        }
      }
      const int len = 1 + static_cast<int>(rng() % 5);
      std::vector<std::string> payloads, ks;
      std::vector<BlockPut> puts;
      for (int i = 0; i < len; ++i) {
        std::string key = "key" + std::to_string(next_key++);
        payloads.push_back(MakePayload(layout, index, next_key));
        ks.push_back(key);
      }
      for (int i = 0; i < len; ++i) {
        const std::string& par = i == 0 ? parent : ks[i - 1];
        puts.push_back(BlockPut{ks[i], par, index + i, payloads[i]});
        model[ks[i]] = ModelBlock{par, index + static_cast<uint32_t>(i), payloads[i]};
        keys.push_back(ks[i]);
      }
      ASSERT_OK(store->Put("ns", puts)) << "step " << step;
    } else if (op < 75) {
      const std::string& key = keys[rng() % keys.size()];
      auto ref = store->Get("ns", key);
      if (ref.ok()) {
        ASSERT_EQ(RefBytes(*ref), model[key].payload) << "step " << step << " key " << key;
        ++gets_ok;
        if (ref->tier() == Tier::kCold) ++gets_cold;
      } else {
        ASSERT_TRUE(absl::IsNotFound(ref.status())) << ref.status();
        ASSERT_EQ(tier_of(key), Tier::kNone);
      }
    } else if (op < 82) {
      std::vector<std::string> k = {keys[rng() % keys.size()]};
      ASSERT_OK(store->Pin("ns", k, 1 + rng() % 50));
    } else if (op < 86) {
      std::vector<std::string> k = {keys[rng() % keys.size()]};
      ASSERT_OK(store->Unpin("ns", k));
    } else if (op < 93) {
      std::vector<std::string> k = {keys[rng() % keys.size()]};
      std::vector<float> s = {static_cast<float>(rng() % 100) / 10.0f};
      ASSERT_OK(store->ReportScores("ns", k, s));
    } else if (op < 96) {
      // Whole-prefix lookups of a random chain.
      std::vector<std::string> chain;
      for (std::string k = keys[rng() % keys.size()]; !k.empty(); k = model[k].parent) {
        chain.insert(chain.begin(), k);
      }
      auto r = store->Lookup("ns", chain);
      ASSERT_OK(r);
      // Ancestors of resident blocks are resident, so the prefix is every resident key.
      uint32_t resident = 0;
      for (Tier t : r->tiers) resident += t != Tier::kNone;
      ASSERT_EQ(r->prefix_blocks, resident) << "step " << step;
    } else {
      clock.AdvanceMillis(20);
    }
    check_invariants(step);
    if (::testing::Test::HasFatalFailure()) return;
  }
  StoreStats stats = store->Stats();
  ASSERT_EQ(stats.namespaces.size(), 1u);
  const NamespaceStats& st = stats.namespaces[0];
  // The run really exercised both tiers and both kinds of eviction.
  EXPECT_GT(st.demotions, 10u);
  EXPECT_GT(st.evictions_cold_capacity, 0u);
  EXPECT_GT(gets_ok, 20u);
  EXPECT_GT(gets_cold, 0u);
  EXPECT_LE(stats.cold_used_bytes, stats.cold_capacity_bytes);
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, RandomOpsTest,
                         ::testing::Values(EvictionPolicyKind::kLru,
                                           EvictionPolicyKind::kPrefixLru,
                                           EvictionPolicyKind::kLfu,
                                           EvictionPolicyKind::kHeavyHitter,
                                           EvictionPolicyKind::kReuseLru),
                         [](const auto& info) { return EvictionPolicyName(info.param); });

}  // namespace
}  // namespace kvtier::storage
