// The simulator's store model (tools/store_model.h) against the real TieredStore
// (tools/replay.h): the same small traces through both, for every store policy, must
// give identical counts, hot and cold.
#include "tests/testing/status_matchers.h"
#include "tools/store_model.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"
#include "storage/tiered_store.h"
#include "tools/cache_sim.h"
#include "tools/replay.h"
#include "tools/trace_synth.h"

namespace kvtier::tools {
namespace {

Trace Synth(SynthFamily family, size_t requests) {
  SynthOptions o;
  o.family = family;
  o.requests = requests;
  o.seed = 3;
  absl::StatusOr<Trace> t = SynthesizeTrace(o);
  EXPECT_OK(t);
  return *t;
}

struct Case {
  double cold_capacities;
  uint32_t sink_blocks;
};

TEST(StoreModelTest, SimulatorAndRealStoreAgreeForEveryStorePolicy) {
  const std::vector<Trace> traces = {Synth(SynthFamily::kChat, 160),
                                     Synth(SynthFamily::kRag, 120)};
  const uint64_t kCap = 90;
  for (size_t t = 0; t < traces.size(); ++t) {
    for (Case c : {Case{8.0, 1}, Case{1.5, 1}, Case{4.0, 0}}) {
      for (SimPolicy p : {SimPolicy::kLru, SimPolicy::kPrefixLru, SimPolicy::kLfu,
                          SimPolicy::kReuse, SimPolicy::kAdaptive}) {
        SCOPED_TRACE(::testing::Message() << "trace " << t << " policy " << SimPolicyName(p)
                                        << " cold " << c.cold_capacities << " sinks "
                                        << c.sink_blocks);
        SimOptions so;
        so.capacity_blocks = kCap;
        so.cold_capacities = c.cold_capacities;
        so.sink_blocks = c.sink_blocks;
        absl::StatusOr<SimResult> sim = Simulate(traces[t], p, so);
        ASSERT_OK(sim);
        ReplayOptions ro;
        ro.capacity_blocks = kCap;
        ro.policy = *StorePolicyOf(p);
        ro.cold_capacities = c.cold_capacities;
        ro.sink_blocks = c.sink_blocks;
        absl::StatusOr<ReplayResult> store = ReplayTrace(traces[t], ro);
        ASSERT_OK(store);
        EXPECT_EQ(store->capacity_blocks, kCap);
        EXPECT_EQ(store->store.requested_blocks, sim->requested_blocks);
        EXPECT_EQ(store->store.hit_blocks, sim->hit_blocks);
        EXPECT_EQ(store->store.prefix_hit_blocks, sim->prefix_hit_blocks);
        EXPECT_EQ(store->store.leading_hot_blocks, sim->leading_hot_blocks);
        EXPECT_EQ(store->store.leading_cold_blocks, sim->leading_cold_blocks);
        EXPECT_EQ(store->store.evictions, sim->evictions);
        EXPECT_GT(sim->evictions, 0u);
      }
    }
  }
}

TEST(StoreModelTest, ColdTierServesWhatHotEvictedUntilItIsFull) {
  // Two 3-block prompts alternate through a 3-block hot tier: from the third request on,
  // each finds its whole prompt in the cold tier while that holds both prompts; when it
  // holds one record, the cold tier deletes leaves first, so what survives is the
  // prompt's root block: a leading run of one cold block per request.
  std::vector<std::vector<uint32_t>> reqs;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(i % 2 == 0 ? std::vector<uint32_t>{0, 1, 2} : std::vector<uint32_t>{3, 4, 5});
  }
  for (uint64_t cold_bytes : {6u, 1u}) {
    StoreModelOptions o;
    o.hot_slots = 3;
    o.cold_capacity_bytes = cold_bytes;
    o.policy = storage::EvictionPolicyKind::kPrefixLru;
    std::vector<uint64_t> hashes;
    for (uint64_t k = 0; k < 6; ++k) hashes.push_back(storage::BlockKeyHash(TraceKey(k)));
    StoreModel model(o, hashes);
    std::vector<storage::Tier> tiers;
    SimResult r;
    for (const auto& q : reqs) {
      model.Request(q, &tiers);
      CountRequest(tiers, &r);
      EXPECT_LE(model.hot_blocks(), 3u);
    }
    EXPECT_EQ(r.hit_blocks, 0u);
    EXPECT_EQ(r.leading_cold_blocks, cold_bytes == 6 ? 12u : 4u) << cold_bytes;
  }
}

TEST(StoreModelTest, AdaptivePolicyStaysWithin64BytesPerHotBlock) {
  // What the policy allocates (hash-map slots at their load factor, heap and shadow
  // vectors with their slack: EvictionPolicy::MemoryBytes) per hot block, on every trace
  // family with a full hot tier, evictions and an 8x cold tier (shadows full).
  for (SynthFamily family : AllSynthFamilies()) {
    SCOPED_TRACE(SynthFamilyName(family));
    const Trace trace = Synth(family, 1500);
    absl::flat_hash_map<uint64_t, uint32_t> dense;
    std::vector<uint64_t> hashes;
    std::vector<std::vector<uint32_t>> requests;
    for (const TraceRequest& r : trace.requests) {
      std::vector<uint32_t>& keys = requests.emplace_back();
      for (uint64_t h : r.hash_ids) {
        auto [it, inserted] = dense.try_emplace(h, static_cast<uint32_t>(dense.size()));
        if (inserted) hashes.push_back(storage::BlockKeyHash(TraceKey(h)));
        keys.push_back(it->second);
      }
    }
    StoreModelOptions o;
    o.hot_slots = 2000;
    o.cold_capacity_bytes = 8 * o.hot_slots;
    o.policy = storage::EvictionPolicyKind::kAdaptive;
    StoreModel model(o, hashes);
    std::vector<storage::Tier> tiers;
    size_t peak = 0;
    for (const std::vector<uint32_t>& keys : requests) {
      model.Request(keys, &tiers);
      if (model.hot_blocks() == o.hot_slots) peak = std::max(peak, model.policy_memory_bytes());
    }
    ASSERT_EQ(model.hot_blocks(), o.hot_slots);
    ASSERT_GT(model.demotions(), o.hot_slots);
    const double per_block = static_cast<double>(peak) / static_cast<double>(o.hot_slots);
    std::printf("%s: adaptive policy %.1f bytes per hot block (peak)\n", SynthFamilyName(family),
                per_block);
    EXPECT_LE(per_block, 64.0);
  }
}

}  // namespace
}  // namespace kvtier::tools
