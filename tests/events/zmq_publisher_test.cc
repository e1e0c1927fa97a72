// ZmqEventPublisher over real ZMQ sockets on 127.0.0.1 (ephemeral ports): frames, both
// payload forms, sequence numbers, batching, slow subscribers, replay and gap healing.
#include "events/zmq_publisher.h"

#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <msgpack.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/events/event_test_util.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::events {
namespace {

using ::kvtier::events::testing::Bins;
using ::kvtier::events::testing::EventKeys;
using ::kvtier::events::testing::Field;
using ::kvtier::events::testing::LiveBatch;
using ::kvtier::events::testing::RecvBatch;
using ::kvtier::events::testing::Replay;
using ::kvtier::events::testing::Str;
using ::kvtier::events::testing::Subscriber;
using ::kvtier::events::testing::WaitSubscribed;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

EventsConfig LocalConfig() {
  EventsConfig c;
  c.endpoint = "tcp://127.0.0.1:*";
  c.replay_endpoint = "tcp://127.0.0.1:*";
  c.node_id = "node-a";
  c.batch_ms = 1;
  c.format = BatchFormat::kMap;  // the helpers read fields by name
  c.send_all_blocks_cleared = true;  // WaitSubscribed's warm-up events
  return c;
}

std::unique_ptr<ZmqEventPublisher> MustCreate(EventsConfig c) {
  auto p = ZmqEventPublisher::Create(std::move(c));
  EXPECT_OK(p);
  return p.ok() ? std::move(*p) : nullptr;
}

BlockEvent Stored(std::string ns, std::string key) {
  return BlockEvent::Stored(std::move(ns), "", {std::move(key)}, std::nullopt, 16,
                            Medium::kCpuPinned);
}

uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

TEST(EndpointBindsTest, FollowsVllmsRule) {
  EXPECT_TRUE(EndpointBinds("tcp://*:5557"));
  EXPECT_TRUE(EndpointBinds("tcp://[::]:5557"));
  EXPECT_TRUE(EndpointBinds("ipc:///tmp/kv"));
  EXPECT_TRUE(EndpointBinds("inproc://kv"));
  EXPECT_FALSE(EndpointBinds("tcp://10.0.0.1:5557"));
}

TEST(ZmqEventPublisherTest, CreateRefusesBadConfigNamingTheField) {
  EventsConfig c = LocalConfig();
  c.batch_ms = 0;
  auto p = ZmqEventPublisher::Create(c);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("events.batch_ms"));
  c = LocalConfig();
  c.endpoint = "tcp://999.0.0.1:*";
  p = ZmqEventPublisher::Create(c);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("events.endpoint"));
  c = LocalConfig();
  c.replay_endpoint = "tcp://999.0.0.1:*";
  p = ZmqEventPublisher::Create(c);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("events.replay_endpoint"));
}

TEST(ZmqEventPublisherTest, ExposesTheBoundEndpoints) {
  auto pub = MustCreate(LocalConfig());
  ASSERT_NE(pub, nullptr);
  EXPECT_THAT(pub->endpoint(), HasSubstr("tcp://127.0.0.1:"));
  EXPECT_THAT(pub->endpoint(), ::testing::Not(HasSubstr("*")));
  EXPECT_THAT(pub->replay_endpoint(), HasSubstr("tcp://127.0.0.1:"));
  EXPECT_NE(pub->endpoint(), pub->replay_endpoint());
}

