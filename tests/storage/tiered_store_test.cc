#include "storage/tiered_store.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/hot_arena.h"
#include "storage/slab_file.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/fake_cold_tier.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::storage {
namespace {

using ::kvtier::storage::testing::KeyOf;
using ::kvtier::storage::testing::MakePayload;
using ::kvtier::storage::testing::PutChain;
using ::kvtier::storage::testing::NsStats;
using ::kvtier::storage::testing::RefBytes;
using ::kvtier::storage::testing::SmallLayout;
using ::kvtier::storage::testing::SlotBytes;
using ::kvtier::storage::testing::SmallNamespace;
using ::kvtier::storage::testing::TierOf;
using ::testing::HasSubstr;

class TieredStoreTest : public testing::StoreTest {};

TEST_F(TieredStoreTest, PutGetRoundTripFromHot) {
  auto store = Open(Options());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  auto payloads = PutChain(store.get(), 1, 3);
  for (uint32_t i = 0; i < 3; ++i) {
    auto ref = store->Get("ns", KeyOf(1, i));
    ASSERT_OK(ref);
    EXPECT_EQ(RefBytes(*ref), payloads[i]);
    EXPECT_EQ(ref->tier(), Tier::kHot);
    EXPECT_EQ(ref->block_index(), i);
  }
  EXPECT_TRUE(absl::IsNotFound(store->Get("ns", KeyOf(2, 0)).status()));
  NamespaceStats st = NsStats(*store);
  EXPECT_EQ(st.puts, 3u);
  EXPECT_EQ(st.gets, 4u);
  EXPECT_EQ(st.get_misses, 1u);
  EXPECT_EQ(st.hot.hits, 3u);
  EXPECT_EQ(st.hot.blocks, 3u);
  EXPECT_EQ(st.raw_bytes_put, 3 * SmallLayout().BytesPerBlock());
  StoreStats all = store->Stats();
  EXPECT_THAT(std::string(all.hot_allocator), ::testing::AnyOf("mlock", "malloc", "cuda"));
  EXPECT_LE(all.hot_used_bytes, all.hot_capacity_bytes);
}

TEST_F(TieredStoreTest, ForcedMallocAllocatorIsReported) {
  StoreOptions o = Options();
  o.hot_allocator = "malloc";
  auto store = Open(o);
  EXPECT_EQ(store->Stats().hot_allocator, "malloc");
  o.hot_allocator = "bogus";
  store.reset();
  EXPECT_TRUE(absl::IsInvalidArgument(TieredStore::Open(o).status()));
}

TEST_F(TieredStoreTest, CudaAllocatorFallsBackWithoutADevice) {
  StoreOptions o = Options();
  o.hot_allocator = "cuda";
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  const std::string allocator = store->Stats().hot_allocator;
  if (access("/dev/nvidia0", F_OK) != 0) {
    // No driver here: the dlopen'ed runtime fails and the chain falls back.
    EXPECT_THAT(allocator, ::testing::AnyOf("mlock", "malloc"));
  } else {
    EXPECT_EQ(allocator, "cuda");
  }
}

TEST_F(TieredStoreTest, NamespaceRegistrationIsIdempotentAndChecked) {
  auto store = Open(Options());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  NamespaceOptions other = SmallNamespace();
  other.layout.head_dim = 64;
  auto st = store->RegisterNamespace(other);
  EXPECT_TRUE(absl::IsFailedPrecondition(st.status()));
  EXPECT_THAT(std::string(st.status().message()), HasSubstr("head_dim"));
  NamespaceOptions bad = SmallNamespace("bad name!");
  EXPECT_TRUE(absl::IsInvalidArgument(store->RegisterNamespace(bad).status()));
  EXPECT_TRUE(absl::IsNotFound(store->GetNamespace("nope").status()));
  EXPECT_EQ(store->ListNamespaces().size(), 1u);
}

TEST_F(TieredStoreTest, PutRejectsBadBlocks) {
  auto store = Open(Options());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  std::string payload = MakePayload(SmallLayout(), 0, 1);
  BlockPut empty_key{"", "", 0, payload};
  EXPECT_TRUE(absl::IsInvalidArgument(store->Put("ns", {&empty_key, 1})));
  std::string long_key(33, 'x');
  BlockPut long_put{long_key, "", 0, payload};
  EXPECT_TRUE(absl::IsInvalidArgument(store->Put("ns", {&long_put, 1})));
  BlockPut garbage{"key", "", 0, "not a blob"};
  EXPECT_TRUE(absl::IsInvalidArgument(store->Put("ns", {&garbage, 1})));
  kv::Layout wide = SmallLayout();
  wide.num_layers = 3;
  std::string wrong = MakePayload(wide, 0, 1);
  BlockPut wrong_layout{"key", "", 0, wrong};
  auto st = store->Put("ns", {&wrong_layout, 1});
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("num_layers"));
  std::string int8 = MakePayload(SmallLayout(), 0, 1, kv::CodecId::kInt8);
  BlockPut wrong_codec{"key", "", 0, int8};
  EXPECT_TRUE(absl::IsFailedPrecondition(store->Put("ns", {&wrong_codec, 1})));
  BlockPut ok{"key", "", 0, payload};
  EXPECT_TRUE(absl::IsNotFound(store->Put("other", {&ok, 1})));
  EXPECT_EQ(NsStats(*store).puts, 0u);
}

