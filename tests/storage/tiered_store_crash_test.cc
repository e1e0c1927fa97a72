// Crash consistency of write-through namespaces: a child process puts blocks and reports
// every acknowledgement through a pipe; the parent SIGKILLs it mid-stream, reopens the
// store, and every acknowledged block must be there with a valid checksum. The loop test
// kills it at random points of Put, Delete, demotion and write-back flushing, rebuilds
// the index from the slab (docs/recovery.md) and checks that no deleted block comes back.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/rocksdb_cold_tier.h"
#include "storage/tiered_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::storage {
namespace {

using ::kvtier::storage::testing::KeyOf;
using ::kvtier::storage::testing::MakePayload;
using ::kvtier::storage::testing::RefBytes;
using ::kvtier::storage::testing::SmallLayout;
using ::kvtier::storage::testing::SmallNamespace;

constexpr uint32_t kBlocks = 100000;  // far more than the parent waits for

StoreOptions CrashOptions(const std::string& dir) {
  StoreOptions o;
  o.data_dir = dir;
  o.hot_capacity_bytes = 2 << 20;
  o.hot_allocator = "malloc";
  return o;
}

// Runs in the forked child: never returns.
[[noreturn]] void ChildWriter(const std::string& dir, int fd) {
  auto store = TieredStore::Open(CrashOptions(dir));
  if (!store.ok() || !(*store)->RegisterNamespace(SmallNamespace("wt", true)).ok()) _exit(2);
  for (uint32_t i = 0; i < kBlocks; ++i) {
    std::string payload = MakePayload(SmallLayout(), i % 64, i);
    std::string key = KeyOf(7, i);
    std::string parent = i == 0 ? "" : KeyOf(7, i - 1);
    BlockPut put{key, parent, i, payload};  // a chain: block i follows block i-1
    if (!(*store)->Put("wt", {&put, 1}).ok()) _exit(3);
    if (write(fd, &i, sizeof(i)) != sizeof(i)) _exit(4);
  }
  _exit(0);
}

TEST(TieredStoreCrashTest, AcknowledgedWriteThroughBlocksSurviveSigkill) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    ChildWriter(db, fds[1]);
  }
  close(fds[1]);
  // Read acknowledgements until a few hundred blocks are in, then kill mid-stream.
  int64_t last_acked = -1;
  uint32_t ack;
  while (last_acked < 300) {
    ssize_t n = read(fds[0], &ack, sizeof(ack));
    ASSERT_EQ(n, static_cast<ssize_t>(sizeof(ack))) << "child exited early";
    ASSERT_EQ(static_cast<int64_t>(ack), last_acked + 1);
    last_acked = ack;
  }
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  // Acknowledgements already in the pipe count too.
  while (read(fds[0], &ack, sizeof(ack)) == static_cast<ssize_t>(sizeof(ack))) last_acked = ack;
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child was not killed (status " << status << ")";

  auto opened = TieredStore::Open(CrashOptions(db));
  ASSERT_OK(opened);
  auto& store = *opened;
  ASSERT_OK(store->GetNamespace("wt"));
  for (uint32_t i = 0; i <= static_cast<uint32_t>(last_acked); ++i) {
    auto ref = store->Get("wt", KeyOf(7, i));
    ASSERT_OK(ref) << "acknowledged block " << i << " of " << last_acked << ": "
                          << ref.status();
    ASSERT_EQ(RefBytes(*ref), MakePayload(SmallLayout(), i % 64, i)) << i;
  }
  EXPECT_EQ(store->Stats().namespaces[0].checksum_failures, 0u);
  // The whole acknowledged chain is one resident prefix.
  std::vector<std::string> keys;
  for (uint32_t i = 0; i <= static_cast<uint32_t>(last_acked); ++i) keys.push_back(KeyOf(7, i));
  auto r = store->Lookup("wt", keys);
  ASSERT_OK(r);
  EXPECT_EQ(r->prefix_blocks, keys.size());
}

