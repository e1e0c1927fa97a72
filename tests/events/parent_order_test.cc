// ParentOrder on its own: which events it holds, what releases them, and that applying
// its output in order reaches the input's end state.
#include "events/parent_order.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvtier::events {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

BlockEvent Stored(std::string key, std::optional<std::string> parent, bool pending,
                  std::string ns = "ns") {
  BlockEvent e = BlockEvent::Stored(std::move(ns), "", {std::move(key)}, std::move(parent), 16,
                                    Medium::kCpuPinned);
  e.parent_pending = pending;
  return e;
}

std::vector<std::string> Keys(const std::vector<BlockEvent>& events) {
  std::vector<std::string> out;
  for (const BlockEvent& e : events) {
    out.push_back(std::string(EventKindName(e.kind)) + ":" + (e.keys.empty() ? "" : e.keys[0]));
  }
  return out;
}

TEST(ParentOrderTest, HoldsOnlyPendingChildrenAndReleasesThemAfterTheParentInArrivalOrder) {
  ParentOrder order(absl::Seconds(1), 100);
  std::vector<BlockEvent> out;
  order.Add(Stored("d", "c", true), kT0, &out);
  order.Add(Stored("c", "b", true), kT0, &out);
  order.Add(Stored("b2", "a", true), kT0, &out);
  order.Add(Stored("x", "known", false), kT0, &out);  // parent already published
  EXPECT_THAT(Keys(out), ElementsAre("BlockStored:x"));
  EXPECT_EQ(order.held(), 3u);
  out.clear();
  order.Add(Stored("b", "a", true), kT0, &out);  // held too: a is pending
  order.Add(Stored("a", std::nullopt, false), kT0, &out);
  // a releases b2 and b (arrival order), b releases c, c releases d.
  EXPECT_THAT(Keys(out), ElementsAre("BlockStored:a", "BlockStored:b2", "BlockStored:b",
                                     "BlockStored:c", "BlockStored:d"));
  EXPECT_EQ(order.held(), 0u);
  out.clear();
  order.Add(Stored("n", "m", true), kT0, &out);
  order.Add(Stored("m", std::nullopt, false, "other-ns"), kT0, &out);  // another namespace's m
  EXPECT_THAT(Keys(out), ElementsAre("BlockStored:m"));
  EXPECT_EQ(order.held(), 1u);
  EXPECT_EQ(order.next_deadline(), kT0 + absl::Seconds(1));
}

TEST(ParentOrderTest, AChildOfAHeldParentWaitsTooThoughNotPendingInTheStore) {
  // Stream 2 stored 16 before stream 1 stored 15; then stream 2 stored 17, whose parent 16
  // was resident (not pending) but is still held here.
  ParentOrder order(absl::Seconds(1), 100);
  std::vector<BlockEvent> out;
  order.Add(Stored("16", "15", true), kT0, &out);
  order.Add(Stored("17", "16", false), kT0, &out);
  EXPECT_THAT(out, IsEmpty());
  order.Add(Stored("15", "14", false), kT0, &out);
  EXPECT_THAT(Keys(out), ElementsAre("BlockStored:15", "BlockStored:16", "BlockStored:17"));
  EXPECT_EQ(order.held(), 0u);
  out.clear();
  order.Add(Stored("18", "17", false), kT0, &out);  // nothing held: leaves at once
  EXPECT_THAT(Keys(out), ElementsAre("BlockStored:18"));
}

TEST(ParentOrderTest, AWaitEndsAtTheDeadlineAndItsChildrenFollow) {
  ParentOrder order(absl::Milliseconds(100), 100);
  std::vector<BlockEvent> out;
  order.Add(Stored("b", "a", true), kT0, &out);
  order.Add(Stored("c", "b", true), kT0 + absl::Milliseconds(50), &out);
  order.Expire(kT0 + absl::Milliseconds(99), &out);
  EXPECT_THAT(out, IsEmpty());
  order.Expire(kT0 + absl::Milliseconds(100), &out);
  EXPECT_THAT(Keys(out), ElementsAre("BlockStored:b", "BlockStored:c"));
  EXPECT_EQ(order.held(), 0u);
  EXPECT_EQ(order.expired(), 1u);
  EXPECT_EQ(order.next_deadline(), std::nullopt);
}

TEST(ParentOrderTest, RemovalsAndClearsReleaseWhatTheyTouchFirst) {
  ParentOrder order(absl::Seconds(1), 100);
  std::vector<BlockEvent> out;
  order.Add(Stored("b", "a", true), kT0, &out);
  order.Add(Stored("q", "p", true), kT0, &out);
  order.Add(Stored("z", "y", true, "ns2"), kT0, &out);
  order.Add(BlockEvent::Removed("ns", "", {"b"}, Medium::kCpuPinned), kT0, &out);
  EXPECT_THAT(Keys(out), ElementsAre("BlockStored:b", "BlockRemoved:b"));
  out.clear();
  order.Add(BlockEvent::AllCleared("ns", ""), kT0, &out);
  EXPECT_THAT(Keys(out), ElementsAre("BlockStored:q", "AllBlocksCleared:"));
  EXPECT_EQ(order.held(), 1u);  // ns2's
  out.clear();
  order.ReleaseAll(&out);
  EXPECT_THAT(Keys(out), ElementsAre("BlockStored:z"));
}

TEST(ParentOrderTest, ZeroWaitHoldsNothingAndMaxHeldBoundsTheHold) {
  std::vector<BlockEvent> out;
  ParentOrder none(absl::ZeroDuration(), 100);
  none.Add(Stored("b", "a", true), kT0, &out);
  EXPECT_THAT(Keys(out), ElementsAre("BlockStored:b"));
  out.clear();
  ParentOrder two(absl::Seconds(1), 2);
  two.Add(Stored("b", "a", true), kT0, &out);
  two.Add(Stored("d", "c", true), kT0, &out);
  two.Add(Stored("f", "e", true), kT0, &out);
  EXPECT_THAT(Keys(out), ElementsAre("BlockStored:b"));
  EXPECT_EQ(two.held(), 2u);
}

}  // namespace
}  // namespace kvtier::events
