// TieredStore block events (StoreOptions::events): every tier change is reported, so a
// consumer that applies the events in order holds exactly the store's residency. The
// store runs over a FakeColdTier, which also lets a test corrupt a cold value.
#include <map>
#include <memory>
#include <random>
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
using ::kvtier::events::Medium;
using ::kvtier::events::testing::RecordingEventSink;
using ::kvtier::storage::testing::KeyOf;
using ::kvtier::storage::testing::MakePayload;
using ::kvtier::storage::testing::SmallLayout;
using ::kvtier::storage::testing::SmallNamespace;
using ::kvtier::storage::testing::TierOf;
using ::kvtier::testing::FakeColdTier;

// What a router builds from the events: key -> tiers holding it.
class ResidencyModel {
 public:
  void Apply(const std::vector<BlockEvent>& events) {
    for (const BlockEvent& e : events) {
      ASSERT_EQ(e.ns, "ns");
      ASSERT_EQ(e.model_id, "test-model");
      switch (e.kind) {
        case EventKind::kStored:
          ASSERT_EQ(e.block_size, SmallLayout().tokens_per_block);
          for (const std::string& k : e.keys) {
            // A tier announces a block it does not hold yet, never twice.
            ASSERT_TRUE(tiers_[k].insert(e.medium).second) << "stored twice: " << k;
          }
          break;
        case EventKind::kRemoved:
          for (const std::string& k : e.keys) {
            ASSERT_EQ(tiers_[k].erase(e.medium), 1u) << "removed but not held: " << k;
            if (tiers_[k].empty()) tiers_.erase(k);
          }
          break;
        case EventKind::kAllCleared:
          tiers_.clear();
          break;
      }
    }
  }
  bool Holds(const std::string& key, Medium m) const {
    auto it = tiers_.find(key);
    return it != tiers_.end() && it->second.contains(m);
  }
  const std::map<std::string, std::set<Medium>>& tiers() const { return tiers_; }
  void Clear() { tiers_.clear(); }

 private:
  std::map<std::string, std::set<Medium>> tiers_;
};

using SeenCounts = std::map<std::pair<EventKind, Medium>, int>;
int Seen(const SeenCounts& seen, EventKind kind, Medium medium) {
  auto it = seen.find({kind, medium});
  return it == seen.end() ? 0 : it->second;
}

class TieredStoreEventsTest : public testing::StoreTest {
 protected:
  // Opens a store over `disk` reporting into sink_, with namespace "ns" (id 0).
  std::unique_ptr<TieredStore> OpenOver(std::shared_ptr<FakeColdTier::Disk> disk,
                                        uint64_t hot_blocks, uint64_t cold_blocks) {
    StoreOptions o = Options(hot_blocks, cold_blocks);
    o.events = &sink_;
    auto cold = std::make_unique<FakeColdTier>(std::move(disk));
    cold_ = cold.get();
    auto store = Open(o, std::move(cold));
    EXPECT_OK(store->RegisterNamespace(SmallNamespace("ns")));
    return store;
  }

  // The model equals the store exactly: hot per Lookup, cold per the cold tier's records.
  void ExpectModelMatches(TieredStore* store, const std::set<std::string>& universe) {
    for (const auto& [key, tiers] : model_.tiers()) {
      EXPECT_TRUE(universe.contains(key)) << "event for unknown key " << key;
    }
    for (const std::string& key : universe) {
      const Tier tier = TierOf(store, key);
      EXPECT_EQ(model_.Holds(key, Medium::kCpuPinned), tier == Tier::kHot) << key;
      EXPECT_EQ(model_.Holds(key, Medium::kDisk), cold_->Contains(0, key)) << key;
      if (tier == Tier::kCold) {
        EXPECT_TRUE(model_.Holds(key, Medium::kDisk)) << key;
      }
    }
  }

  RecordingEventSink sink_;
  ResidencyModel model_;
  FakeColdTier* cold_ = nullptr;  // owned by the store
};

