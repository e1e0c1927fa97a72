#include "storage/mmap_allocator.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"

namespace kvtier::storage {
namespace {

uint64_t RssBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

TEST(MmapAllocatorTest, LargeArraysAreMappedAndLeaveTheRssWhenFreed) {
  MmapAllocator<uint32_t> alloc;
  constexpr size_t kCount = (size_t{64} << 20) / sizeof(uint32_t);
  uint32_t* a = alloc.allocate(kCount);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % sysconf(_SC_PAGESIZE), 0u);
  std::memset(a, 0xab, kCount * sizeof(uint32_t));
  EXPECT_EQ(a[kCount - 1], 0xababababu);
  const uint64_t touched = RssBytes();
  alloc.deallocate(a, kCount);
  EXPECT_LE(RssBytes() + (size_t{60} << 20), touched);

  uint32_t* small = alloc.allocate(16);  // from operator new
  small[15] = 7;
  EXPECT_EQ(small[15], 7u);
  alloc.deallocate(small, 16);
}

TEST(MmapAllocatorTest, AHashSetKeepsItsElementsAcrossMappedDoublings) {
  absl::flat_hash_set<uint32_t, absl::Hash<uint32_t>, std::equal_to<uint32_t>,
                      MmapAllocator<uint32_t>>
      set;
  for (uint32_t i = 0; i < 600000; ++i) set.insert(i * 7);  // arrays well past 1 MiB
  EXPECT_GE(set.capacity() * (sizeof(uint32_t) + 1), kMinMappedBytes);
  for (uint32_t i = 0; i < 600000; ++i) ASSERT_TRUE(set.contains(i * 7)) << i;
  EXPECT_FALSE(set.contains(1));
  EXPECT_EQ(set.size(), 600000u);
}

}  // namespace
}  // namespace kvtier::storage