TEST(ZmqEventPublisherTest, ThreeFramesTopicSeqAndMapPayload) {
  auto pub = MustCreate(LocalConfig());
  ASSERT_NE(pub, nullptr);
  zmq::context_t ctx;
  zmq::socket_t sub = Subscriber(ctx, pub->endpoint());
  const uint64_t seq = WaitSubscribed(*pub, sub);

  pub->Publish(
      BlockEvent::Stored("ns1", "llama", {"a", "b"}, std::nullopt, 16, Medium::kCpuPinned));
  pub->Publish(BlockEvent::Removed("ns1", "llama", {"b"}, Medium::kCpuPinned));
  pub->Flush();
  std::optional<LiveBatch> b = RecvBatch(sub);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->topic, "kv@node-a@llama");
  EXPECT_EQ(b->seq, seq);
  msgpack::object_handle oh = msgpack::unpack(b->payload.data(), b->payload.size());
  const msgpack::object& batch = oh.get();
  ASSERT_EQ(batch.type, msgpack::type::MAP);
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  EXPECT_NEAR(Field(batch, "ts")->as<double>(), now, 60.0);
  EXPECT_TRUE(Field(batch, "data_parallel_rank")->is_nil());
  const msgpack::object& events = *Field(batch, "events");
  ASSERT_EQ(events.via.array.size, 2u);
  EXPECT_EQ(Str(*Field(events.via.array.ptr[0], "type")), "BlockStored");
  EXPECT_THAT(Bins(*Field(events.via.array.ptr[0], "block_hashes")), ElementsAre("a", "b"));
  EXPECT_EQ(Str(*Field(events.via.array.ptr[1], "type")), "BlockRemoved");
  EXPECT_EQ(Str(*Field(events.via.array.ptr[1], "medium")), "CPU");

  EventsStats s = pub->stats();
  EXPECT_EQ(s.next_seq, seq + 1);
  EXPECT_EQ(s.batches_dropped, 0u);
  EXPECT_EQ(s.events_dropped, 0u);
}

TEST(ZmqEventPublisherTest, ArrayFormOnTheWire) {
  EventsConfig c = LocalConfig();
  c.format = BatchFormat::kArray;
  c.data_parallel_rank = 2;
  auto pub = MustCreate(c);
  ASSERT_NE(pub, nullptr);
  zmq::context_t ctx;
  zmq::socket_t sub = Subscriber(ctx, pub->endpoint());
  WaitSubscribed(*pub, sub);
  pub->Publish(BlockEvent::Removed("ns", "", {"x"}, Medium::kDisk));
  pub->Flush();
  std::optional<LiveBatch> b = RecvBatch(sub);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->topic, "kv@node-a@ns");
  msgpack::object_handle oh = msgpack::unpack(b->payload.data(), b->payload.size());
  const msgpack::object& batch = oh.get();
  ASSERT_EQ(batch.type, msgpack::type::ARRAY);
  ASSERT_EQ(batch.via.array.size, 3u);
  EXPECT_EQ(batch.via.array.ptr[2].as<int>(), 2);
  const msgpack::object& e = batch.via.array.ptr[1].via.array.ptr[0];
  ASSERT_EQ(e.via.array.size, 4u);
  EXPECT_EQ(Str(e.via.array.ptr[0]), "BlockRemoved");
  EXPECT_THAT(Bins(e.via.array.ptr[1]), ElementsAre("x"));
  EXPECT_EQ(Str(e.via.array.ptr[2]), "DISK");
}

TEST(ZmqEventPublisherTest, DefaultsToTheArrayFormVllmReleasesSend) {
  EXPECT_EQ(EventsConfig().format, BatchFormat::kArray);
}

TEST(ZmqEventPublisherTest, AllBlocksClearedGoesOutOnlyWhenAskedFor) {
  EXPECT_FALSE(EventsConfig().send_all_blocks_cleared);
  EventsConfig off = LocalConfig();
  off.send_all_blocks_cleared = false;
  auto pub = MustCreate(off);
  ASSERT_NE(pub, nullptr);
  pub->Publish(BlockEvent::AllCleared("ns", ""));
  pub->Publish(Stored("ns", "k"));
  pub->Flush();
  EXPECT_EQ(pub->stats().events_published, 1u);
  EXPECT_EQ(pub->stats().next_seq, 1u);  // one batch: the BlockStored alone
}

BlockEvent Child(std::string key, std::string parent) {
  BlockEvent e = BlockEvent::Stored("ns", "", {std::move(key)}, std::move(parent), 16,
                                    Medium::kCpuPinned);
  e.parent_pending = true;
  return e;
}