TEST_F(TieredStoreEventsTest, PutCarriesClientFieldsAndDemotionMovesTiers) {
  auto store = OpenOver(std::make_shared<FakeColdTier::Disk>(), 4, 1000);
  const std::string payload = MakePayload(SmallLayout(), 0, 1);
  const std::vector<uint32_t> tokens = {1, 2, 3, 4};
  const std::vector<std::string> extra = {"img-1", "salt"};
  const std::string key0 = KeyOf(1, 0);
  const std::string key1 = KeyOf(1, 1);
  BlockPut put{key0, "", 0, payload};
  put.token_ids = tokens;
  put.lora_name = "adapter-a";
  put.extra_keys = extra;
  ASSERT_OK(store->Put("ns", {&put, 1}));
  std::vector<BlockEvent> events = sink_.Take();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::kStored);
  EXPECT_EQ(events[0].medium, Medium::kCpuPinned);
  EXPECT_EQ(events[0].keys, std::vector<std::string>{KeyOf(1, 0)});
  EXPECT_FALSE(events[0].parent_key.has_value());
  EXPECT_EQ(events[0].token_ids, tokens);
  EXPECT_EQ(events[0].lora_name, "adapter-a");
  ASSERT_EQ(events[0].extra_keys.size(), 1u);
  EXPECT_EQ(events[0].extra_keys[0], extra);

  // A child names its parent; an admin demotion is Stored DISK, then Removed CPU.
  const std::string child = MakePayload(SmallLayout(), 1, 1);
  BlockPut put1{key1, key0, 1, child};
  ASSERT_OK(store->Put("ns", {&put1, 1}));
  events = sink_.Take();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].parent_key, KeyOf(1, 0));
  EXPECT_TRUE(events[0].token_ids.empty());
  EXPECT_FALSE(events[0].lora_name.has_value());

  std::vector<std::string> keys = {KeyOf(1, 1)};
  ASSERT_OK(store->Evict("ns", keys, /*drop=*/false));
  events = sink_.Take();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, EventKind::kStored);
  EXPECT_EQ(events[0].medium, Medium::kDisk);
  EXPECT_EQ(events[1].kind, EventKind::kRemoved);
  EXPECT_EQ(events[1].medium, Medium::kCpuPinned);
}

TEST_F(TieredStoreEventsTest, CorruptColdValueIsRemovedOnRead) {
  auto store = OpenOver(std::make_shared<FakeColdTier::Disk>(), 4, 1000);
  const std::string payload = MakePayload(SmallLayout(), 0, 7);
  const std::string key = KeyOf(7, 0);
  BlockPut put{key, "", 0, payload};
  ASSERT_OK(store->Put("ns", {&put, 1}));
  std::vector<std::string> keys = {KeyOf(7, 0)};
  ASSERT_OK(store->Evict("ns", keys, /*drop=*/false));
  model_.Apply(sink_.Take());
  ASSERT_TRUE(model_.Holds(KeyOf(7, 0), Medium::kDisk));
  ASSERT_TRUE(cold_->CorruptValue(0, KeyOf(7, 0)));
  EXPECT_TRUE(absl::IsNotFound(store->Get("ns", KeyOf(7, 0)).status()));
  std::vector<BlockEvent> events = sink_.Take();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::kRemoved);
  EXPECT_EQ(events[0].medium, Medium::kDisk);
  model_.Apply(events);
  EXPECT_TRUE(model_.tiers().empty());
}

