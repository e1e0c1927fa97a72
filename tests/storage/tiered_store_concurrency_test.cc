// Several threads putting, getting, looking up, pinning and deleting under eviction
// pressure with background demotion. Runs under ASAN+UBSAN in CI (name contains
// "concurren"). Every successful Get must return exactly the bytes that were put, and a
// read handle must stay valid while the block is demoted and its slot reused.
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/hot_arena.h"
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

constexpr int kThreads = 4;
constexpr int kChainsPerThread = 30;
constexpr int kChainLen = 4;

class ConcurrencyTest : public ::testing::TestWithParam<bool> {};  // write_through

TEST_P(ConcurrencyTest, ParallelOpsUnderEvictionPressure) {
  kvtier::testing::TempDir dir;
  const kv::Layout layout = SmallLayout();
  StoreOptions o = testing::TestStoreOptions(dir.Sub("db"), /*hot_blocks=*/24,
                                             /*cold_blocks=*/200, /*clock=*/nullptr);
  o.background_demotion = true;
  o.hot_allocator = "malloc";
  std::unique_ptr<TieredStore> opened = testing::OpenStore(o);
  ASSERT_NE(opened, nullptr);
  TieredStore* store = opened.get();
  ASSERT_OK(store->RegisterNamespace(SmallNamespace("ns", GetParam())));

  // payloads[seq][i]: seq = thread * kChainsPerThread + chain.
  std::vector<std::vector<std::string>> payloads(kThreads * kChainsPerThread);
  for (size_t s = 0; s < payloads.size(); ++s) {
    for (int i = 0; i < kChainLen; ++i) payloads[s].push_back(MakePayload(layout, i, s));
  }
  std::atomic<int> published{0};  // chains fully put by anyone (approximate)
  std::atomic<uint64_t> hits{0}, mismatches{0};
  common::Mutex errors_mu;
  std::vector<std::string> errors;  // "op: status" of every failed call
  auto fail = [&](const char* op, const absl::Status& status) {
    common::MutexLock lock(&errors_mu);
    errors.push_back(absl::StrCat(op, ": ", status.ToString()));
  };

  auto worker = [&](int t) {
    std::mt19937_64 rng(99 + t);
    std::vector<std::pair<BlockRef, std::string>> held;
    for (int c = 0; c < kChainsPerThread; ++c) {
      const uint64_t seq = t * kChainsPerThread + c;
      std::vector<std::string> keys;
      std::vector<BlockPut> puts;
      for (int i = 0; i < kChainLen; ++i) keys.push_back(KeyOf(seq, i));
      for (int i = 0; i < kChainLen; ++i) {
        puts.push_back(BlockPut{keys[i], i == 0 ? std::string_view() : keys[i - 1],
                                static_cast<uint32_t>(i), payloads[seq][i]});
      }
      if (auto st = store->Put("ns", puts); !st.ok()) fail("put", st);
      published++;
      for (int g = 0; g < 6; ++g) {
        const uint64_t s = rng() % payloads.size();
        const int i = static_cast<int>(rng() % kChainLen);
        auto ref = store->Get("ns", KeyOf(s, i));
        if (ref.ok()) {
          hits++;
          if (RefBytes(*ref) != payloads[s][i]) mismatches++;
          if (rng() % 4 == 0) held.emplace_back(*ref, payloads[s][i]);
        } else if (!absl::IsNotFound(ref.status())) {
          fail("get", ref.status());
        }
      }
      // Handles held across other threads' evictions still show their bytes.
      if (held.size() > 8 || rng() % 5 == 0) {
        for (auto& [ref, want] : held) {
          if (RefBytes(ref) != want) mismatches++;
        }
        held.clear();
      }
      const uint64_t s = rng() % payloads.size();
      std::vector<std::string> chain;
      for (int i = 0; i < kChainLen; ++i) chain.push_back(KeyOf(s, i));
      if (auto r = store->Lookup("ns", chain); !r.ok()) fail("lookup", r.status());
      switch (rng() % 8) {
        case 0:
          if (auto r = store->Pin("ns", {chain.data(), 1}, 5); !r.ok()) fail("pin", r.status());
          break;
        case 1:
          if (auto r = store->Unpin("ns", {chain.data(), 1}); !r.ok()) fail("unpin", r.status());
          break;
        case 2:
          if (auto r = store->Delete("ns", {chain.data() + kChainLen - 1, 1}); !r.ok()) {
            fail("delete", r.status());
          }
          break;
        case 3: {
          std::vector<float> scores(chain.size(), 0.5f);
          if (auto st = store->ReportScores("ns", chain, scores); !st.ok()) fail("scores", st);
          break;
        }
        case 4:
          if (t == 0) {
            if (auto st = store->Flush("ns"); !st.ok()) fail("flush", st);
          }
          break;
        default:
          break;
      }
      (void)store->Stats();
    }
    for (auto& [ref, want] : held) {
      if (RefBytes(ref) != want) mismatches++;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();

  EXPECT_EQ(mismatches.load(), 0u);
  EXPECT_THAT(errors, ::testing::IsEmpty());
  EXPECT_GT(hits.load(), 0u);
  // The background demoter may still be finishing a demotion, whose block is written to
  // cold before the cold capacity is enforced (seen once under the sanitizers: 1.5
  // extents over): let it settle.
  StoreStats stats = store->Stats();
  for (int i = 0; i < 500 && stats.cold_used_bytes > stats.cold_capacity_bytes; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stats = store->Stats();
  }
  EXPECT_LE(stats.hot_used_bytes, stats.hot_capacity_bytes);
  EXPECT_LE(stats.cold_used_bytes, stats.cold_capacity_bytes);
  ASSERT_EQ(stats.namespaces.size(), 1u);
  EXPECT_GT(stats.namespaces[0].demotions + stats.namespaces[0].evictions_hot_capacity, 0u);
  // Accounting agrees with a full scan of what is resident.
  uint64_t resident = 0;
  for (size_t s = 0; s < payloads.size(); ++s) {
    std::vector<std::string> chain;
    for (int i = 0; i < kChainLen; ++i) chain.push_back(KeyOf(s, i));
    auto r = store->Lookup("ns", chain);
    ASSERT_OK(r);
    for (Tier tier : r->tiers) resident += tier != Tier::kNone;
    for (int i = 0; i < kChainLen; ++i) {
      auto ref = store->Get("ns", chain[i]);
      if (ref.ok()) {
        EXPECT_EQ(RefBytes(*ref), payloads[s][i]);
      }
    }
  }
  stats = store->Stats();
  const NamespaceStats& ns = stats.namespaces[0];
  uint64_t hot_and_cold_overlap = ns.hot.blocks + ns.cold.blocks - resident;
  EXPECT_LE(hot_and_cold_overlap, ns.hot.blocks);  // a block may have a copy in both
  EXPECT_GE(ns.hot.blocks + ns.cold.blocks, resident);
}

INSTANTIATE_TEST_SUITE_P(WriteModes, ConcurrencyTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "write_through" : "write_back";
                         });

}  // namespace
}  // namespace kvtier::storage