TEST(ZmqEventPublisherTest, ChildrenStoredFirstLeaveAfterTheirParentInOneChain) {
  EventsConfig c = LocalConfig();
  c.parent_wait_ms = 60000;  // only the parent releases them
  auto pub = MustCreate(c);
  ASSERT_NE(pub, nullptr);
  zmq::context_t ctx;
  zmq::socket_t sub = Subscriber(ctx, pub->endpoint());
  WaitSubscribed(*pub, sub);
  // Parallel streams stored c, then b, then a (a -> b -> c), in separate batches.
  pub->Publish(Child("c", "b"));
  absl::SleepFor(absl::Milliseconds(20));
  pub->Publish(Child("b", "a"));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(RecvBatch(sub, 50).has_value()) << "a child left before its parent";
  EXPECT_EQ(pub->stats().held_for_parent, 2u);
  pub->Publish(Stored("ns", "a"));
  std::optional<LiveBatch> b = RecvBatch(sub);  // no Flush: the batch timer sends it
  ASSERT_TRUE(b.has_value());
  EXPECT_THAT(EventKeys(b->payload), ElementsAre(ElementsAre("a", "b", "c")));
  EXPECT_EQ(pub->stats().held_for_parent, 0u);
  EXPECT_EQ(pub->stats().parent_waits_expired, 0u);
}

TEST(ZmqEventPublisherTest, AChildWhoseParentNeverComesLeavesAfterParentWaitMs) {
  EventsConfig c = LocalConfig();
  c.parent_wait_ms = 100;
  auto pub = MustCreate(c);
  ASSERT_NE(pub, nullptr);
  zmq::context_t ctx;
  zmq::socket_t sub = Subscriber(ctx, pub->endpoint());
  WaitSubscribed(*pub, sub);
  const absl::Time start = absl::Now();
  pub->Publish(Child("y", "held-elsewhere"));
  std::optional<LiveBatch> b = RecvBatch(sub);
  ASSERT_TRUE(b.has_value());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_THAT(EventKeys(b->payload), ElementsAre(ElementsAre("y")));
  EXPECT_EQ(pub->stats().parent_waits_expired, 1u);
}

TEST(ZmqEventPublisherTest, FlushSendsHeldChildrenAndEmptyKeyListsNeverLeave) {
  EventsConfig c = LocalConfig();
  c.parent_wait_ms = 60000;
  auto pub = MustCreate(c);
  ASSERT_NE(pub, nullptr);
  zmq::context_t ctx;
  zmq::socket_t sub = Subscriber(ctx, pub->endpoint());
  WaitSubscribed(*pub, sub);
  pub->Publish(BlockEvent::Stored("ns", "", {}, std::nullopt, 16, Medium::kCpuPinned));
  pub->Publish(BlockEvent::Removed("ns", "", {}, Medium::kDisk));
  pub->Publish(Child("z", "p"));
  pub->Flush();
  std::optional<LiveBatch> b = RecvBatch(sub);
  ASSERT_TRUE(b.has_value());
  EXPECT_THAT(EventKeys(b->payload), ElementsAre(ElementsAre("z")));
  EXPECT_FALSE(RecvBatch(sub, 50).has_value());
}

TEST(ZmqEventPublisherTest, BatchesByCountAndNamespaceWithConsecutiveSeqs) {
  EventsConfig c = LocalConfig();
  c.batch_ms = 10000;  // only the count, a Flush or the namespace split a batch
  c.max_batch_events = 4;
  auto pub = MustCreate(c);
  ASSERT_NE(pub, nullptr);
  zmq::context_t ctx;
  zmq::socket_t sub = Subscriber(ctx, pub->endpoint());
  const uint64_t seq = WaitSubscribed(*pub, sub);
  const uint64_t published_before = pub->stats().events_published;

  for (int i = 0; i < 8; ++i) pub->Publish(Stored("a", absl::StrCat("a", i)));
  // Eight events reach max_batch_events twice: two batches leave without a Flush.
  for (int i = 0; i < 2; ++i) {
    std::optional<LiveBatch> b = RecvBatch(sub);
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->seq, seq + i);
    EXPECT_EQ(EventKeys(b->payload).size(), 4u);
  }
  pub->Publish(Stored("a", "a8"));
  pub->Publish(Stored("b", "b0"));
  pub->Publish(Stored("a", "a9"));
  pub->Flush();
  std::optional<LiveBatch> a = RecvBatch(sub);
  std::optional<LiveBatch> b = RecvBatch(sub);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(a->topic, "kv@node-a@a");
  EXPECT_EQ(a->seq, seq + 2);
  EXPECT_THAT(EventKeys(a->payload), ElementsAre(ElementsAre("a8"), ElementsAre("a9")));
  EXPECT_EQ(b->topic, "kv@node-a@b");
  EXPECT_EQ(b->seq, seq + 3);
  EXPECT_THAT(EventKeys(b->payload), ElementsAre(ElementsAre("b0")));
  EXPECT_EQ(pub->stats().events_published - published_before, 11u);
}

