#include "storage/chunked_table.h"

#include <vector>

#include "gtest/gtest.h"

namespace kvtier::storage {
namespace {

TEST(ChunkedTableTest, GrowsWithoutMovingElementsAndReusesTheLastFreedId) {
  ChunkedTable<uint64_t, 4> table;  // 16 elements a chunk
  std::vector<uint64_t*> addresses;
  for (uint32_t i = 0; i < 40; ++i) {
    ASSERT_EQ(table.Allocate(), i);  // dense ids while nothing is freed
    EXPECT_EQ(table[i], 0u);         // a new chunk is value-initialized
    table[i] = 1000 + i;
    addresses.push_back(&table[i]);
  }
  EXPECT_EQ(table.id_limit(), 40u);
  for (uint32_t i = 0; i < 40; ++i) {
    EXPECT_EQ(&table[i], addresses[i]);  // growth moved nothing
    EXPECT_EQ(table[i], 1000 + i);
  }
  table.Free(7);
  table.Free(21);
  EXPECT_EQ(table.Allocate(), 21u);
  EXPECT_EQ(table.Allocate(), 7u);
  EXPECT_EQ(table.Allocate(), 40u);
  EXPECT_EQ(table.id_limit(), 41u);
  // Three chunks of 16 for 41 ids, plus the chunk pointers and the free list.
  EXPECT_GE(table.MemoryBytes(), 3 * 16 * sizeof(uint64_t));
  EXPECT_LE(table.MemoryBytes(), 3 * 16 * sizeof(uint64_t) + 256);
}

}  // namespace
}  // namespace kvtier::storage