TEST_F(TieredStoreTest, LookupReportsPrefixAndTiersWithoutTouchingRecency) {
  auto store = Open(Options(/*hot_blocks=*/4));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChain(store.get(), 1, 3);
  std::vector<std::string> keys = {KeyOf(1, 0), KeyOf(1, 1), KeyOf(9, 9), KeyOf(1, 2)};
  auto r = store->Lookup("ns", keys);
  ASSERT_OK(r);
  EXPECT_EQ(r->prefix_blocks, 2u);
  EXPECT_THAT(r->tiers, ::testing::ElementsAre(Tier::kHot, Tier::kHot, Tier::kNone, Tier::kHot));
  NamespaceStats st = NsStats(*store);
  EXPECT_EQ(st.lookups, 1u);
  EXPECT_EQ(st.lookup_blocks, 4u);
  EXPECT_EQ(st.lookup_hit_blocks, 3u);
  EXPECT_EQ(st.lookup_prefix_hit_blocks, 2u);
  EXPECT_EQ(st.lookup_prefix_hit_blocks_hot, 2u);
  EXPECT_EQ(st.lookup_prefix_hit_blocks_cold, 0u);

  // Two independent single blocks a (older) and b; looking a up must not save it.
  store.reset();
  store = Open(Options(/*hot_blocks=*/2));
  std::string pa = MakePayload(SmallLayout(), 1, 7), pb = MakePayload(SmallLayout(), 1, 8);
  BlockPut a{"a", "", 0, pa}, b{"b", "", 0, pb};  // roots
  ASSERT_OK(store->Put("ns", {&a, 1}));
  ASSERT_OK(store->Put("ns", {&b, 1}));
  std::vector<std::string> ka = {"a"};
  for (int i = 0; i < 3; ++i) ASSERT_OK(store->Lookup("ns", ka));
  std::string pc = MakePayload(SmallLayout(), 1, 9);
  BlockPut c{"c", "", 0, pc};
  ASSERT_OK(store->Put("ns", {&c, 1}));  // 3 > 0.9 * 2 slots: demote down to 1
  EXPECT_EQ(TierOf(store.get(), "a"), Tier::kCold);
}