TEST(TieredStoreCrashTest, DamagedWalRecordCostsNoBlock) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  std::vector<std::string> payloads;
  {
    auto store = TieredStore::Open(CrashOptions(db));
    ASSERT_OK(store);
    ASSERT_OK((*store)->RegisterNamespace(SmallNamespace("wt", true)));
    payloads = testing::PutChain(store->get(), 8, 64, "wt");  // in the WAL, not in SSTs
  }
  ASSERT_TRUE(testing::FlipByteInWal(db, KeyOf(8, 31)));  // block 31's index record

  auto store = TieredStore::Open(CrashOptions(db));
  ASSERT_OK(store);
  // RocksDB drops the damaged record and whatever else starts in the rest of its 32 KiB
  // log block; the cold tier notices and rebuilds its index from the slab, where every
  // block is intact (docs/recovery.md).
  for (uint32_t i = 0; i < 64; ++i) {
    auto ref = (*store)->Get("wt", KeyOf(8, i));
    ASSERT_OK(ref) << i << ": " << ref.status();
    EXPECT_EQ(RefBytes(*ref), payloads[i]) << i;
  }
  EXPECT_EQ((*store)->Stats().namespaces[0].checksum_failures, 0u);
  EXPECT_EQ((*store)->Stats().namespaces[0].cold.blocks, 64u);
  // The loss and the rebuild are reported, not silent.
  const ColdTierRecovery r = (*store)->Stats().cold_recovery;
  EXPECT_GE(r.wal_dropped_ranges, 1u);
  EXPECT_GT(r.wal_dropped_bytes, 0u);
  EXPECT_TRUE(r.slab_scanned);
  EXPECT_GE(r.records_recreated, 1u);
}

// What the crash-loop child reports through its pipe, each after the call returned
// (kDeleteStarted before it is made).
enum Op : uint32_t { kPutThrough = 1, kDeleteStarted, kDeleted, kPutBack };
struct Ack {
  uint32_t op;
  uint32_t id;
};

std::string ThroughKey(uint32_t id) { return KeyOf(21, id); }
std::string BackKey(uint32_t id) { return KeyOf(22, id); }
std::string ThroughPayload(uint32_t id) { return MakePayload(SmallLayout(), 0, id); }
std::string BackPayload(uint32_t id) { return MakePayload(SmallLayout(), 0, 1000000 + id); }

StoreOptions LoopOptions(const std::string& dir) {
  StoreOptions o = CrashOptions(dir);
  o.hot_capacity_bytes = 32 * testing::SlotBytes();  // demotion all the time
  o.max_unflushed_blocks = 8;                        // write-back debt flushed all the time
  o.cold_capacity_bytes = 256ull << 20;              // no cold eviction: nothing else deletes
  return o;
}

// Runs in the forked child: puts write-through and write-back blocks, deletes some
// write-through ones, flushes the write-back namespace now and then; never returns.
[[noreturn]] void LoopChild(const std::string& dir, int fd, uint32_t first_id,
                            std::vector<uint32_t> live, uint64_t seed) {
  auto store = TieredStore::Open(LoopOptions(dir));
  if (!store.ok()) _exit(2);
  if (first_id == 0) {
    if (!(*store)->RegisterNamespace(SmallNamespace("wt", true)).ok()) _exit(2);
    if (!(*store)->RegisterNamespace(SmallNamespace("wb", false)).ok()) _exit(2);
  }
  std::mt19937_64 rng(seed);
  auto ack = [fd](Op op, uint32_t id) {
    const Ack a{op, id};
    if (write(fd, &a, sizeof(a)) != sizeof(a)) _exit(4);
  };
  for (uint32_t id = first_id;; ++id) {
    const uint64_t r = rng() % 10;
    if (r < 5 || live.empty()) {
      const std::string key = ThroughKey(id), payload = ThroughPayload(id);
      BlockPut put{key, "", 0, payload};
      if (!(*store)->Put("wt", {&put, 1}).ok()) _exit(3);
      live.push_back(id);
      ack(kPutThrough, id);
    } else if (r < 7) {
      const size_t at = rng() % live.size();
      const uint32_t victim = live[at];
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(at));
      ack(kDeleteStarted, victim);
      const std::string key = ThroughKey(victim);
      if (!(*store)->Delete("wt", {&key, 1}).ok()) _exit(3);
      ack(kDeleted, victim);
    } else {
      const std::string key = BackKey(id), payload = BackPayload(id);
      BlockPut put{key, "", 0, payload};
      if (!(*store)->Put("wb", {&put, 1}).ok()) _exit(3);
      ack(kPutBack, id);
      if (id % 40 == 0) (void)(*store)->Flush("wb");
    }
  }
}