// A seeded random workload under hot and cold pressure: shared-prefix chains, gets
// (promotions), deletes, admin evictions (demote and drop), flushes, pins, corrupt cold
// values and restarts. After every step the model built from the events alone equals
// the store.
TEST_F(TieredStoreEventsTest, RandomWorkloadModelEqualsStore) {
  auto disk = std::make_shared<FakeColdTier::Disk>();
  constexpr uint64_t kHot = 8;
  constexpr uint64_t kCold = 30;
  auto store = OpenOver(disk, kHot, kCold);
  std::mt19937_64 rng(15);
  std::set<std::string> universe;
  std::vector<std::vector<std::string>> chains;  // keys of each chain put so far
  uint64_t next_seq = 1;
  SeenCounts seen;
  int promotions = 0;
  auto pick_key = [&]() -> std::string {
    auto it = universe.begin();
    std::advance(it, rng() % universe.size());
    return *it;
  };
  for (int step = 0; step < 600; ++step) {
    const int op = static_cast<int>(rng() % 100);
    if (op < 45 || universe.empty()) {
      // A chain that shares a prefix with an earlier one (or a fresh chain).
      std::vector<std::string> keys;
      uint32_t shared = 0;
      if (!chains.empty() && rng() % 2 == 0) {
        const auto& base = chains[rng() % chains.size()];
        shared = static_cast<uint32_t>(rng() % (base.size() + 1));
        keys.assign(base.begin(), base.begin() + shared);
      }
      const uint64_t seq = next_seq++;
      const uint32_t n = shared + 1 + static_cast<uint32_t>(rng() % 4);
      for (uint32_t i = shared; i < n; ++i) keys.push_back(KeyOf(seq, i));
      for (uint32_t i = 0; i < n; ++i) {
        const std::string payload = MakePayload(SmallLayout(), i, seq);
        BlockPut put{keys[i], i == 0 ? std::string_view() : std::string_view(keys[i - 1]), i,
                     payload};
        ASSERT_OK(store->Put("ns", {&put, 1})) << step;
        universe.insert(keys[i]);
      }
      chains.push_back(keys);
    } else if (op < 65) {
      (void)store->Get("ns", pick_key());
    } else if (op < 72) {
      std::vector<std::string> keys = {pick_key()};
      ASSERT_OK(store->Delete("ns", keys));
    } else if (op < 79) {
      std::vector<std::string> keys = {pick_key()};
      ASSERT_OK(store->Evict("ns", keys, /*drop=*/rng() % 2 == 0));
    } else if (op < 83) {
      ASSERT_OK(store->Flush("ns"));
    } else if (op < 89) {
      std::vector<std::string> keys = {pick_key()};
      ASSERT_OK(store->Pin("ns", keys, 1 + rng() % 50));
      clock_.AdvanceMillis(static_cast<int64_t>(rng() % 40));
    } else if (op < 96) {
      // Corrupt a cold-only block, then read it: it is dropped and reported.
      const std::string key = pick_key();
      if (TierOf(store.get(), key) == Tier::kCold && cold_->CorruptValue(0, key)) {
        EXPECT_FALSE(store->Get("ns", key).ok());
      }
    } else {
      // Restart: the closing store reports its hot blocks removed (the hot tier ends
      // with it); the consumer then starts over and learns the recovered blocks from the
      // events of the new store.
      store.reset();
      model_.Apply(sink_.Take());
      for (const std::string& k : universe) {
        EXPECT_FALSE(model_.Holds(k, Medium::kCpuPinned)) << "hot after close, step " << step;
      }
      model_.Clear();
      store = OpenOver(disk, kHot, kCold);
    }
    for (const BlockEvent& e : sink_.Take()) {
      ++seen[{e.kind, e.medium}];
      // A promotion: a cold-only block becomes hot too.
      if (e.kind == EventKind::kStored && e.medium == Medium::kCpuPinned &&
          model_.Holds(e.keys[0], Medium::kDisk)) {
        ++promotions;
      }
      model_.Apply({e});
    }
    ASSERT_NO_FATAL_FAILURE(ExpectModelMatches(store.get(), universe)) << "step " << step;
    if (HasFailure()) FAIL() << "mismatch at step " << step;
  }
  // The workload did reach every transition.
  EXPECT_GT(Seen(seen, EventKind::kStored, Medium::kCpuPinned), 0);
  EXPECT_GT(Seen(seen, EventKind::kStored, Medium::kDisk), 0);
  EXPECT_GT(Seen(seen, EventKind::kRemoved, Medium::kCpuPinned), 0);
  EXPECT_GT(Seen(seen, EventKind::kRemoved, Medium::kDisk), 0);
  EXPECT_GT(promotions, 0);
}

}  // namespace
}  // namespace kvtier::storage
