#include "storage/slab_file.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::storage {
namespace {

constexpr uint64_t kUnit = SlabFile::kUnitBytes;

TEST(SlabFileTest, BestFitReuseMergesAndRespectsTheLimit) {
  kvtier::testing::TempDir dir;
  auto slab = SlabFile::Open(dir.Sub("slab"), 10 * kUnit);
  ASSERT_OK(slab);
  SlabFile& s = **slab;
  EXPECT_EQ(s.Allocate(1), 0u);                 // rounds up to one unit
  EXPECT_EQ(s.Allocate(3 * kUnit), kUnit);      // [1, 4)
  EXPECT_EQ(s.Allocate(kUnit), 4 * kUnit);      // [4, 5)
  EXPECT_EQ(s.Allocate(2 * kUnit), 5 * kUnit);  // [5, 7)
  EXPECT_EQ(s.end_bytes(), 7 * kUnit);
  s.Free(kUnit, 3 * kUnit);      // hole of 3 at 1
  s.Free(5 * kUnit, 2 * kUnit);  // the top: the end shrinks back to 5
  EXPECT_EQ(s.end_bytes(), 5 * kUnit);
  EXPECT_EQ(s.used_bytes(), 2 * kUnit);
  EXPECT_EQ(s.Allocate(2 * kUnit), kUnit);      // best fit: the hole, not the end
  EXPECT_EQ(s.Allocate(kUnit), 3 * kUnit);      // the rest of the hole
  EXPECT_EQ(s.Allocate(5 * kUnit), 5 * kUnit);  // [5, 10): exactly the limit
  EXPECT_EQ(s.Allocate(1), std::nullopt);       // full
  s.Free(kUnit, 2 * kUnit);
  s.Free(3 * kUnit, kUnit);
  s.Free(0, 1);  // merges with [1, 4) and [4, 5) once that goes too
  s.Free(4 * kUnit, kUnit);
  EXPECT_EQ(s.Allocate(5 * kUnit), 0u);  // one merged range of 5
  EXPECT_EQ(s.used_bytes(), 10 * kUnit);
}

TEST(SlabFileTest, ClaimTakesExactlyAFreeExtentAndNothingInUse) {
  kvtier::testing::TempDir dir;
  auto slab = SlabFile::Open(dir.Sub("slab"), 0);
  ASSERT_OK(slab);
  SlabFile& s = **slab;
  ASSERT_OK(s.Reset({{0, kUnit}, {4 * kUnit, kUnit}}));  // free: [1, 4)
  EXPECT_FALSE(s.IsFree(0, 1));
  EXPECT_TRUE(s.IsFree(kUnit, 3 * kUnit));
  EXPECT_FALSE(s.IsFree(2 * kUnit, 3 * kUnit));  // runs into [4, 5)
  EXPECT_TRUE(s.IsFree(9 * kUnit, kUnit));       // past the end
  EXPECT_FALSE(s.Claim(3 * kUnit, 2 * kUnit));   // overlaps an allocation
  EXPECT_FALSE(s.Claim(kUnit + 1, 1));           // misaligned
  EXPECT_TRUE(s.Claim(2 * kUnit, 1));            // the middle of the hole
  EXPECT_FALSE(s.Claim(2 * kUnit, 1));           // now in use
  EXPECT_EQ(s.used_bytes(), 3 * kUnit);
  EXPECT_EQ(s.Allocate(kUnit), kUnit);           // the two halves stay free
  EXPECT_EQ(s.Allocate(kUnit), 3 * kUnit);
  EXPECT_TRUE(s.Claim(8 * kUnit, 2 * kUnit));    // past the end: [5, 8) becomes free
  EXPECT_EQ(s.end_bytes(), 10 * kUnit);
  EXPECT_EQ(s.Allocate(3 * kUnit), 5 * kUnit);
  EXPECT_EQ(s.Allocate(kUnit), 10 * kUnit);
  s.Free(8 * kUnit, 2 * kUnit);
  EXPECT_TRUE(s.IsFree(8 * kUnit, 2 * kUnit));
}

TEST(SlabFileTest, ResetRebuildsFreeGapsAndWritesReadBack) {
  kvtier::testing::TempDir dir;
  auto slab = SlabFile::Open(dir.Sub("slab"), 0);
  ASSERT_OK(slab);
  SlabFile& s = **slab;
  ASSERT_OK(s.Reset({{kUnit, 100}, {4 * kUnit, kUnit + 1}}));
  EXPECT_EQ(s.end_bytes(), 6 * kUnit);
  EXPECT_EQ(s.used_bytes(), 3 * kUnit);
  EXPECT_EQ(s.Allocate(kUnit), 0u);             // the gap before the first extent
  EXPECT_EQ(s.Allocate(2 * kUnit), 2 * kUnit);  // the gap [2, 4)
  EXPECT_EQ(s.Allocate(kUnit), 6 * kUnit);      // unbounded: from the end
  EXPECT_TRUE(absl::IsInvalidArgument(s.Reset({{0, kUnit + 1}, {kUnit, 1}})));  // overlap

  ASSERT_OK(s.Write(3 * kUnit, "hello", /*sync=*/true));
  std::string out;
  ASSERT_OK(s.Read(3 * kUnit, 5, &out));
  EXPECT_EQ(out, "hello");
  EXPECT_TRUE(absl::IsDataLoss(s.Read(3 * kUnit, 100 * kUnit, &out)));  // past the end
}

}  // namespace
}  // namespace kvtier::storage
