// Client-side coalescing (client/coalescer.h) and the compact Lookup form
// (protocol/lookup_form.h) against a real kvtierd on 127.0.0.1:0.
#include "client/coalescer.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "protocol/lookup_form.h"
#include "tests/integration/sequences.h"
#include "tests/testing/namespace_spec.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::client {
namespace {

namespace v1 = ::kvtier::v1;
using internal::Coalescer;
using testing::ServerProcess;
using testing::TempDir;

constexpr int kThreads = 8;

// One layer: 64 KiB blocks, small enough to be coalesced.
kv::Layout SmallLayout() {
  kv::Layout l;
  l.num_layers = 1;
  return l;
}

v1::NamespaceSpec Spec(const std::string& name) {
  return testing::NamespaceSpecOf(name, SmallLayout(), v1::CODEC_FP16, "", "coalescer-test");
}

class CoalescerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto server = ServerProcess::StartKvtierd(dir_->Sub("data"));
    ASSERT_OK(server);
    server_ = new ServerProcess(std::move(*server));
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }

  // A client of namespace `ns`; coalescing off unless delay_us > 0.
  std::unique_ptr<Client> Connect(const std::string& ns, int64_t delay_us, bool shm = false) {
    ClientOptions o;
    o.server = server_->address();
    o.namespace_spec = Spec(ns);
    o.num_channels = 2;
    o.shared_memory = shm;
    o.coalesce_max_delay_us = delay_us;
    auto c = Client::Connect(o);
    EXPECT_OK(c);
    return c.ok() ? std::move(*c) : nullptr;
  }

  // A Coalescer whose batches go through `transport` (a Client without coalescing, so
  // every batch is one PutBlocks / GetBlocksInto call of its own).
  static std::unique_ptr<Coalescer> MakeCoalescer(Client* transport, int64_t delay_us,
                                                  std::atomic<int>* put_calls) {
    return std::make_unique<Coalescer>(
        delay_us, 2ull << 20,
        [transport, put_calls](std::string_view ns, std::span<const PutBlock> blocks,
                               v1::PayloadFormat format, Coalescer::Deadline,
                               PutResult* result) -> absl::Status {
          put_calls->fetch_add(1);
          PutOptions o;
          o.format = format;
          auto r = transport->PutBlocks(ns, blocks, o);
          if (!r.ok()) return r.status();
          *result = *std::move(r);
          return absl::OkStatus();
        },
        [transport](std::string_view ns, std::span<const std::string> keys,
                    v1::PayloadFormat format, Coalescer::Deadline,
                    std::span<const std::span<uint8_t>> buffers,
                    std::vector<v1::GetBlockInfo>* infos) -> absl::Status {
          GetOptions o;
          o.format = format;
          auto r = transport->GetBlocksInto(ns, keys, buffers, o);
          if (!r.ok()) return r.status();
          *infos = *std::move(r);
          return absl::OkStatus();
        });
  }

  static TempDir* dir_;
  static ServerProcess* server_;
};

TempDir* CoalescerTest::dir_ = nullptr;
ServerProcess* CoalescerTest::server_ = nullptr;