TEST(TieredStoreCrashTest, SigkillLoopWithSlabScanServesAcknowledgedAndNeverDeletedBlocks) {
  kvtier::testing::TempDir dir;
  const std::string db = dir.Sub("db");
  std::mt19937_64 rng(33);
  std::set<uint32_t> through, deleting, deleted, back;
  std::vector<uint32_t> live;
  uint32_t next_id = 0;
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const uint32_t first_id = next_id;
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      LoopChild(db, fds[1], first_id, live, rng());
    }
    close(fds[1]);
    // Kill after a random number of acknowledgements, then count what was in the pipe.
    const int kill_after = 30 + static_cast<int>(rng() % 400);
    Ack a;
    auto apply = [&](const Ack& x) {
      next_id = std::max(next_id, x.id + 1);
      switch (x.op) {
        case kPutThrough: through.insert(x.id); live.push_back(x.id); break;
        case kDeleteStarted:
          deleting.insert(x.id);
          live.erase(std::find(live.begin(), live.end(), x.id));
          break;
        case kDeleted: deleted.insert(x.id); break;
        case kPutBack: back.insert(x.id); break;
        default: FAIL() << "bad ack " << x.op;
      }
    };
    for (int n = 0; n < kill_after; ++n) {
      ASSERT_EQ(read(fds[0], &a, sizeof(a)), static_cast<ssize_t>(sizeof(a))) << "child exited";
      apply(a);
    }
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    while (read(fds[0], &a, sizeof(a)) == static_cast<ssize_t>(sizeof(a))) apply(a);
    close(fds[0]);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child was not killed (status " << status << ")";

    // Restart with the slab scan (what kvtierd --recover does), then the store.
    {
      ColdTierOptions co{db};
      co.recover = true;
      auto cold = RocksDbColdTier::Open(co);
      ASSERT_OK(cold);
      EXPECT_TRUE((*cold)->recovery().slab_scanned);
    }
    auto store = TieredStore::Open(LoopOptions(db));
    ASSERT_OK(store);
    uint64_t served = 0;
    for (uint32_t id : through) {
      auto ref = (*store)->Get("wt", ThroughKey(id));
      if (deleted.contains(id)) {
        EXPECT_TRUE(absl::IsNotFound(ref.status())) << "deleted block " << id << " came back";
        continue;
      }
      if (!ref.ok()) {
        EXPECT_TRUE(deleting.contains(id)) << "acknowledged block " << id << ": "
                                           << ref.status();
        // A delete under way when the kill came: gone now, and it must stay gone.
        if (deleting.contains(id)) deleted.insert(id);
        continue;
      }
      ASSERT_EQ(RefBytes(*ref), ThroughPayload(id)) << "wrong bytes for block " << id;
      ++served;
    }
    for (uint32_t id : back) {  // write-back: may be lost, never wrong
      auto ref = (*store)->Get("wb", BackKey(id));
      if (ref.ok()) {
        ASSERT_EQ(RefBytes(*ref), BackPayload(id)) << "wrong bytes for " << id;
      }
    }
    EXPECT_GT(served, 0u);
    for (const auto& ns : (*store)->Stats().namespaces) EXPECT_EQ(ns.checksum_failures, 0u);
    // A block whose delete was under way and that survived is live again for the model.
    for (uint32_t id : deleting) {
      if (!deleted.contains(id) && std::find(live.begin(), live.end(), id) == live.end()) {
        live.push_back(id);
      }
    }
    deleting.clear();
  }
}

}  // namespace
}  // namespace kvtier::storage
