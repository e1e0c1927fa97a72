#include "storage/slab_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

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

// ReadV fills its spans in order from the offset, across more spans than one preadv
// takes (IOV_MAX); a read past the end of the file is DATA_LOSS.
TEST(SlabFileTest, ReadVFillsManySpansInOrder) {
  kvtier::testing::TempDir dir;
  auto slab = SlabFile::Open(dir.Sub("slab"), 0);
  ASSERT_OK(slab);
  SlabFile& s = **slab;
  std::string data(3000 * 7 + 5, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 % 251);
  ASSERT_OK(s.Write(0, data, false));
  std::vector<std::string> got(3000, std::string(7, '\0'));
  std::vector<std::span<uint8_t>> spans;
  for (std::string& g : got) spans.emplace_back(reinterpret_cast<uint8_t*>(g.data()), g.size());
  ASSERT_OK(s.ReadV(5, spans));
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], data.substr(5 + 7 * i, 7)) << i;
  std::string past(10, '\0');
  const std::vector<std::span<uint8_t>> one = {
      std::span<uint8_t>(reinterpret_cast<uint8_t*>(past.data()), past.size())};
  EXPECT_TRUE(absl::IsDataLoss(s.ReadV(data.size() - 4, one)));
}

// ReadDirectAt reads whole aligned pages past the page cache (fewer bytes only at the end
// of the file); Cached tells a dropped range from a cached one where cachestat(2) exists.
TEST(SlabFileTest, DirectReadsAndTheCachedProbe) {
  kvtier::testing::TempDir dir;
  auto slab = SlabFile::Open(dir.Sub("slab"), 0);
  ASSERT_OK(slab);
  SlabFile& s = **slab;
  constexpr size_t kPage = SlabFile::kDirectAlign;
  std::string data(5 * kPage + 100, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 % 253);
  ASSERT_OK(s.Write(0, data, true));
  EXPECT_TRUE(s.Cached(0, data.size()));  // just written
  if (!s.has_direct_reads()) GTEST_SKIP() << "no O_DIRECT on this file system";
  {
    const int fd = open(dir.Sub("slab").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    close(fd);
  }
  SlabFile::AlignedBuffer buffer;
  ASSERT_OK(SlabFile::Reserve(&buffer, 8 * kPage));
  auto n = s.ReadDirectAt(kPage, buffer.data, 2 * kPage);
  ASSERT_OK(n);
  EXPECT_EQ(*n, 2 * kPage);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(buffer.data), 2 * kPage),
            data.substr(kPage, 2 * kPage));
  // Past the end: the last partial page only.
  auto tail = s.ReadDirectAt(4 * kPage, buffer.data, 4 * kPage);
  ASSERT_OK(tail);
  EXPECT_EQ(*tail, kPage + 100);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(buffer.data), kPage + 100), data.substr(4 * kPage));
  // A direct read leaves the pages out of the page cache; a buffered one brings them in.
  // (Only where cachestat exists: elsewhere Cached is always true.)
  if (!s.Cached(4 * kPage, kPage)) {
    std::string out;
    ASSERT_OK(s.Read(0, data.size(), &out));
    EXPECT_EQ(out, data);
    EXPECT_TRUE(s.Cached(0, data.size()));
  }
}

}  // namespace
}  // namespace kvtier::storage