TEST_F(TieredStoreTest, DemotesUnderPressureAndPromotesOnGet) {
  auto store = Open(Options(/*hot_blocks=*/10));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  std::vector<std::vector<std::string>> seqs;
  for (uint64_t s = 0; s < 6; ++s) seqs.push_back(PutChain(store.get(), s, 4));
  StoreStats stats = store->Stats();
  EXPECT_LE(stats.hot_used_bytes, stats.hot_capacity_bytes);
  EXPECT_LE(stats.hot_used_bytes, static_cast<uint64_t>(0.9 * stats.hot_capacity_bytes));
  NamespaceStats st = NsStats(*store);
  EXPECT_GT(st.demotions, 0u);
  EXPECT_EQ(st.hot.blocks + st.cold.blocks, 24u);
  // The oldest sequence's tail went cold; Get promotes it back with the same bytes.
  ASSERT_EQ(TierOf(store.get(), KeyOf(0, 3)), Tier::kCold);
  auto ref = store->Get("ns", KeyOf(0, 3));
  ASSERT_OK(ref);
  EXPECT_EQ(ref->tier(), Tier::kCold);
  EXPECT_EQ(RefBytes(*ref), seqs[0][3]);
  EXPECT_EQ(TierOf(store.get(), KeyOf(0, 3)), Tier::kHot);
  EXPECT_EQ(NsStats(*store).promotions, 1u);
  EXPECT_EQ(NsStats(*store).cold.hits, 1u);
  for (uint64_t s = 0; s < 6; ++s) {
    for (uint32_t i = 0; i < 4; ++i) {
      auto r = store->Get("ns", KeyOf(s, i));
      ASSERT_OK(r) << s << "/" << i;
      EXPECT_EQ(RefBytes(*r), seqs[s][i]);
    }
  }
}

TEST_F(TieredStoreTest, HeldReadHandleKeepsBytesWhileBlockIsDemotedAndSlotReused) {
  auto store = Open(Options(/*hot_blocks=*/3));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  auto first = PutChain(store.get(), 0, 1);
  auto ref = store->Get("ns", KeyOf(0, 0));
  ASSERT_OK(ref);
  for (uint64_t s = 1; s < 10; ++s) PutChain(store.get(), s, 1);
  EXPECT_EQ(TierOf(store.get(), KeyOf(0, 0)), Tier::kCold);
  EXPECT_EQ(RefBytes(*ref), first[0]);  // the slot was not reused under the reader
  StoreStats stats = store->Stats();
  EXPECT_LE(stats.hot_used_bytes, stats.hot_capacity_bytes);
}

TEST_F(TieredStoreTest, PrefixLruDemotesLeavesFirstAndProtectsSinks) {
  auto store = Open(Options(/*hot_blocks=*/10));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChain(store.get(), 0, 6);  // oldest
  PutChain(store.get(), 1, 5);  // the 10th block is over 9 (high watermark): demote to 8
  // Demotion took the old chain from its tail; its parents and the sink stayed.
  EXPECT_EQ(TierOf(store.get(), KeyOf(0, 5)), Tier::kCold);
  EXPECT_EQ(TierOf(store.get(), KeyOf(0, 4)), Tier::kCold);
  EXPECT_EQ(TierOf(store.get(), KeyOf(0, 3)), Tier::kHot);
  EXPECT_EQ(TierOf(store.get(), KeyOf(0, 0)), Tier::kHot);
  EXPECT_EQ(TierOf(store.get(), KeyOf(0, 1)), Tier::kHot);
  // More pressure: the old chain drains from its tail. The sink (block 0) leaves the hot
  // tier only after its last hot descendant, and only to the cold tier: it stays
  // resident, so the whole prefix still looks up.
  PutChain(store.get(), 2, 3);
  EXPECT_EQ(TierOf(store.get(), KeyOf(0, 1)), Tier::kCold);
  EXPECT_NE(TierOf(store.get(), KeyOf(0, 0)), Tier::kNone);
  std::vector<std::string> chain;
  for (uint32_t i = 0; i < 6; ++i) chain.push_back(KeyOf(0, i));
  auto found = store->Lookup("ns", chain);
  ASSERT_OK(found);
  EXPECT_EQ(found->prefix_blocks, 6u);
}