TEST(ZmqEventPublisherTest, BatchLeavesAfterBatchMsWithoutFlush) {
  EventsConfig c = LocalConfig();
  c.batch_ms = 5;
  auto pub = MustCreate(c);
  ASSERT_NE(pub, nullptr);
  zmq::context_t ctx;
  zmq::socket_t sub = Subscriber(ctx, pub->endpoint());
  WaitSubscribed(*pub, sub);
  pub->Publish(Stored("a", "k"));
  std::optional<LiveBatch> b = RecvBatch(sub);  // no Flush: the batch timer sends it
  ASSERT_TRUE(b.has_value());
  EXPECT_THAT(EventKeys(b->payload), ElementsAre(ElementsAre("k")));
}

TEST(ZmqEventPublisherTest, ReplayFromASequenceAndOlderThanTheBuffer) {
  EventsConfig c = LocalConfig();
  c.replay_buffer_batches = 5;
  auto pub = MustCreate(c);
  ASSERT_NE(pub, nullptr);
  zmq::context_t ctx;
  for (int i = 0; i < 8; ++i) {
    pub->Publish(Stored("a", absl::StrCat("k", i)));
    pub->Flush();  // one batch each: seq i holds key k<i>
  }
  EXPECT_EQ(pub->stats().replay_buffer_batches, 5u);

  auto from5 = Replay(ctx, pub->replay_endpoint(), uint64_t{5});
  ASSERT_EQ(from5.size(), 3u);
  for (size_t i = 0; i < from5.size(); ++i) {
    EXPECT_EQ(from5[i].first, 5 + i);
    EXPECT_THAT(EventKeys(from5[i].second), ElementsAre(ElementsAre(absl::StrCat("k", 5 + i))));
  }
  // Older than the buffer: the first answer is newer than asked, which tells the consumer
  // it lost batches 0..2 for good and must re-sync.
  auto from0 = Replay(ctx, pub->replay_endpoint(), 0);
  ASSERT_EQ(from0.size(), 5u);
  EXPECT_EQ(from0.front().first, 3u);
  EXPECT_EQ(from0.back().first, 7u);
  // Without the delimiter frame too.
  auto bare = Replay(ctx, pub->replay_endpoint(), 6, /*delimited=*/false);
  ASSERT_EQ(bare.size(), 2u);
  EXPECT_EQ(bare[0].first, 6u);
  // kvtier's extension: a trailing request frame adds each batch's topic to its answer.
  {
    zmq::socket_t dealer = ::kvtier::events::testing::ReplayClient(ctx, pub->replay_endpoint());
    dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
    dealer.send(zmq::buffer(::kvtier::events::testing::BigEndianBytes(7)),
                zmq::send_flags::sndmore);
    dealer.send(zmq::str_buffer("topic"), zmq::send_flags::none);
    std::vector<zmq::message_t> f = ::kvtier::events::testing::Recv(dealer);
    ASSERT_EQ(f.size(), 4u);
    EXPECT_EQ(::kvtier::events::testing::BigEndian(f[1]), 7u);
    EXPECT_EQ(f[3].to_string(), "kv@node-a@a");
    f = ::kvtier::events::testing::Recv(dealer);
    ASSERT_EQ(f.size(), 4u);
    EXPECT_EQ(static_cast<int64_t>(::kvtier::events::testing::BigEndian(f[1])), -1);
  }
  // Newer than everything: just the end marker.
  EXPECT_TRUE(Replay(ctx, pub->replay_endpoint(), 100).empty());
  EXPECT_EQ(pub->stats().replay_requests, 5u);
}

