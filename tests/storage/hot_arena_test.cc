#include "storage/hot_arena.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::storage {
namespace {

TEST(HotArenaTest, AllocatesWithinCapacityAndCoalesces) {
  auto arena = HotArena::Create(64 * HotArena::kAlignment, "malloc");
  ASSERT_OK(arena);
  HotArena& a = **arena;
  EXPECT_STREQ(a.allocator_name(), "malloc");
  EXPECT_EQ(a.capacity_bytes(), 64 * HotArena::kAlignment);
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 64; ++i) {
    auto off = a.Allocate(100);  // rounds up to one alignment unit
    ASSERT_TRUE(off.has_value()) << i;
    EXPECT_EQ(*off % HotArena::kAlignment, 0u);
    offsets.push_back(*off);
  }
  EXPECT_EQ(a.used_bytes(), a.capacity_bytes());
  EXPECT_FALSE(a.Allocate(1).has_value());
  // Free every other slot: no room for two units until neighbours coalesce.
  for (int i = 0; i < 64; i += 2) a.Free(offsets[i], 100);
  EXPECT_FALSE(a.Allocate(2 * HotArena::kAlignment).has_value());
  a.Free(offsets[1], 100);
  auto two = a.Allocate(3 * HotArena::kAlignment);
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(*two, offsets[0]);
  // Writing the whole slot is fine (the memory is touched and ours).
  std::memset(a.base() + *two, 0xab, 3 * HotArena::kAlignment);
}

TEST(HotArenaTest, RandomAllocFreeNeverOverlapsOrExceedsCapacity) {
  auto arena = HotArena::Create(1 << 20, "auto");
  ASSERT_OK(arena);
  HotArena& a = **arena;
  EXPECT_TRUE(std::string(a.allocator_name()) == "mlock" ||
              std::string(a.allocator_name()) == "malloc" ||
              std::string(a.allocator_name()) == "cuda");
  std::mt19937_64 rng(7);
  std::vector<std::pair<uint64_t, uint64_t>> live;
  std::vector<uint8_t> owner(a.capacity_bytes() / HotArena::kAlignment, 0);
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || rng() % 2 == 0) {
      const uint64_t size = 1 + rng() % (32 << 10);
      auto off = a.Allocate(size);
      if (!off) continue;
      const uint64_t units = HotArena::RoundUp(size) / HotArena::kAlignment;
      for (uint64_t u = 0; u < units; ++u) {
        ASSERT_EQ(owner[*off / HotArena::kAlignment + u], 0) << "overlap at step " << step;
        owner[*off / HotArena::kAlignment + u] = 1;
      }
      live.emplace_back(*off, size);
    } else {
      const size_t i = rng() % live.size();
      const auto [off, size] = live[i];
      for (uint64_t u = 0; u < HotArena::RoundUp(size) / HotArena::kAlignment; ++u) {
        owner[off / HotArena::kAlignment + u] = 0;
      }
      a.Free(off, size);
      live[i] = live.back();
      live.pop_back();
    }
    ASSERT_LE(a.used_bytes(), a.capacity_bytes());
  }
  for (const auto& [off, size] : live) a.Free(off, size);
  EXPECT_EQ(a.used_bytes(), 0u);
  EXPECT_EQ(a.LargestFree(), a.capacity_bytes());
}

TEST(HotArenaTest, RejectsBadOptions) {
  EXPECT_TRUE(absl::IsInvalidArgument(HotArena::Create(0, "auto").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(HotArena::Create(4096, "gpu").status()));
}

}  // namespace
}  // namespace kvtier::storage
