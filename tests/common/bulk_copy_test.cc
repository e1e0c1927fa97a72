#include "common/bulk_copy.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier::common {
namespace {

// Every size class (memcpy, streaming with a head and a tail) at every alignment of both
// ends: the copy equals the source and no byte around it changes.
TEST(BulkCopyTest, CopiesExactlyAtEverySizeAndAlignment) {
  constexpr size_t kMax = kBulkCopyStreamingBytes + 4096;
  std::mt19937 rng(3);
  std::vector<uint8_t> src(kMax + 64);
  for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> dst(kMax + 128);
  const size_t sizes[] = {0,
                          1,
                          15,
                          63,
                          4096,
                          kBulkCopyStreamingBytes - 1,
                          kBulkCopyStreamingBytes,
                          kBulkCopyStreamingBytes + 1,
                          kBulkCopyStreamingBytes + 63,
                          kBulkCopyStreamingBytes + 4095};
  for (size_t n : sizes) {
    for (size_t src_off : {0, 1, 8, 17}) {
      for (size_t dst_off : {0, 1, 7, 16, 33}) {
        std::fill(dst.begin(), dst.end(), 0xA5);
        BulkCopy(dst.data() + dst_off, src.data() + src_off, n);
        ASSERT_TRUE(
            std::equal(src.begin() + src_off, src.begin() + src_off + n, dst.begin() + dst_off))
            << "n " << n << " src+" << src_off << " dst+" << dst_off;
        for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], 0xA5) << "before, n " << n;
        for (size_t i = dst_off + n; i < dst.size(); ++i)
          ASSERT_EQ(dst[i], 0xA5) << "after, n " << n;
      }
    }
  }
}

}  // namespace
}  // namespace kvtier::common
