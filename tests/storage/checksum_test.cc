#include "storage/checksum.h"

#include <xxhash.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier::storage {
namespace {

uint64_t Checksum64(std::string_view s) {
  return PayloadChecksum(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()),
                                                  s.size()));
}
uint64_t Checksum64(std::span<const uint8_t> s) { return PayloadChecksum(s); }

TEST(ChecksumTest, MatchesPublishedXxh3Vectors) {
  // XXH3_64bits, seed 0: the upstream empty-input anchor and "a" / "abc".
  EXPECT_EQ(Checksum64(std::string_view("")), 0x2d06800538d394c2ull);
  EXPECT_EQ(Checksum64(std::string_view("a")), 0xe6c632b61e964e1full);
  EXPECT_EQ(Checksum64(std::string_view("abc")), 0x78af5f94892f3950ull);

  // Vectors from llvm-project unittests/Support/xxhashTest.cpp (xorshift-generated
  // buffer), covering every XXH3 length class up to the multi-block path.
  constexpr size_t kSize = 2243;
  std::vector<uint8_t> a(kSize);
  uint64_t x = 1;
  for (size_t i = 0; i < kSize; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    a[i] = static_cast<uint8_t>(x);
  }
  const std::pair<size_t, uint64_t> vectors[] = {
      {0, 0x2d06800538d394c2},    {1, 0xd0d496e05c553485},    {3, 0x6ea2d59aca5c3778},
      {4, 0xbf65290914e80242},    {8, 0xabc1413da6cd0209},    {9, 0x8bc89400bfed51f6},
      {16, 0x7e46916754d7c9b8},   {17, 0xed4be912ba5f836d},   {128, 0x06a146ee9a2da378},
      {129, 0xbc7138129bf065da},  {403, 0xcefeb3ffa532ad8c},  {2048, 0x330ce110cbb79eae},
      {2243, 0x0979f786a24edde7},
  };
  for (const auto& [len, want] : vectors) {
    EXPECT_EQ(Checksum64(std::span<const uint8_t>(a.data(), len)), want) << "len " << len;
  }
}

TEST(ChecksumTest, BlockSizedPayloadsMatchThePortableEntryPoint) {
  // PayloadChecksum takes libxxhash's run-time dispatched (AVX2 / AVX-512) path on x86-64;
  // over payloads of many stripes and blocks it must equal the plain XXH3_64bits.
  std::vector<uint8_t> a((1 << 20) + 7);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (uint8_t& b : a) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  for (size_t len : {size_t{1} << 20, a.size(), size_t{65536} + 3, size_t{4095}}) {
    EXPECT_EQ(Checksum64(std::span<const uint8_t>(a.data(), len)), XXH3_64bits(a.data(), len))
        << "len " << len;
  }
}

TEST(ChecksumTest, DetectsSingleBitFlip) {
  std::string data(4096, 'k');
  const uint64_t before = Checksum64(data);
  data[1234] ^= 0x10;
  EXPECT_NE(Checksum64(data), before);
}

}  // namespace
}  // namespace kvtier::storage
