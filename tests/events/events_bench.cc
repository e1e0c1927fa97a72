// Cost of reporting a block event, which the store pays on every Put and tier change:
// ZmqEventPublisher::Publish (build the event, append to the queue) with the publisher
// thread encoding and sending concurrently, with and without a subscriber reading; and
// the thread's per-event encoding cost.
//
//   ninja -C build events_bench && build/tests/events/events_bench
#include <benchmark/benchmark.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "events/encoding.h"
#include "events/zmq_publisher.h"

namespace kvtier::events {
namespace {

std::string Key(uint64_t i) {
  std::string k(32, 'k');
  for (int b = 0; b < 8; ++b) k[b] = static_cast<char>(i >> (8 * b));
  return k;
}

std::unique_ptr<ZmqEventPublisher> MakePublisher() {
  EventsConfig c;
  c.endpoint = "tcp://127.0.0.1:*";
  c.replay_endpoint = "tcp://127.0.0.1:*";
  auto p = ZmqEventPublisher::Create(c);
  return p.ok() ? std::move(*p) : nullptr;
}

// Publishing faster than the thread sends fills the queue and measures the (cheaper)
// drop path; a Flush outside the timing every kBurst events keeps every event queued.
constexpr uint64_t kBurst = 512;
void FlushUntimed(benchmark::State& state, ZmqEventPublisher& pub) {
  state.PauseTiming();
  pub.Flush();
  state.ResumeTiming();
}

void Report(benchmark::State& state, ZmqEventPublisher& pub) {
  pub.Flush();
  EventsStats s = pub.stats();
  state.counters["published"] = static_cast<double>(s.events_published);
  state.counters["dropped"] = static_cast<double>(s.events_dropped);
  state.counters["batches"] = static_cast<double>(s.batches_published);
}

// One BlockStored of one 32-byte key, as a Put of one block reports it.
void BM_Publish(benchmark::State& state, bool subscriber) {
  std::unique_ptr<ZmqEventPublisher> pub = MakePublisher();
  if (pub == nullptr) {
    state.SkipWithError("cannot create the publisher");
    return;
  }
  zmq::context_t ctx;
  std::atomic<bool> done{false};
  std::thread reader;
  if (subscriber) {
    reader = std::thread([&] {
      zmq::socket_t sub(ctx, zmq::socket_type::sub);
      sub.set(zmq::sockopt::subscribe, "");
      sub.set(zmq::sockopt::rcvtimeo, 50);
      sub.connect(pub->endpoint());
      zmq::message_t m;
      while (!done.load()) (void)sub.recv(m);
    });
  }
  uint64_t i = 0;
  for (auto _ : state) {
    pub->Publish(BlockEvent::Stored("ns", "model", {Key(i)}, Key(i - 1), 16, Medium::kCpuPinned));
    if (++i % kBurst == 0) FlushUntimed(state, *pub);
  }
  state.SetItemsProcessed(state.iterations());
  Report(state, *pub);
  done = true;
  if (reader.joinable()) reader.join();
}
BENCHMARK_CAPTURE(BM_Publish, no_subscriber, false);
BENCHMARK_CAPTURE(BM_Publish, one_subscriber, true);

// Two threads publishing at once (the service's handlers run concurrently).
void BM_PublishContended(benchmark::State& state) {
  static std::unique_ptr<ZmqEventPublisher> pub;
  if (state.thread_index() == 0) pub = MakePublisher();
  uint64_t i = static_cast<uint64_t>(state.thread_index()) << 40;
  for (auto _ : state) {
    pub->Publish(BlockEvent::Stored("ns", "model", {Key(i)}, std::nullopt, 16, Medium::kCpuPinned));
    if (++i % kBurst == 0) FlushUntimed(state, *pub);
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    Report(state, *pub);
    pub.reset();
  }
}
BENCHMARK(BM_PublishContended)->Threads(2)->UseRealTime();

// The publisher thread's side: msgpack encoding, per event, of a batch of 1,024.
void BM_EncodeBatch(benchmark::State& state) {
  std::vector<BlockEvent> events;
  for (uint64_t i = 0; i < 1024; ++i) {
    events.push_back(
        BlockEvent::Stored("ns", "model", {Key(i)}, Key(i - 1), 16, Medium::kCpuPinned));
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(EncodeBatch(1.0, events, std::nullopt, BatchFormat::kMap));
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(events.size()));
}
BENCHMARK(BM_EncodeBatch);

}  // namespace
}  // namespace kvtier::events

BENCHMARK_MAIN();
