// ucx::Worker over UCX's TCP transport (forced, so it behaves as between hosts):
// listener + connector, rendezvous payloads landing in the receiver's buffer, dropped
// payloads, deferred receives, endpoint failure when the peer goes away, and a task posted
// as the progress thread goes to sleep.
#include "tests/testing/status_matchers.h"
#include "ucx/ucx_worker.h"

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier::ucx {
namespace {

constexpr uint16_t kData = 7;

std::string RandomPayload(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::unique_ptr<Worker> NewWorker() {
  WorkerOptions o;
  o.transports = "tcp";
  auto w = Worker::Create(o);
  EXPECT_OK(w);
  return w.ok() ? std::move(*w) : nullptr;
}

TEST(UcxWorkerTest, PayloadsLandBitExactlyInTheBufferTheReceiverPicks) {
  auto server = NewWorker();
  auto client = NewWorker();
  ASSERT_NE(server, nullptr);
  ASSERT_NE(client, nullptr);
  struct Got {
    std::string header;
    std::string data;
  };
  std::promise<Got> got;
  server->SetHandler(kData, [&](EndpointId, std::string_view header, Incoming in) {
    auto g = std::make_shared<Got>();
    g->header = std::string(header);
    g->data.resize(in.length());
    in.Receive(g->data.data(), [&got, g](absl::Status s) {
      EXPECT_OK(s);
      got.set_value(*g);
    });
  });
  auto port = server->Listen("127.0.0.1", 0);
  ASSERT_OK(port);
  ASSERT_GT(*port, 0);
  EXPECT_EQ(server->port(), *port);
  auto ep = client->Connect("127.0.0.1", *port);
  ASSERT_OK(ep);
  const std::string payload = RandomPayload(3 << 20, 1);
  std::promise<absl::Status> sent;
  client->Send(*ep, kData, "hdr", payload.data(), payload.size(),
               [&](absl::Status s) { sent.set_value(s); });
  Got g = got.get_future().get();
  EXPECT_EQ(g.header, "hdr");
  EXPECT_TRUE(g.data == payload);
  EXPECT_OK(sent.get_future().get());
}

// Post writes the wake-up eventfd only while the progress thread sleeps; a task posted
// as the thread goes to sleep must still wake it. One thread posts each task as soon as
// the one before has run (or a few microseconds later), so its Posts keep meeting the
// progress thread on its way to poll(), and no other Post can wake it instead. With a
// tick of ten minutes, a lost wake-up would leave a task waiting far past the wait below.
TEST(UcxWorkerTest, ATaskPostedAsTheProgressThreadGoesToSleepStillRuns) {
  WorkerOptions o;
  o.transports = "tcp";
  o.tick_ms = 600000;
  auto w = Worker::Create(o);
  ASSERT_OK(w);
  std::mt19937 rng(7);
  int late = 0;
  for (int i = 0; i < 20000 && late == 0; ++i) {
    const auto gap = std::chrono::nanoseconds(rng() % 8000);
    for (auto until = std::chrono::steady_clock::now() + gap;
         std::chrono::steady_clock::now() < until;) {
    }
    auto ran = std::make_shared<std::promise<void>>();
    std::future<void> f = ran->get_future();
    (*w)->Post([ran] { ran->set_value(); });
    if (f.wait_for(std::chrono::seconds(20)) != std::future_status::ready) ++late;
  }
  EXPECT_EQ(late, 0);
}

TEST(UcxWorkerTest, DroppedAndDeferredPayloads) {
  auto server = NewWorker();
  auto client = NewWorker();
  ASSERT_NE(server, nullptr);
  ASSERT_NE(client, nullptr);
  std::vector<Incoming> kept;  // progress thread only
  std::string landed(1 << 20, '\0');
  std::promise<void> done;
  server->SetHandler(kData, [&](EndpointId, std::string_view header, Incoming in) {
    if (header == "drop") return;  // goes out of scope: dropped
    kept.push_back(std::move(in));
    if (header == "second") {
      // Receive the first one only now, from another message's callback.
      kept[0].Receive(landed.data(), [&](absl::Status s) {
        EXPECT_OK(s);
        done.set_value();
      });
    }
  });
  auto port = server->Listen("127.0.0.1", 0);
  ASSERT_OK(port);
  auto ep = client->Connect("127.0.0.1", *port);
  ASSERT_OK(ep);
  const std::string a = RandomPayload(1 << 20, 2), b = RandomPayload(1 << 20, 3);
  std::promise<absl::Status> dropped;
  client->Send(*ep, kData, "drop", b.data(), b.size(),
               [&](absl::Status s) { dropped.set_value(s); });
  EXPECT_OK(dropped.get_future().get());  // the sender is not left hanging
  client->Send(*ep, kData, "first", a.data(), a.size(), [](absl::Status) {});
  client->Send(*ep, kData, "second", b.data(), b.size(), [](absl::Status) {});
  done.get_future().get();
  EXPECT_TRUE(landed == a);
  std::promise<void> cleared;
  server->Post([&] {
    kept.clear();
    cleared.set_value();
  });
  cleared.get_future().get();
}

TEST(UcxWorkerTest, APeerThatGoesAwayFailsItsEndpoint) {
  auto server = NewWorker();
  auto client = NewWorker();
  ASSERT_NE(server, nullptr);
  ASSERT_NE(client, nullptr);
  std::promise<EndpointId> hello;
  server->SetHandler(kData, [&](EndpointId from, std::string_view, Incoming) {
    hello.set_value(from);
  });
  std::promise<absl::Status> failed;
  client->SetErrorHandler([&](EndpointId, absl::Status s) { failed.set_value(s); });
  auto port = server->Listen("127.0.0.1", 0);
  ASSERT_OK(port);
  auto ep = client->Connect("127.0.0.1", *port);
  ASSERT_OK(ep);
  client->Send(*ep, kData, "hi", nullptr, 0, [](absl::Status) {});
  hello.get_future().get();
  server.reset();  // closes its endpoint and stops
  absl::Status s = failed.get_future().get();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  std::promise<absl::Status> after;
  client->Send(*ep, kData, "late", nullptr, 0, [&](absl::Status st) { after.set_value(st); });
  EXPECT_TRUE(absl::IsUnavailable(after.get_future().get()));
}

}  // namespace
}  // namespace kvtier::ucx
