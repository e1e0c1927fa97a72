#include "storage/cold_meta_file.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::storage {
namespace {

ColdMeta Sample() {
  ColdMeta m;
  m.slab_format = 2;
  m.seq_ceiling = 1ull << 40;
  m.clean = true;
  m.blocks = 123456;
  m.namespaces = {{1, "spec-one"}, {7, std::string("\0bin\xff", 5)}, {65535, ""}};
  return m;
}

void ExpectSame(const ColdMeta& a, const ColdMeta& b) {
  EXPECT_EQ(a.slab_format, b.slab_format);
  EXPECT_EQ(a.seq_ceiling, b.seq_ceiling);
  EXPECT_EQ(a.clean, b.clean);
  EXPECT_EQ(a.blocks, b.blocks);
  EXPECT_EQ(a.namespaces, b.namespaces);
}

TEST(ColdMetaFileTest, RoundTripsThroughTheFile) {
  kvtier::testing::TempDir dir;
  const std::string path = dir.Sub("cold.meta");
  auto absent = ReadColdMetaFile(path);
  ASSERT_OK(absent);
  EXPECT_FALSE(absent->has_value());
  ASSERT_OK(WriteColdMetaFile(path, Sample()));
  auto back = ReadColdMetaFile(path);
  ASSERT_TRUE(back.ok() && back->has_value()) << back.status();
  ExpectSame(**back, Sample());
  // Replacing leaves no temporary file behind.
  ColdMeta next = Sample();
  next.namespaces.erase(7);
  ASSERT_OK(WriteColdMetaFile(path, next));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  ExpectSame(**ReadColdMetaFile(path), next);
}

TEST(ColdMetaFileTest, EveryFlippedBitAndEveryTruncationIsDataLoss) {
  const std::string bytes = EncodeColdMeta(Sample());
  ExpectSame(*ParseColdMeta(bytes), Sample());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      const auto parsed = ParseColdMeta(bad);
      ASSERT_TRUE(absl::IsDataLoss(parsed.status())) << "byte " << i << " bit " << bit;
    }
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_TRUE(absl::IsDataLoss(ParseColdMeta(bytes.substr(0, n)).status())) << n;
  }
}

}  // namespace
}  // namespace kvtier::storage