// ROUTER drops answers silently past its high-water mark: a replay of the whole buffer
// must still arrive complete, end marker included, and again when asked twice at once.
TEST(ZmqEventPublisherTest, ReplayOfAFullBufferArrivesWhole) {
  EventsConfig c = LocalConfig();
  c.replay_buffer_batches = 1000;
  auto pub = MustCreate(c);
  ASSERT_NE(pub, nullptr);
  for (int i = 0; i < 1200; ++i) {
    pub->Publish(Stored("a", absl::StrCat("k", i)));
    pub->Flush();
  }
  zmq::context_t ctx;
  zmq::socket_t dealer = ::kvtier::events::testing::ReplayClient(ctx, pub->replay_endpoint());
  for (int round = 0; round < 2; ++round) {
    auto all = Replay(dealer, 0);
    ASSERT_EQ(all.size(), 1000u);
    EXPECT_EQ(all.front().first, 200u);
    EXPECT_EQ(all.back().first, 1199u);
  }
}

TEST(ZmqEventPublisherTest, FullQueueDropsCountsAndLeavesAnUnfillableGap) {
  EventsConfig c = LocalConfig();
  c.batch_ms = 10000;
  c.queue_capacity_events = 2;
  auto pub = MustCreate(c);
  ASSERT_NE(pub, nullptr);
  zmq::context_t ctx;
  zmq::socket_t sub = Subscriber(ctx, pub->endpoint());
  const uint64_t seq = WaitSubscribed(*pub, sub);

  for (int i = 0; i < 5; ++i) pub->Publish(Stored("a", absl::StrCat("k", i)));
  EXPECT_EQ(pub->stats().events_dropped, 3u);
  EXPECT_EQ(pub->stats().queued_events, 2u);
  pub->Flush();
  pub->Publish(Stored("a", "after"));
  pub->Flush();
  std::optional<LiveBatch> first = RecvBatch(sub);
  std::optional<LiveBatch> next = RecvBatch(sub);
  ASSERT_TRUE(first.has_value() && next.has_value());
  EXPECT_EQ(first->seq, seq);
  EXPECT_THAT(EventKeys(first->payload), ElementsAre(ElementsAre("k0"), ElementsAre("k1")));
  EXPECT_EQ(next->seq, seq + 2) << "the dropped events cost one sequence number";
  EXPECT_EQ(pub->stats().sequences_skipped, 1u);
  // The consumer sees the gap; replay cannot fill it (the first answer is past it).
  auto replayed = Replay(ctx, pub->replay_endpoint(), seq + 1);
  ASSERT_FALSE(replayed.empty());
  EXPECT_GT(replayed.front().first, seq + 1);
}

