// CoalesceChains: consecutive BlockStored events of one chain become one event with the
// blocks in order (as vLLM publishes a Put); anything else breaks a run.
#include "events/coalesce.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier::events {
namespace {

BlockEvent Block(std::string key, std::optional<std::string> parent, Medium m = Medium::kCpuPinned) {
  return BlockEvent::Stored("ns", "model", {std::move(key)}, std::move(parent), 16, m);
}

TEST(CoalesceChainsTest, OneEventPerChainRun) {
  std::vector<BlockEvent> events = {Block("a", std::nullopt), Block("b", "a"), Block("c", "b")};
  events[1].extra_keys = {{"salt"}};
  CoalesceChains(&events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].keys, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_FALSE(events[0].parent_key.has_value());
  // One entry per key, empty where a block had none.
  EXPECT_EQ(events[0].extra_keys,
            (std::vector<std::vector<std::string>>{{}, {"salt"}, {}}));
}

TEST(CoalesceChainsTest, TokensConcatenateOnlyWhenEveryBlockHasThem) {
  std::vector<BlockEvent> events = {Block("a", "p"), Block("b", "a"), Block("c", "b")};
  events[0].token_ids = {1, 2};
  events[1].token_ids = {3, 4};
  CoalesceChains(&events);  // c has no tokens: its own event
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(events[0].parent_key, "p");
  EXPECT_EQ(events[0].token_ids, (std::vector<uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(events[1].keys, std::vector<std::string>{"c"});
}

TEST(CoalesceChainsTest, OtherEventsAndBrokenLinksKeepTheirPlace) {
  std::vector<BlockEvent> events = {
      Block("a", std::nullopt),
      Block("b", "a", Medium::kDisk),  // another medium
      BlockEvent::Removed("ns", "model", {"x"}, Medium::kCpuPinned),
      Block("c", "b", Medium::kDisk),  // after a removal: a new run
      Block("d", "zzz", Medium::kDisk),  // not the child of c
      Block("e", "d", Medium::kDisk),
  };
  events[5].lora_name = "adapter";  // another LoRA
  CoalesceChains(&events);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[2].kind, EventKind::kRemoved);
  EXPECT_EQ(events[3].keys, std::vector<std::string>{"c"});
}

TEST(CoalesceChainsTest, MergesAcrossEventsOfSeveralBlocks) {
  std::vector<BlockEvent> events = {
      BlockEvent::Stored("ns", "model", {"a", "b"}, std::nullopt, 16, Medium::kDisk),
      Block("c", "b", Medium::kDisk), BlockEvent::AllCleared("ns", "model"),
      Block("d", "c", Medium::kDisk)};
  CoalesceChains(&events);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].keys, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(events[1].kind, EventKind::kAllCleared);
  EXPECT_EQ(events[2].keys, std::vector<std::string>{"d"});
}

}  // namespace
}  // namespace kvtier::events