// Every thread puts and gets its own blocks through one Coalescer; one thread's block has
// a key the server refuses and one thread's Get buffer is too small. Only those calls fail,
// every other call gets exactly its own result, and calls were batched.
TEST_F(CoalescerTest, BatchesConcurrentCallsWithPerCallerResultsAndErrors) {
  auto transport = Connect("co-direct", 0);
  ASSERT_NE(transport, nullptr);
  std::atomic<int> put_calls{0};
  auto co = MakeCoalescer(transport.get(), /*delay_us=*/300000, &put_calls);
  const kv::Layout layout = SmallLayout();
  constexpr int kRounds = 6;
  std::vector<Sequence> seqs;
  for (int t = 0; t < kThreads; ++t)
    seqs.push_back(MakeSequence("co-direct", layout, kRounds, 700 + t));
  const int bad_thread = 3, small_buffer_thread = 5;
  std::latch start(kThreads);
  std::vector<std::string> failures(kThreads);
  std::atomic<int> bad_put_errors{0}, small_get_errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      const auto far = std::chrono::system_clock::now() + std::chrono::seconds(30);
      for (int r = 0; r < kRounds; ++r) {
        PutBlock b = seqs[t].blocks[r];
        const bool bad = t == bad_thread && r % 2 == 0;
        if (bad) b.key = std::string(33, 'x');  // keys are 1..32 bytes
        auto put = co->Put("co-direct", std::span(&b, 1), v1::PAYLOAD_FORMAT_ENCODED, far);
        if (bad) {
          if (put.ok() || put.status().code() != absl::StatusCode::kInvalidArgument) {
            failures[t] += absl::StrCat("bad put round ", r, ": ", put.status().ToString(), "; ");
          } else {
            bad_put_errors.fetch_add(1);
          }
          continue;
        }
        if (!put.ok() || put->blocks_stored != 1 || put->bytes_stored != b.payload.size() ||
            put->block_bytes_stored.size() != 1) {
          failures[t] += absl::StrCat("put round ", r, ": ", put.status().ToString(), "; ");
          continue;
        }
        const bool small = t == small_buffer_thread && r % 2 == 1;
        std::string buf(small ? 100 : b.payload.size() + 7, '\0');
        std::span<uint8_t> span(reinterpret_cast<uint8_t*>(buf.data()), buf.size());
        auto get = co->GetInto("co-direct", std::span(&b.key, 1), std::span(&span, 1),
                               v1::PAYLOAD_FORMAT_ENCODED, far);
        if (small) {
          if (get.ok() || get.status().code() != absl::StatusCode::kOutOfRange) {
            failures[t] += absl::StrCat("small get round ", r, ": ", get.status().ToString());
          } else {
            small_get_errors.fetch_add(1);
          }
          continue;
        }
        if (!get.ok() || get->size() != 1 || !(*get)[0].found() ||
            buf.substr(0, (*get)[0].size()) != seqs[t].encoded[r]) {
          failures[t] += absl::StrCat("get round ", r, ": ", get.status().ToString(), "; ");
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
  EXPECT_EQ(bad_put_errors.load(), kRounds / 2);
  EXPECT_EQ(small_get_errors.load(), kRounds / 2);
  const Coalescer::Counters c = co->counters();
  EXPECT_EQ(c.calls, uint64_t{kThreads * kRounds * 2 - kRounds / 2});
  // Calls queue behind the one on the wire (for up to 300 ms), so they share streams.
  EXPECT_LT(c.batches, c.calls);
  EXPECT_LT(put_calls.load(), kThreads * kRounds);
}

// The Client's own coalescing (default options, TCP and shared memory): concurrent
// single-block puts and gets of many threads come back bit-exact.
TEST_F(CoalescerTest, ClientDefaultsCoalesceBitExact) {
  for (bool shm : {false, true}) {
    const std::string ns = shm ? "co-client-shm" : "co-client-tcp";
    auto client = Connect(ns, ClientOptions{}.coalesce_max_delay_us, shm);
    ASSERT_NE(client, nullptr);
    const kv::Layout layout = SmallLayout();
    std::vector<Sequence> seqs;
    for (int t = 0; t < kThreads; ++t) seqs.push_back(MakeSequence(ns, layout, 4, 900 + t));
    std::latch start(kThreads);
    std::vector<std::string> failures(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();
        for (size_t i = 0; i < seqs[t].blocks.size(); ++i) {
          auto put = client->PutBlocks(ns, std::span(&seqs[t].blocks[i], 1));
          if (!put.ok() || put->blocks_stored != 1) failures[t] += put.status().ToString();
        }
        std::vector<std::string> bufs(seqs[t].keys.size(),
                                      std::string(seqs[t].encoded[0].size(), 0));
        for (size_t i = 0; i < seqs[t].keys.size(); ++i) {
          std::span<uint8_t> span(reinterpret_cast<uint8_t*>(bufs[i].data()), bufs[i].size());
          auto get = client->GetBlocksInto(ns, std::span(&seqs[t].keys[i], 1), std::span(&span, 1));
          if (!get.ok() || !(*get)[0].found() ||
              bufs[i].substr(0, (*get)[0].size()) != seqs[t].encoded[i]) {
            failures[t] += absl::StrCat("get ", i, ": ", get.status().ToString(), "; ");
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << ns << " thread " << t;
  }
}

// The compact Lookup answer expands to exactly the verbose one, with and without a lease;
// a request that does not ask for it (an old client) still gets `blocks`.
TEST_F(CoalescerTest, CompactLookupEqualsVerboseForm) {
  auto client = Connect("co-lookup", 0);
  ASSERT_NE(client, nullptr);
  const kv::Layout layout = SmallLayout();
  Sequence s = MakeSequence("co-lookup", layout, 6, 77);
  ASSERT_OK(client->PutBlocks("co-lookup", std::span(s.blocks).first(4)));
  std::vector<std::string> keys = s.keys;
  keys.insert(keys.begin() + 5, s.keys[1]);  // resident after a miss

  auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  auto stub = v1::KvCache::NewStub(channel);
  for (uint64_t lease_ms : {uint64_t{0}, uint64_t{5000}}) {
    v1::LookupResponse forms[2];
    for (int compact = 0; compact < 2; ++compact) {
      v1::LookupRequest req;
      req.set_namespace_("co-lookup");
      for (const auto& k : keys) req.add_keys(k);
      req.set_lease_ms(lease_ms);
      req.set_compact(compact == 1);
      grpc::ClientContext ctx;
      ASSERT_OK(stub->Lookup(&ctx, req, &forms[compact]));
    }
    const v1::LookupResponse& verbose = forms[0];
    v1::LookupResponse compact = forms[1];
    EXPECT_FALSE(protocol::IsCompactLookup(verbose));
    ASSERT_EQ(verbose.blocks_size(), static_cast<int>(keys.size()));
    ASSERT_TRUE(protocol::IsCompactLookup(compact));
    EXPECT_EQ(compact.blocks_size(), 0);
    EXPECT_EQ(compact.tiers().size(), keys.size());
    EXPECT_LT(compact.ByteSizeLong(), verbose.ByteSizeLong());
    ASSERT_OK(protocol::ExpandLookup(&compact));
    EXPECT_EQ(compact.prefix_blocks(), 4u);
    EXPECT_EQ(compact.prefix_blocks(), verbose.prefix_blocks());
    EXPECT_EQ(compact.leased_blocks(), verbose.leased_blocks());
    EXPECT_EQ(compact.lease_limit(), verbose.lease_limit());
    ASSERT_EQ(compact.blocks_size(), verbose.blocks_size());
    for (int i = 0; i < verbose.blocks_size(); ++i) {
      const auto& a = compact.blocks(i);
      const auto& b = verbose.blocks(i);
      EXPECT_EQ(a.tier(), b.tier()) << i;
      EXPECT_EQ(a.owner(), b.owner()) << i;
      // Two lookups take two leases: the same keys are leased, under different ids.
      EXPECT_EQ(a.lease_id() != 0, b.lease_id() != 0) << i;
      EXPECT_EQ(lease_ms > 0 && i < 4, a.lease_id() != 0) << i;  // the leased prefix
    }
  }
  // The Client asks for the compact form and hands back `blocks` unless told otherwise.
  auto r = client->Lookup("co-lookup", keys);
  ASSERT_OK(r);
  EXPECT_EQ(r->blocks_size(), static_cast<int>(keys.size()));
  EXPECT_EQ(r->blocks(5).owner(), client->connect_info().node_id);
  LookupOptions keep;
  keep.keep_compact = true;
  auto raw = client->Lookup("co-lookup", keys, keep);
  ASSERT_OK(raw);
  EXPECT_TRUE(protocol::IsCompactLookup(*raw));
  EXPECT_EQ(raw->owners_size(), 1);
}

}  // namespace
}  // namespace kvtier::client
