// Bounded write-back, bounded Flush calls and the loading state, against real kvtierd
// processes (issue 16): SIGTERM with the write-back debt at its bound exits within
// shutdown_grace_ms and every acknowledged block is durable; a long Flush under short
// deadlines answers every call in time with progress; health is NOT_SERVING (and data
// calls UNAVAILABLE / SERVER_LOADING) until the index is loaded.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "protocol/convert.h"
#include "protocol/error_detail.h"
#include "service/config.h"
#include "storage/tiered_store.h"
#include "storage/write_back.h"
#include "tests/integration/sequences.h"
#include "tests/testing/layouts.h"
#include "tests/testing/namespace_spec.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::client {
namespace {

using testing::ServerProcess;
using testing::TinyLayout;
using testing::TempDir;

constexpr uint32_t kGraceMs = 4000;

v1::NamespaceSpec Spec(const std::string& name, const kv::Layout& layout) {
  return testing::NamespaceSpecOf(name, layout, v1::CODEC_FP16, "", "write-back-test");
}

// One 64 KiB fp16 block: 1 layer x 8 heads x 128 x 16 tokens.
kv::Layout MediumLayout() {
  kv::Layout l;
  l.num_layers = 1;
  return l;
}

std::unique_ptr<Client> MustConnect(const std::string& address,
                                    std::optional<v1::NamespaceSpec> spec) {
  ClientOptions o;
  o.server = address;
  o.namespace_spec = std::move(spec);
  o.num_channels = 1;
  o.shared_memory = false;
  auto c = Client::Connect(o);
  EXPECT_OK(c);
  return c.ok() ? std::move(*c) : nullptr;
}

// grpc.health.v1.Health/Check of the whole server: 1 SERVING, 2 NOT_SERVING, -1 error.
int HealthStatus(grpc::Channel* channel) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty("", 0);
  grpc::ByteBuffer req(&empty, 1);
  grpc::ByteBuffer resp;
  grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check",
                                   grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel, method, &ctx, req, &resp);
  if (!s.ok()) return -1;
  grpc::Slice out;
  if (!resp.DumpToSingleSlice(&out).ok() || out.size() != 2) return -1;
  return out.begin()[1];
}

std::string WriteConfig(const TempDir& dir, const std::string& extra) {
  const std::string path = dir.Sub("kvtierd.textproto");
  std::ofstream(path) << "shutdown_grace_ms: " << kGraceMs << "\nexecutor_threads: 2\n" << extra;
  return path;
}

TEST(WriteBackShutdownTest, SigtermWithFullDebtExitsWithinGraceAndKeepsEveryBlock) {
  TempDir dir;
  const std::string config = WriteConfig(dir, "");
  const std::vector<std::string> args = {"--config", config, "--hot-capacity", "256MiB",
                                         "--shm-socket", "off"};
  auto server = ServerProcess::StartKvtierd(dir.Sub("data"), args);
  ASSERT_OK(server);
  auto client = MustConnect(server->address(), Spec("wb", MediumLayout()));
  ASSERT_NE(client, nullptr);

  // The bounds kvtierd derives from the 4 s grace; 1.25x the byte bound in 64 KiB blocks.
  const storage::WriteBackBounds bounds = storage::WriteBackBoundsForGrace(kGraceMs);
  const Sequence probe = MakeSequence("wb", MediumLayout(), 1, 1);
  const uint64_t block_bytes = probe.encoded[0].size();
  const uint32_t n = static_cast<uint32_t>(bounds.max_unflushed_bytes * 5 / 4 / block_bytes);
  const Sequence seq = MakeSequence("wb", MediumLayout(), n, 7);
  uint64_t debt_at_signal = 0;
  for (uint32_t start = 0; start < n; start += 64) {
    const uint32_t len = std::min<uint32_t>(64, n - start);
    auto put = client->PutBlocks("wb", std::span(seq.blocks).subspan(start, len));
    ASSERT_OK(put);
    auto st = client->Stats();
    ASSERT_OK(st);
    ASSERT_EQ(st->max_unflushed_bytes(), bounds.max_unflushed_bytes);
    ASSERT_LE(st->unflushed_bytes(), bounds.max_unflushed_bytes) << "after block " << start;
    debt_at_signal = st->unflushed_bytes();
  }
  // The flusher drains to half the bound in the background; the last Puts refill it.
  EXPECT_GE(debt_at_signal, bounds.max_unflushed_bytes / 4);
  std::printf("write-back debt at SIGTERM: %llu bytes (bound %llu)\n",
              static_cast<unsigned long long>(debt_at_signal),
              static_cast<unsigned long long>(bounds.max_unflushed_bytes));
  client.reset();

  const auto t0 = std::chrono::steady_clock::now();
  auto code = server->Terminate(kGraceMs);  // DEADLINE_EXCEEDED past the grace
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
  ASSERT_OK(code) << code.status() << " after " << ms << " ms";
  EXPECT_EQ(*code, 0);
  std::printf("SIGTERM to exit: %lld ms (grace %u ms)\n", static_cast<long long>(ms), kGraceMs);

  // Every acknowledged block is durable: restart and read them all back from cold.
  auto again = ServerProcess::StartKvtierd(dir.Sub("data"), args);
  ASSERT_OK(again);
  client = MustConnect(again->address(), std::nullopt);
  ASSERT_NE(client, nullptr);
  for (uint32_t start = 0; start < n; start += 64) {
    const uint32_t len = std::min<uint32_t>(64, n - start);
    auto got = client->GetBlocks("wb", std::span(seq.keys).subspan(start, len));
    ASSERT_OK(got);
    for (uint32_t i = 0; i < len; ++i) {
      ASSERT_TRUE((*got)[i].info.found()) << "block " << start + i;
      ASSERT_EQ((*got)[i].data, seq.encoded[start + i]) << "block " << start + i;
    }
  }
}