TEST_F(TieredStoreTest, LruIgnoresStructure) {
  StoreOptions o = Options(/*hot_blocks=*/10);
  o.policy = EvictionPolicyKind::kLru;
  auto store = Open(o);
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChain(store.get(), 0, 6);
  PutChain(store.get(), 1, 5);
  EXPECT_EQ(TierOf(store.get(), KeyOf(0, 0)), Tier::kCold);  // the sink went first
  EXPECT_EQ(TierOf(store.get(), KeyOf(0, 5)), Tier::kHot);
}

TEST_F(TieredStoreTest, WriteThroughBlocksSurviveRestartWithNamespaces) {
  std::vector<std::string> payloads;
  {
    auto store = Open(Options());
    ASSERT_OK(store->RegisterNamespace(SmallNamespace("wt", /*write_through=*/true)));
    payloads = PutChain(store.get(), 3, 5, "wt");
    EXPECT_EQ(NsStats(*store, "wt").cold.blocks, 5u);
  }
  auto store = Open(Options());
  auto ns = store->GetNamespace("wt");
  ASSERT_OK(ns);
  EXPECT_TRUE(ns->write_through);
  EXPECT_EQ(ns->layout, SmallLayout());
  std::vector<std::string> keys;
  for (uint32_t i = 0; i < 5; ++i) keys.push_back(KeyOf(3, i));
  auto r = store->Lookup("wt", keys);
  ASSERT_OK(r);
  EXPECT_EQ(r->prefix_blocks, 5u);
  for (uint32_t i = 0; i < 5; ++i) {
    auto ref = store->Get("wt", keys[i]);
    ASSERT_OK(ref);
    EXPECT_EQ(RefBytes(*ref), payloads[i]);
  }
  // The recovered tree still protects its prefix under cold pressure.
  EXPECT_EQ(NsStats(*store, "wt").cold.blocks, 5u);
}

TEST_F(TieredStoreTest, WriteBackNeedsFlushToSurviveRestart) {
  std::vector<std::string> payloads;
  {
    auto store = Open(Options());
    ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
    payloads = PutChain(store.get(), 4, 3);
    EXPECT_EQ(NsStats(*store).cold.blocks, 0u);
    ASSERT_OK(store->Flush(""));
    EXPECT_EQ(NsStats(*store).cold.blocks, 3u);
    EXPECT_EQ(NsStats(*store).hot.blocks, 3u);
    PutChain(store.get(), 5, 1);  // not flushed
  }
  auto store = Open(Options());
  EXPECT_EQ(NsStats(*store).cold.blocks, 3u);
  EXPECT_EQ(NsStats(*store).hot.blocks, 0u);
  auto ref = store->Get("ns", KeyOf(4, 2));
  ASSERT_OK(ref);
  EXPECT_EQ(RefBytes(*ref), payloads[2]);
  EXPECT_TRUE(absl::IsNotFound(store->Get("ns", KeyOf(5, 0)).status()));
}

TEST_F(TieredStoreTest, CorruptColdValueIsAMissCountedAndDeleted) {
  auto disk = std::make_shared<kvtier::testing::FakeColdTier::Disk>();
  std::vector<std::string> payloads;
  {
    auto store = Open(Options(), std::make_unique<kvtier::testing::FakeColdTier>(disk));
    ASSERT_OK(store->RegisterNamespace(SmallNamespace("wt", true)));
    payloads = PutChain(store.get(), 6, 3, "wt");
  }
  // Flip payload bytes of block 2 underneath the store (namespace id 0).
  auto cold = std::make_unique<kvtier::testing::FakeColdTier>(disk);
  ASSERT_TRUE(cold->CorruptValue(0, KeyOf(6, 2)));
  kvtier::testing::FakeColdTier* fake = cold.get();
  auto store = Open(Options(), std::move(cold));
  auto bad = store->Get("wt", KeyOf(6, 2));
  EXPECT_TRUE(absl::IsNotFound(bad.status())) << bad.status();
  NamespaceStats st = NsStats(*store, "wt");
  EXPECT_EQ(st.checksum_failures, 1u);
  EXPECT_EQ(st.cold.blocks, 2u);
  EXPECT_EQ(TierOf(store.get(), KeyOf(6, 2), "wt"), Tier::kNone);
  EXPECT_FALSE(fake->Contains(0, KeyOf(6, 2)));
  for (uint32_t i = 0; i < 2; ++i) {
    auto ref = store->Get("wt", KeyOf(6, i));
    ASSERT_OK(ref);
    EXPECT_EQ(RefBytes(*ref), payloads[i]);
  }
  // Deleted for good: a restart does not bring it back.
  store.reset();
  store = Open(Options(), std::make_unique<kvtier::testing::FakeColdTier>(disk));
  EXPECT_EQ(TierOf(store.get(), KeyOf(6, 2), "wt"), Tier::kNone);
  EXPECT_EQ(NsStats(*store, "wt").cold.blocks, 2u);
}

