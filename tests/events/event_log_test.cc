// EventLog: numbering, retention (OUT_OF_RANGE past it), the resident set of a snapshot,
// forwarding, and readers woken by Publish and Close.
#include "events/event_log.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/events/recording_sink.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::events {
namespace {

BlockEvent Stored(const std::string& key, Medium m) {
  return BlockEvent::Stored("ns", "model", {key}, std::nullopt, 16, m);
}

TEST(EventLogTest, NumbersRetainsAndForwards) {
  testing::RecordingEventSink next;
  EventLog log(3, &next);
  for (int i = 0; i < 5; ++i) log.Publish(Stored(std::string(1, static_cast<char>('a' + i)), Medium::kCpuPinned));
  EXPECT_EQ(log.next_seq(), 5u);
  EXPECT_EQ(next.Take().size(), 5u);
  auto got = log.Read(2, 10, absl::InfinitePast());
  ASSERT_OK(got);
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[0].seq, 2u);
  EXPECT_EQ((*got)[0].event.keys[0], "c");
  EXPECT_EQ(log.Read(1, 10, absl::InfinitePast()).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(log.Read(5, 10, absl::InfinitePast())->empty());  // nothing newer yet
}

TEST(EventLogTest, SnapshotIsTheResidentSetTheEventsImply) {
  EventLog log(100, nullptr);
  log.Publish(Stored("a", Medium::kCpuPinned));
  log.Publish(Stored("a", Medium::kDisk));
  log.Publish(BlockEvent::Removed("ns", "model", {"a"}, Medium::kCpuPinned));
  log.Publish(Stored("b", Medium::kCpuPinned));
  log.Publish(BlockEvent::Stored("other", "", {"x"}, std::nullopt, 16, Medium::kDisk));
  std::vector<EventLog::Resident> r;
  EXPECT_EQ(log.Snapshot("ns", &r), 5u);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].key, "a");
  EXPECT_FALSE(r[0].hot);
  EXPECT_TRUE(r[0].cold);
  EXPECT_EQ(r[1].key, "b");
  EXPECT_TRUE(r[1].hot);
  log.Publish(BlockEvent::AllCleared("ns", "model"));
  r.clear();
  log.Snapshot("", &r);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].ns, "other");
}

TEST(EventLogTest, ReadersWakeOnPublishAndClose) {
  EventLog log(10, nullptr);
  std::thread reader([&] {
    auto got = log.Read(0, 10, absl::InfiniteFuture());
    ASSERT_OK(got);
    EXPECT_EQ(got->size(), 1u);
    auto none = log.Read(1, 10, absl::InfiniteFuture());  // returns once closed
    ASSERT_OK(none);
    EXPECT_TRUE(none->empty());
  });
  log.Publish(Stored("a", Medium::kDisk));
  log.Close();
  reader.join();
}

}  // namespace
}  // namespace kvtier::events
