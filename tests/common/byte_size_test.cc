#include "common/byte_size.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvtier::common {
namespace {

using ::testing::HasSubstr;

TEST(ByteSizeTest, AcceptsCountsAndBinarySuffixes) {
  EXPECT_EQ(*ParseByteSize("4194304", "x"), 4194304u);
  EXPECT_EQ(*ParseByteSize("0", "x"), 0u);
  EXPECT_EQ(*ParseByteSize("4K", "x"), 4096u);
  EXPECT_EQ(*ParseByteSize("4KiB", "x"), 4096u);
  EXPECT_EQ(*ParseByteSize("4M", "x"), 4ull << 20);
  EXPECT_EQ(*ParseByteSize("256MiB", "x"), 256ull << 20);
  EXPECT_EQ(*ParseByteSize("4G", "x"), 4ull << 30);
  EXPECT_EQ(*ParseByteSize("16GiB", "x"), 16ull << 30);
  EXPECT_EQ(*ParseByteSize("4T", "x"), 4ull << 40);
  EXPECT_EQ(*ParseByteSize("4TiB", "x"), 4ull << 40);
  EXPECT_EQ(*ParseByteSize("16777215T", "x"), 16777215ull << 40);
}

TEST(ByteSizeTest, RefusesDecimalUnitsListingTheAcceptedForms) {
  for (const char* bad : {"4MB", "4KB", "4GB", "4k", "4 M", "M", "", "-1", "4Mi", "4B"}) {
    auto r = ParseByteSize(bad, "--hot-capacity");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("--hot-capacity"));
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("4MiB")) << bad;
  }
}

TEST(ByteSizeTest, RefusesOverflow) {
  EXPECT_FALSE(ParseByteSize("99999999999999T", "x").ok());
  EXPECT_FALSE(ParseByteSize("99999999999999999999", "x").ok());
  EXPECT_FALSE(ParseByteSize("16777216T", "x").ok());
}

}  // namespace
}  // namespace kvtier::common
