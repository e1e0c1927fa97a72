// TieredStore::RecoverCold (recovery on demand, docs/recovery.md "On demand") with a real
// RocksDbColdTier in a temp dir: index records lost silently before a restart come back,
// and while it runs, Puts and Deletes go on: no acknowledged block is lost, no deleted
// block comes back (then, and after a full rebuild from the slab at the next open).
#include <cstdio>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "storage/rocksdb_cold_tier.h"
#include "storage/tiered_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/cold_damage.h"
#include "tests/testing/fake_cold_tier.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::storage {
namespace {

using ::kvtier::storage::testing::KeyOf;
using ::kvtier::storage::testing::MakePayload;
using ::kvtier::storage::testing::NsStats;
using ::kvtier::storage::testing::RefBytes;
using ::kvtier::storage::testing::SmallLayout;
using ::kvtier::storage::testing::SmallNamespace;

constexpr int kOld = 120;  // blocks put before the restart (roots KeyOf(1, i))
constexpr int kLost = 40;  // ... whose records are lost: i < kLost
constexpr int kRePut = 10;  // ... of which put again during the rebuild: i < kRePut
constexpr int kDelFrom = 40, kDelTo = 80;  // deleted during the rebuild
constexpr int kNew = 60;  // new blocks put during the rebuild (KeyOf(2, j))
// Until a rebuild, the space of a block whose record is lost looks free, and a Put may
// reuse it (that block is then gone: docs/recovery.md). So that the writers cannot, there
// are block-sized holes for them (best fit takes those first): fillers KeyOf(3, f), every
// other one deleted before the restart.
constexpr int kFillers = 2 * (kNew + kRePut + 10);

StoreOptions Options(const std::string& dir) {
  StoreOptions o;
  o.data_dir = dir;
  o.hot_capacity_bytes = 32ull << 20;
  o.hot_allocator = "malloc";
  return o;
}

std::string Old(int i) { return MakePayload(SmallLayout(), 0, 100 + i); }
std::string RePut(int i) { return MakePayload(SmallLayout(), 0, 900 + i); }
std::string New(int j) { return MakePayload(SmallLayout(), 0, 500 + j); }

absl::Status PutRoot(TieredStore& store, const std::string& key, const std::string& payload) {
  BlockPut put{key, "", 0, payload};
  return store.Put("ns", {&put, 1});
}

// What every key must read as after the rebuild: the bytes, or absent.
void ExpectFinalState(TieredStore& store, const std::string& when) {
  for (int i = 0; i < kOld; ++i) {
    auto ref = store.Get("ns", KeyOf(1, i));
    if (i >= kDelFrom && i < kDelTo) {
      EXPECT_TRUE(absl::IsNotFound(ref.status())) << when << ": deleted block " << i
                                                  << " came back";
      continue;
    }
    ASSERT_OK(ref) << when << ": block " << i << ": " << ref.status();
    EXPECT_EQ(RefBytes(*ref), i < kRePut ? RePut(i) : Old(i)) << when << ": block " << i;
  }
  for (int j = 0; j < kNew; ++j) {
    auto ref = store.Get("ns", KeyOf(2, j));
    ASSERT_OK(ref) << when << ": new block " << j << ": " << ref.status();
    EXPECT_EQ(RefBytes(*ref), New(j)) << when << ": new block " << j;
  }
  EXPECT_EQ(NsStats(store).checksum_failures, 0u) << when;
}

TEST(TieredStoreRecoverTest, RebuildWhilePutsAndDeletesRunLosesNothingAndRevivesNoDelete) {
  kvtier::testing::TempDir tmp;
  const std::string dir = tmp.Sub("db");
  {
    auto store = TieredStore::Open(Options(dir));
    ASSERT_OK(store);
    ASSERT_OK((*store)->RegisterNamespace(SmallNamespace("ns", /*write_through=*/true)));
    for (int i = 0; i < kOld; ++i) ASSERT_OK(PutRoot(**store, KeyOf(1, i), Old(i)));
    for (int f = 0; f < kFillers; ++f) ASSERT_OK(PutRoot(**store, KeyOf(3, f), New(f)));
    for (int f = 0; f < kFillers; f += 2) {
      std::vector<std::string> key = {KeyOf(3, f)};
      ASSERT_EQ(*(*store)->Delete("ns", key), 1u);
    }
  }
  std::vector<std::string> lost;
  for (int i = 0; i < kLost; ++i) lost.push_back(KeyOf(1, i));
  ::kvtier::testing::LoseRecordsSilently(dir, 0, lost);

  auto opened = TieredStore::Open(Options(dir));
  ASSERT_OK(opened);
  TieredStore& store = **opened;
  EXPECT_TRUE(absl::IsNotFound(store.Get("ns", KeyOf(1, 5)).status()));
  EXPECT_EQ(NsStats(store).cold.blocks, static_cast<uint64_t>(kOld - kLost + kFillers / 2));

  // Verify: the report, and nothing changed.
  auto verify = store.RecoverCold(ColdRecoverMode::kVerify);
  ASSERT_OK(verify);
  EXPECT_EQ(verify->records_recreated, static_cast<uint64_t>(kLost));
  EXPECT_EQ(verify->records_verified, static_cast<uint64_t>(kOld - kLost + kFillers / 2));
  EXPECT_EQ(verify->deleted_extents, static_cast<uint64_t>(kFillers / 2));
  EXPECT_TRUE(absl::IsNotFound(store.Get("ns", KeyOf(1, 5)).status()));

  // Rebuild while three writers run.
  std::latch start(4);
  std::vector<int> put_failed, delete_failed, reput_failed;
  std::thread putter([&] {
    start.arrive_and_wait();
    for (int j = 0; j < kNew; ++j) {
      if (!PutRoot(store, KeyOf(2, j), New(j)).ok()) put_failed.push_back(j);
    }
  });
  std::thread deleter([&] {
    start.arrive_and_wait();
    for (int i = kDelFrom; i < kDelTo; ++i) {
      std::vector<std::string> key = {KeyOf(1, i)};
      auto n = store.Delete("ns", key);
      if (!n.ok() || *n != 1) delete_failed.push_back(i);
    }
  });
  std::thread reputter([&] {
    start.arrive_and_wait();
    for (int i = 0; i < kRePut; ++i) {
      if (!PutRoot(store, KeyOf(1, i), RePut(i)).ok()) reput_failed.push_back(i);
    }
  });
  start.arrive_and_wait();
  auto rebuild = store.RecoverCold(ColdRecoverMode::kRebuild);
  putter.join();
  deleter.join();
  reputter.join();
  ASSERT_OK(rebuild);
  // How the writers and the reconcile interleaved this run (re-puts before it: fewer
  // re-created, more stale copies).
  std::printf("rebuild: %llu re-created, %llu stale copies, %llu deleted extents seen\n",
              static_cast<unsigned long long>(rebuild->records_recreated),
              static_cast<unsigned long long>(rebuild->stale_copies),
              static_cast<unsigned long long>(rebuild->deleted_extents));
  EXPECT_TRUE(put_failed.empty() && delete_failed.empty() && reput_failed.empty());
  // The lost blocks not put again are re-created; the re-put ones either were (then
  // replaced by the Put) or were refused as older than the store's copy.
  EXPECT_GE(rebuild->records_recreated, static_cast<uint64_t>(kLost - kRePut));
  EXPECT_LE(rebuild->records_recreated, static_cast<uint64_t>(kLost));
  EXPECT_EQ(rebuild->damaged_records, 0u);
  ExpectFinalState(store, "after the online rebuild");
  // The re-created blocks are cold blocks of the index again (Lookup sees them).
  std::vector<std::string> keys = {KeyOf(1, 20)};
  auto lookup = store.Lookup("ns", keys);
  ASSERT_OK(lookup);
  EXPECT_EQ(lookup->prefix_blocks, 1u);

  // A full rebuild from the slab at the next open agrees: nothing deleted comes back.
  opened->reset();
  {
    ColdTierOptions full;
    full.dir = dir;
    full.recover = true;
    ASSERT_OK(RocksDbColdTier::Open(full));
  }
  auto reopened = TieredStore::Open(Options(dir));
  ASSERT_OK(reopened);
  ExpectFinalState(**reopened, "after a full rebuild at open");
}

TEST(TieredStoreRecoverTest, ColdTierWithoutASlabAnswersUnimplemented) {
  StoreOptions o;
  o.hot_capacity_bytes = 1 << 20;
  o.hot_allocator = "malloc";
  auto store = TieredStore::Open(o, std::make_unique<kvtier::testing::FakeColdTier>());
  ASSERT_OK(store);
  EXPECT_TRUE(absl::IsUnimplemented((*store)->RecoverCold(ColdRecoverMode::kVerify).status()));
}

}  // namespace
}  // namespace kvtier::storage