// A subscriber that never reads: once its queue (send_hwm) and socket buffers are full,
// batches are refused and counted, and memory does not grow with what is published. A
// second subscriber that reads sees the gaps and heals them through replay as it goes.
TEST(ZmqEventPublisherTest, StuckSubscriberDropsBoundedAndGapsHealThroughReplay) {
  EventsConfig c = LocalConfig();
  c.send_hwm = 8;
  c.replay_buffer_batches = 64;
  auto pub = MustCreate(c);
  ASSERT_NE(pub, nullptr);
  zmq::context_t ctx;
  zmq::socket_t reader = Subscriber(ctx, pub->endpoint());
  WaitSubscribed(*pub, reader);
  zmq::socket_t stuck(ctx, zmq::socket_type::sub);
  stuck.set(zmq::sockopt::linger, 0);
  stuck.set(zmq::sockopt::rcvhwm, 1);
  stuck.set(zmq::sockopt::rcvbuf, 4096);
  stuck.set(zmq::sockopt::subscribe, "");
  stuck.connect(pub->endpoint());
  // The stuck subscriber is joined once a warm-up reaches it; it never reads after that.
  const uint64_t start = WaitSubscribed(*pub, stuck);
  while (RecvBatch(reader, 0).has_value()) {  // the reader drains the warm-ups too
  }
  zmq::socket_t replay = ::kvtier::events::testing::ReplayClient(ctx, pub->replay_endpoint());

  // 64 keys of 1 KiB: each batch is ~66 KiB, 3,000 batches ~200 MB in all.
  constexpr int kBatches = 3000;
  auto key = [](int i, int j) {
    return std::string(1024, static_cast<char>('a' + (i + j) % 26)) + absl::StrCat(i, "/", j);
  };
  const uint64_t rss_before = ResidentBytes();
  std::set<uint64_t> seen;
  uint64_t want = start;  // lowest seq the reader has not applied
  int replays = 0;
  auto apply = [&](uint64_t seq, const std::string& payload) {
    if (seq < want || !seen.insert(seq).second) return;
    auto keys = EventKeys(payload);
    ASSERT_EQ(keys.size(), 1u);
    EXPECT_EQ(keys[0][0], key(static_cast<int>(seq - start), 0)) << "seq " << seq;
  };
  for (int i = 0; i < kBatches; ++i) {
    std::vector<std::string> keys;
    for (int j = 0; j < 64; ++j) keys.push_back(key(i, j));
    pub->Publish(BlockEvent::Stored("a", "", std::move(keys), std::nullopt, 16, Medium::kDisk));
    pub->Flush();
    while (std::optional<LiveBatch> b = RecvBatch(reader, 0)) apply(b->seq, b->payload);
    // Gap: everything published up to now that the reader lacks comes from replay.
    const uint64_t next = pub->stats().next_seq;
    while (want < next && seen.count(want)) ++want;
    if (want < next) {
      ++replays;
      for (auto& [seq, payload] : Replay(replay, want)) apply(seq, payload);
      ASSERT_TRUE(seen.count(want)) << "seq " << want << " must still be replayable";
      while (want < next && seen.count(want)) ++want;
    }
  }
  EventsStats s = pub->stats();
  EXPECT_GT(s.batches_dropped, 0u) << "the stuck subscriber made the publisher drop";
  EXPECT_EQ(s.batches_published + s.batches_dropped, s.next_seq);
  EXPECT_EQ(s.events_dropped, s.batches_dropped);  // one event per batch
  EXPECT_EQ(s.subscribers, 2);
  EXPECT_GT(replays, 0) << "the reader saw gaps";
  EXPECT_EQ(want, s.next_seq) << "the reader healed every gap";
  // ~200 MB went through; queues and the 64-batch replay buffer hold a few MB. (Not under
  // AddressSanitizer, whose quarantine keeps up to 256 MB of freed memory resident.)
  const uint64_t rss_after = ResidentBytes();
#ifndef __SANITIZE_ADDRESS__
  EXPECT_LT(rss_after - std::min(rss_after, rss_before), 48ull << 20);
#else
  (void)rss_after;
  (void)rss_before;
#endif
}

TEST(ZmqEventPublisherTest, CountsSubscribersThroughTheSocketMonitor) {
  auto pub = MustCreate(LocalConfig());
  ASSERT_NE(pub, nullptr);
  zmq::context_t ctx;
  auto wait_for = [&](int64_t n) {
    // The monitor reports asynchronously: poll the counter (bounded), do not sleep a guess.
    for (int i = 0; i < 10000 && pub->stats().subscribers != n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return pub->stats().subscribers;
  };
  EXPECT_EQ(pub->stats().subscribers, 0);
  {
    zmq::socket_t sub = Subscriber(ctx, pub->endpoint());
    EXPECT_EQ(wait_for(1), 1);
  }
  EXPECT_EQ(wait_for(0), 0);
}

TEST(ZmqEventPublisherTest, ConnectsToASubscriberThatBinds) {
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, "kv@");
  sub.bind("tcp://127.0.0.1:*");
  EventsConfig c = LocalConfig();
  c.endpoint = sub.get(zmq::sockopt::last_endpoint);
  c.replay_endpoint.clear();
  auto pub = MustCreate(c);
  ASSERT_NE(pub, nullptr);
  EXPECT_EQ(pub->endpoint(), c.endpoint);
  EXPECT_TRUE(pub->replay_endpoint().empty());
  const uint64_t seq = WaitSubscribed(*pub, sub);
  pub->Publish(Stored("a", "k"));
  pub->Flush();
  std::optional<LiveBatch> b = RecvBatch(sub);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->seq, seq);
}

TEST(ZmqEventPublisherTest, DestructorSendsWhatIsQueued) {
  auto pub = MustCreate(LocalConfig());
  ASSERT_NE(pub, nullptr);
  for (int i = 0; i < 100; ++i) pub->Publish(Stored("a", absl::StrCat(i)));
  pub.reset();  // must not hang or crash with events queued and no subscriber
  SUCCEED();
}

}  // namespace
}  // namespace kvtier::events