TEST(WriteBackShutdownTest, LongFlushUnderShortDeadlinesReportsProgress) {
  TempDir dir;
  // Unbounded debt, so every block waits for Flush.
  const std::string config =
      WriteConfig(dir, "max_unflushed_bytes: 1099511627776\nmax_unflushed_blocks: 1000000000\n");
  auto server = ServerProcess::StartKvtierd(
      dir.Sub("data"), {"--config", config, "--hot-capacity", "64MiB", "--shm-socket", "off"});
  ASSERT_OK(server);
  auto client = MustConnect(server->address(), Spec("tiny", TinyLayout()));
  ASSERT_NE(client, nullptr);
  constexpr uint32_t kChains = 40;
  constexpr uint32_t kChainBlocks = 1000;
  for (uint32_t c = 0; c < kChains; ++c) {
    const Sequence seq = MakeSequence("tiny", TinyLayout(), kChainBlocks, 100 + c);
    auto put = client->PutBlocks("tiny", seq.blocks);
    ASSERT_OK(put);
  }
  auto st = client->Stats();
  ASSERT_OK(st);
  ASSERT_EQ(st->unflushed_blocks(), kChains * kChainBlocks);

  // Each call is bounded by the server (max_ms) well inside its deadline, so the test
  // does not depend on this machine's load; the deadline stays the hard bound.
  constexpr uint32_t kMaxMs = 50;
  constexpr int64_t kDeadlineMs = 2000;
  uint64_t flushed = 0;
  uint64_t remaining = st->unflushed_blocks();
  int calls = 0;
  while (true) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = client->FlushStep("tiny", kMaxMs, {.deadline_ms = kDeadlineMs});
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - t0)
                        .count();
    ASSERT_OK(r) << "call " << calls << ": " << r.status() << " after " << ms << " ms";
    EXPECT_LE(ms, kDeadlineMs);
    ++calls;
    flushed += r->flushed_blocks();
    EXPECT_EQ(r->remaining_blocks() + flushed, uint64_t{kChains * kChainBlocks});
    EXPECT_LE(r->remaining_blocks(), remaining);
    remaining = r->remaining_blocks();
    if (r->done()) break;
    ASSERT_GT(r->flushed_blocks(), 0u) << "call " << calls << " made no progress";
  }
  std::printf("flushed %llu blocks in %d calls of %lld ms\n",
              static_cast<unsigned long long>(flushed), calls,
              static_cast<long long>(kMaxMs));
  EXPECT_GE(calls, 2) << "the flush fit one call: grow the test";
  EXPECT_EQ(flushed, uint64_t{kChains * kChainBlocks});
  EXPECT_EQ(remaining, 0u);
  st = client->Stats();
  ASSERT_OK(st);
  EXPECT_EQ(st->unflushed_blocks(), 0u);
  EXPECT_EQ(st->unflushed_bytes(), 0u);
}

// Runs `command` (stderr folded in); returns its output.
std::string RunCommand(const std::string& command) {
  FILE* f = popen(absl::StrCat(command, " 2>&1").c_str(), "r");
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
  pclose(f);
  return out;
}