TEST_F(TieredStoreTest, ColdOverCapacityDeletesLeavesOnly) {
  auto store = Open(Options(/*hot_blocks=*/4, /*cold_blocks=*/6));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  for (uint64_t s = 0; s < 5; ++s) PutChain(store.get(), s, 3);
  StoreStats stats = store->Stats();
  EXPECT_LE(stats.cold_used_bytes, stats.cold_capacity_bytes);
  NamespaceStats st = NsStats(*store);
  EXPECT_GT(st.evictions_cold_capacity, 0u);
  // Every resident block's parent is resident.
  for (uint64_t s = 0; s < 5; ++s) {
    for (uint32_t i = 1; i < 3; ++i) {
      if (TierOf(store.get(), KeyOf(s, i)) != Tier::kNone) {
        EXPECT_NE(TierOf(store.get(), KeyOf(s, i - 1)), Tier::kNone) << s << "/" << i;
      }
    }
  }
}

TEST_F(TieredStoreTest, PinKeepsBlocksHotUntilTtlExpires) {
  auto store = Open(Options(/*hot_blocks=*/4));
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  std::string p = MakePayload(SmallLayout(), 1, 42);
  BlockPut put{"sys", "", 0, p};
  ASSERT_OK(store->Put("ns", {&put, 1}));
  std::vector<std::string> keys = {"sys", "absent"};
  auto pinned = store->Pin("ns", keys, /*ttl_ms=*/1000);
  ASSERT_OK(pinned);
  EXPECT_EQ(*pinned, 1u);
  for (uint64_t s = 0; s < 8; ++s) PutChain(store.get(), s, 1);
  EXPECT_EQ(TierOf(store.get(), "sys"), Tier::kHot);
  clock_.AdvanceMillis(1001);
  for (uint64_t s = 10; s < 14; ++s) PutChain(store.get(), s, 1);
  EXPECT_EQ(TierOf(store.get(), "sys"), Tier::kCold);
  // Pinning a cold block promotes it.
  pinned = store->Pin("ns", {keys.data(), 1}, 0);
  ASSERT_OK(pinned);
  EXPECT_EQ(*pinned, 1u);
  EXPECT_EQ(TierOf(store.get(), "sys"), Tier::kHot);
  ASSERT_OK(store->Put("ns", {&put, 1}));  // a re-put keeps the pin
  for (uint64_t s = 20; s < 28; ++s) PutChain(store.get(), s, 1);
  EXPECT_EQ(TierOf(store.get(), "sys"), Tier::kHot);
  ASSERT_EQ(*store->Unpin("ns", {keys.data(), 1}), 1u);
  for (uint64_t s = 30; s < 38; ++s) PutChain(store.get(), s, 1);
  EXPECT_EQ(TierOf(store.get(), "sys"), Tier::kCold);
}

