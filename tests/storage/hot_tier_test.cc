#include "storage/hot_tier.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::storage {
namespace {

std::unique_ptr<HotTier> MakeTier(uint64_t bytes) {
  auto tier = HotTier::Create(bytes, "malloc");
  EXPECT_OK(tier);
  return tier.ok() ? *std::move(tier) : nullptr;
}

TEST(HotTierTest, AReaderKeepsADisownedSlotUntilItLetsGo) {
  auto tier = MakeTier(4 * HotArena::kAlignment);
  std::optional<SlotId> slot = tier->Allocate(HotArena::kAlignment);
  ASSERT_TRUE(slot.has_value());
  std::memset(tier->View(*slot).data, 'a', 10);
  tier->SetPayload(*slot, 10);
  EXPECT_EQ(tier->Own(*slot), 10u);  // takes the allocation's reference: owned now
  EXPECT_EQ(tier->used_bytes(), HotArena::kAlignment);

  BlockRef ref = tier->NewRef(*slot, Tier::kHot, 3);
  EXPECT_EQ(tier->Disown(*slot),
            10u);  // the block left the hot tier; the reader still holds the bytes
  EXPECT_EQ(tier->used_bytes(), HotArena::kAlignment);
  // The slot is not reused while held: a new allocation lands elsewhere.
  std::optional<SlotId> other = tier->Allocate(HotArena::kAlignment);
  ASSERT_TRUE(other.has_value());
  EXPECT_NE(tier->View(*other).data, ref.payload().data());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(ref.payload().data()), 10),
            std::string(10, 'a'));
  EXPECT_EQ(ref.block_index(), 3u);
  ref = BlockRef();                                     // last reference: freed
  EXPECT_EQ(tier->used_bytes(), HotArena::kAlignment);  // only `other`
  tier->Release(*other);
  EXPECT_EQ(tier->used_bytes(), 0u);
}

TEST(HotTierTest, AllocateFailsWhenFullAndAnOwnedSlotOutlivesItsReferences) {
  auto tier = MakeTier(2 * HotArena::kAlignment);
  auto a = tier->Allocate(HotArena::kAlignment);
  auto b = tier->Allocate(HotArena::kAlignment);
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(tier->Allocate(1).has_value());
  tier->Own(*b);  // takes b's reference
  tier->Release(*a);
  EXPECT_EQ(tier->used_bytes(), HotArena::kAlignment);  // b is owned
  tier->Disown(*b);
  EXPECT_EQ(tier->used_bytes(), 0u);
}

TEST(HotTierTest, RejectsAnArenaItsSlotsCannotAddress) {
  auto tier = HotTier::Create(HotTier::kMaxCapacityBytes + 1, "malloc");
  ASSERT_EQ(tier.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tier.status().message().find("hot_capacity_bytes"), std::string::npos);
}

TEST(HotTierTest, SlotTableGrowsByChunksAndKeepsSlotsApart) {
  constexpr int kSlots = 10000;
  auto tier = MakeTier(kSlots * HotArena::kAlignment);
  std::vector<SlotId> slots;
  for (int i = 0; i < kSlots; ++i) {
    std::optional<SlotId> slot = tier->Allocate(100);  // rounded up to one granule
    ASSERT_TRUE(slot.has_value()) << i;
    ASSERT_EQ(tier->View(*slot).alloc_bytes, HotArena::kAlignment);
    tier->SetPayload(*slot, 1 + i % 100);  // sizes that tell neighbours apart
    slots.push_back(*slot);
  }
  EXPECT_FALSE(tier->Allocate(1).has_value());  // full
  for (int i = 0; i < kSlots; ++i) {
    const HotTier::SlotView v = tier->View(slots[i]);
    EXPECT_EQ(v.payload_bytes, 1u + i % 100);
  }
  // 16 bytes a slot, at most one chunk (4,096 slots) of slack, a little bookkeeping.
  EXPECT_LE(tier->MemoryBytes(), (kSlots + 4096) * 16 + 1024);
  EXPECT_GE(tier->MemoryBytes(), kSlots * 16);
  for (SlotId slot : slots) tier->Release(slot);
  EXPECT_EQ(tier->used_bytes(), 0u);
}

}  // namespace
}  // namespace kvtier::storage