TEST(WriteBackShutdownTest, CliFlushLoopsWithProgressUntilDone) {
  TempDir dir;
  const std::string config =
      WriteConfig(dir, "max_unflushed_bytes: 1099511627776\nmax_unflushed_blocks: 1000000000\n");
  auto server = ServerProcess::StartKvtierd(
      dir.Sub("data"), {"--config", config, "--hot-capacity", "64MiB", "--shm-socket", "off"});
  ASSERT_OK(server);
  auto client = MustConnect(server->address(), Spec("cli", TinyLayout()));
  ASSERT_NE(client, nullptr);
  for (uint32_t c = 0; c < 10; ++c) {
    const Sequence seq = MakeSequence("cli", TinyLayout(), 1000, 900 + c);
    ASSERT_OK(client->PutBlocks("cli", seq.blocks));
  }
  // 1 ms per call: many calls, each reporting progress, the last one done.
  const std::string out =
      RunCommand(absl::StrCat(testing::BinaryDir(), "/client/cli/kvtier flush --server ",
                              server->address(), " --namespace cli --max-ms 1"));
  EXPECT_NE(out.find("call 1: flushed "), std::string::npos) << out;
  EXPECT_NE(out.find("flushed 10000 blocks in "), std::string::npos) << out;
  EXPECT_NE(out.find("0 unflushed blocks (0 bytes) remain"), std::string::npos) << out;
  auto st = client->Stats();
  ASSERT_OK(st);
  EXPECT_EQ(st->unflushed_blocks(), 0u);
}

TEST(WriteBackShutdownTest, HealthIsNotServingUntilTheIndexIsLoaded) {
  TempDir dir;
  // A cold tier big enough that loading it takes a while (hundreds of ms here).
  constexpr uint32_t kChains = 60;
  constexpr uint32_t kChainBlocks = 1000;
  const v1::NamespaceSpec spec = Spec("load", TinyLayout());
  std::vector<std::string> first_chain;
  {
    storage::StoreOptions o;
    o.data_dir = dir.Sub("data");
    o.hot_capacity_bytes = 16ull << 20;
    o.hot_allocator = "malloc";
    auto store = storage::TieredStore::Open(o);
    ASSERT_OK(store);
    auto ns = service::NamespaceFromProto(spec, "spec");
    ASSERT_OK(ns);
    ns->write_through = true;
    ASSERT_OK((*store)->RegisterNamespace(*ns));
    for (uint32_t c = 0; c < kChains; ++c) {
      const Sequence seq = MakeSequence("load", TinyLayout(), kChainBlocks, 500 + c);
      std::vector<storage::BlockPut> puts;
      for (const PutBlock& b : seq.blocks) {
        puts.push_back({.key = b.key,
                        .parent_key = b.parent_key,
                        .block_index = b.block_index,
                        .payload = std::string_view(reinterpret_cast<const char*>(b.payload.data()),
                                                    b.payload.size())});
      }
      ASSERT_OK((*store)->Put("load", puts));
      if (c == 0) first_chain = seq.keys;
    }
  }

  auto server = ServerProcess::Start(
      testing::KvtierdPath(),
      {"--port", "0", "--data-dir", dir.Sub("data"), "--hot-capacity", "64MiB", "--shm-socket",
       "off"},
      20000, ServerProcess::kBoundPrefix);
  ASSERT_OK(server);
  auto channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
  // Bound, still loading: NOT_SERVING, and data / admin calls are refused as loading.
  EXPECT_EQ(HealthStatus(channel.get()), 2);
  {
    auto admin = v1::KvCacheAdmin::NewStub(channel);
    grpc::ClientContext ctx;
    v1::StatsResponse resp;
    const grpc::Status s = admin->Stats(&ctx, v1::StatsRequest(), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    EXPECT_NE(s.error_message().find("loading"), std::string::npos) << s.error_message();
    EXPECT_TRUE(protocol::HasErrorReason(protocol::FromGrpcStatus("Stats", s),
                                         v1::SERVER_LOADING));
  }
  // Then SERVING, with the whole index there (bounded wait for the load to finish).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int health = 2;
  while ((health = HealthStatus(channel.get())) != 1 &&
         std::chrono::steady_clock::now() < give_up) {
  }
  ASSERT_EQ(health, 1);
  auto client = MustConnect(server->address(), std::nullopt);
  ASSERT_NE(client, nullptr);
  auto st = client->Stats("load");
  ASSERT_OK(st);
  ASSERT_EQ(st->namespaces_size(), 1);
  EXPECT_EQ(st->namespaces(0).distinct_blocks(), uint64_t{kChains * kChainBlocks});
  auto lookup = client->Lookup("load", first_chain);
  ASSERT_OK(lookup);
  EXPECT_EQ(lookup->prefix_blocks(), kChainBlocks);
}

}  // namespace
}  // namespace kvtier::client