TEST_F(TieredStoreTest, DeleteAndAdminEvict) {
  auto store = Open(Options());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  PutChain(store.get(), 1, 4);
  std::vector<std::string> del = {KeyOf(1, 3), "absent"};
  EXPECT_EQ(*store->Delete("ns", del), 1u);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 3)), Tier::kNone);
  // Demote block 1: it goes cold, the rest stays.
  std::vector<std::string> one = {KeyOf(1, 1)};
  EXPECT_EQ(*store->Evict("ns", one, /*drop=*/false), 1u);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 1)), Tier::kCold);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 2)), Tier::kHot);
  // Drop block 1: its descendants go too, its parent stays.
  EXPECT_EQ(*store->Evict("ns", one, /*drop=*/true), 2u);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 1)), Tier::kNone);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 2)), Tier::kNone);
  EXPECT_EQ(TierOf(store.get(), KeyOf(1, 0)), Tier::kHot);
  // Whole namespace demotion.
  PutChain(store.get(), 2, 3);
  EXPECT_EQ(*store->Evict("ns", {}, false), 4u);
  EXPECT_EQ(NsStats(*store).hot.blocks, 0u);
  EXPECT_EQ(NsStats(*store).cold.blocks, 4u);
  EXPECT_EQ(NsStats(*store).evictions_admin, 1u + 1u + 2u + 4u);
}

TEST_F(TieredStoreTest, ZstdNamespaceCompressesCompressibleBlocks) {
  auto store = Open(Options());
  NamespaceOptions ns = SmallNamespace("z", true);
  ns.cold_zstd = true;
  ASSERT_OK(store->RegisterNamespace(ns));
  std::string raw(SmallLayout().BytesPerBlock(), '\0');  // zeros compress well
  auto blob = kv::Encode(kv::CodecId::kFp16, SmallLayout(), 1, kv::AsBytes(raw));
  ASSERT_OK(blob);
  BlockPut put{"zero", "", 0, *blob};
  ASSERT_OK(store->Put("z", {&put, 1}));
  // Cold bytes count whole slab units: compressed, the block takes fewer of them.
  EXPECT_LT(NsStats(*store, "z").cold.bytes, SlabFile::Round(blob->size()));
  ASSERT_EQ(*store->Evict("z", {}, false), 1u);
  auto ref = store->Get("z", "zero");
  ASSERT_OK(ref);
  EXPECT_EQ(RefBytes(*ref), *blob);
}

TEST_F(TieredStoreTest, StandaloneEntriesAreColdOnlyAndMayExceedABlock) {
  auto store = Open(Options());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  kv::Layout big = SmallLayout();
  big.tokens_per_block = 64;
  big.sink_tokens = 4;
  std::string payload = MakePayload(big, 0, 5);
  BlockPut put{"compacted", "", 0, payload};
  put.standalone = true;
  ASSERT_OK(store->Put("ns", {&put, 1}));
  EXPECT_EQ(TierOf(store.get(), "compacted"), Tier::kCold);
  auto ref = store->Get("ns", "compacted");
  ASSERT_OK(ref);
  EXPECT_EQ(RefBytes(*ref), payload);
}

TEST_F(TieredStoreTest, RePutReplacesBytes) {
  auto store = Open(Options());
  ASSERT_OK(store->RegisterNamespace(SmallNamespace()));
  std::string a = MakePayload(SmallLayout(), 0, 1), b = MakePayload(SmallLayout(), 0, 2);
  BlockPut pa{"k", "", 0, a}, pb{"k", "", 0, b};
  ASSERT_OK(store->Put("ns", {&pa, 1}));
  ASSERT_OK(store->Flush("ns"));
  ASSERT_OK(store->Put("ns", {&pb, 1}));
  EXPECT_EQ(RefBytes(*store->Get("ns", "k")), b);
  ASSERT_EQ(*store->Evict("ns", {}, false), 1u);
  EXPECT_EQ(RefBytes(*store->Get("ns", "k")), b);
  EXPECT_EQ(NsStats(*store).hot.blocks + NsStats(*store).cold.blocks, 2u - 1u + 1u);
}

TEST(TierNameTest, NamesEveryTier) {
  EXPECT_STREQ(TierName(Tier::kNone), "none");
  EXPECT_STREQ(TierName(Tier::kHot), "hot");
  EXPECT_STREQ(TierName(Tier::kCold), "cold");
}

}  // namespace
}  // namespace kvtier::storage
