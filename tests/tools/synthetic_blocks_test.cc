// Tests for tools/synthetic_blocks.h: generated raw blocks are deterministic per
// (seed, block index) and have the layout's size.
#include "tools/synthetic_blocks.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "kv/layout.h"

namespace kvtier::tools {
namespace {

TEST(SyntheticBlocksTest, DeterministicAndSeedDependent) {
  kv::Layout layout;
  layout.num_layers = 2;
  EXPECT_EQ(SyntheticRawBlock(layout, 1, 0), SyntheticRawBlock(layout, 1, 0));
  EXPECT_NE(SyntheticRawBlock(layout, 1, 0), SyntheticRawBlock(layout, 2, 0));
  EXPECT_NE(SyntheticRawBlock(layout, 1, 0), SyntheticRawBlock(layout, 1, 1));
  EXPECT_EQ(SyntheticRawBlock(layout, 1, 0).size(), layout.BytesPerBlock());
}

TEST(SyntheticBlocksTest, SharedPrefixIsSeedIndependent) {
  const auto a = SyntheticTokens(1, 6, 3, 16);
  const auto b = SyntheticTokens(2, 6, 3, 16);
  ASSERT_EQ(a.size(), 6u * 16);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 3 * 16, b.begin()));
  EXPECT_FALSE(std::equal(a.begin() + 3 * 16, a.end(), b.begin() + 3 * 16));
}

}  // namespace
}  // namespace kvtier::tools
