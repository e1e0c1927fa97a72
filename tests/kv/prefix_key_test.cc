#include "kv/prefix_key.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::kv {
namespace {

// Expected values computed once, independently, with Python's hashlib following the
// scheme documented in prefix_key.h:
//   seed = sha256(b"kvtier-prefix-sha256-v1\0" + pack("<I", len(ns)) + ns
//                 + pack("<I", len(salt)) + salt)
//   key  = sha256(parent + b"".join(pack("<I", t) for t in block) + extra)[:16]

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

const std::vector<uint32_t> kTokens = {128000, 791, 4062, 14198, 39935,
                                       35308,  927, 279,  16053, 5679};

TEST(PrefixKeyTest, SchemeVersionIsPinned) {
  EXPECT_STREQ(kHashSchemeVersion, "kvtier-prefix-sha256-v1");
}

TEST(PrefixKeyTest, SeedKnownAnswer) {
  EXPECT_EQ(PrefixKeyHex(MakePrefixSeed("llama3-8b@rev1", "tenant-salt")),
            "bca1ae84d18497ca5ebdc1c02f7d5851ff06f146e7f52d47ea265c0c9bdddce2");
  EXPECT_EQ(PrefixKeyHex(MakePrefixSeed("", "")),
            "ce91bb42c035a92ae25a2633f0c7dd4d205efa7912df224c15c4c07c31a19465");
  // Length prefixes keep the namespace / salt boundary unambiguous.
  EXPECT_NE(MakePrefixSeed("ab", "c"), MakePrefixSeed("a", "bc"));
}

TEST(PrefixKeyTest, FullBlocksKnownAnswer) {
  const PrefixSeed seed = MakePrefixSeed("llama3-8b@rev1", "tenant-salt");
  auto keys = ComputePrefixKeys(seed, kTokens, 4);
  ASSERT_OK(keys);
  ASSERT_EQ(keys->size(), 2u);  // the 2 trailing tokens form no key
  EXPECT_EQ(PrefixKeyHex((*keys)[0]), "6356fc4510e080a29bb61b73d61d9c42");
  EXPECT_EQ(PrefixKeyHex((*keys)[1]), "079a18f1cdaa25eddfc70e4521312296");
  EXPECT_EQ(PrefixKeyBytes((*keys)[0]).size(), kPrefixKeyBytes);
}

TEST(PrefixKeyTest, ExtraKeysKnownAnswer) {
  const PrefixSeed seed = MakePrefixSeed("llama3-8b@rev1", "tenant-salt");
  auto keys = ComputePrefixKeys(seed, kTokens, 4, Bytes("lora:42"));
  ASSERT_OK(keys);
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ(PrefixKeyHex((*keys)[0]), "37b63977301e6cd0dab2747a78090c78");
  EXPECT_EQ(PrefixKeyHex((*keys)[1]), "b92b54eb35a29f65a4e2d0c3bc1fc8eb");
}

TEST(PrefixKeyTest, TokensAreLittleEndianUint32) {
  const PrefixSeed seed = MakePrefixSeed("", "");
  const std::vector<uint32_t> tokens = {0xffffffffu, 1};
  auto keys = ComputePrefixKeys(seed, tokens, 1);
  ASSERT_OK(keys);
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ(PrefixKeyHex((*keys)[0]), "f5ffd1ce29dde71893b3617bebd38869");
  EXPECT_EQ(PrefixKeyHex((*keys)[1]), "638de51e05c45a080e1f49c92f89fc8d");
}

TEST(PrefixKeyTest, ChainMatchesBulkAndSharedPrefixesShareKeys) {
  const PrefixSeed seed = MakePrefixSeed("ns", "salt");
  auto keys = ComputePrefixKeys(seed, kTokens, 3);
  ASSERT_OK(keys);
  ASSERT_EQ(keys->size(), 3u);
  PrefixKey k0 = ChainPrefixKey(seed, std::span(kTokens).subspan(0, 3));
  PrefixKey k1 = ChainPrefixKey(k0, std::span(kTokens).subspan(3, 3));
  EXPECT_EQ(k0, (*keys)[0]);
  EXPECT_EQ(k1, (*keys)[1]);
  // A sequence that diverges in block 1 shares key 0 only.
  std::vector<uint32_t> other = kTokens;
  other[4] += 1;
  auto other_keys = ComputePrefixKeys(seed, other, 3);
  ASSERT_OK(other_keys);
  EXPECT_EQ((*other_keys)[0], (*keys)[0]);
  EXPECT_NE((*other_keys)[1], (*keys)[1]);
  EXPECT_NE((*other_keys)[2], (*keys)[2]);  // the chain carries the difference forward
  // Another tenant salt changes every key.
  auto salted = ComputePrefixKeys(MakePrefixSeed("ns", "salt2"), kTokens, 3);
  ASSERT_OK(salted);
  EXPECT_NE((*salted)[0], (*keys)[0]);
}

TEST(PrefixKeyTest, EdgeCases) {
  const PrefixSeed seed = MakePrefixSeed("ns", "");
  auto none = ComputePrefixKeys(seed, std::span(kTokens).subspan(0, 3), 4);
  ASSERT_OK(none);
  EXPECT_TRUE(none->empty());
  auto bad = ComputePrefixKeys(seed, kTokens, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("tokens_per_block"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::kv
