// The payload-path conformance suite (docs/dataplane.md): every path a client can take -
// the shared-memory socket, shared memory named on a gRPC stream, UCX with the Put's call
// frame over UCX, UCX with the Put's header on a gRPC call, the gRPC stream -
// goes through the same cases against a real kvtierd process (127.0.0.1; UCX on its TCP
// transport) with the real Client configured so that path comes first:
//   round trip     Put then Get is bit-exact, and the payloads took the path;
//   lost session   after a server restart the client drops the path (shared memory, UCX)
//                  and the call still succeeds on the next one;
//   refusal        a request the server refuses gets the same status on every path,
//                  nothing is stored, and the path stays in use;
//   deadline       against a frozen server the call ends DEADLINE_EXCEEDED, and the
//                  next call succeeds once the server runs again (on the same path;
//                  UCX may have closed its endpoint and take the stream);
//   oversize       a block over the layout's bound is refused naming its size; a block
//                  that does not fit its Get buffer is OUT_OF_RANGE and nothing past the
//                  buffer is written;
//   damaged        a payload that is not an encoded block is refused naming it, nothing
//                  is stored.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kv/codec.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "tests/integration/sequences.h"
#include "tests/testing/layouts.h"
#include "tests/testing/namespace_spec.h"
#include "tests/testing/server_process.h"
#include "tests/testing/static_peer_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::client {
namespace {

namespace v1 = ::kvtier::v1;
using ::testing::HasSubstr;
using testing::ServerProcess;
using testing::TempDir;

constexpr kv::Layout kLayout = testing::SmallLayout();  // 32 KiB raw blocks
constexpr char kNs[] = "fp16";

enum class Path { kShmSocket, kShmStream, kUcxCall, kUcx, kStream };

std::string PathName(const ::testing::TestParamInfo<Path>& info) {
  switch (info.param) {
    case Path::kShmSocket: return "SharedMemorySocket";
    case Path::kShmStream: return "SharedMemoryStream";
    case Path::kUcxCall: return "UcxCall";
    case Path::kUcx: return "UcxGrpcHeader";
    case Path::kStream: return "Stream";
  }
  return "Unknown";
}

std::vector<std::span<uint8_t>> Spans(std::vector<std::string>& bufs) {
  std::vector<std::span<uint8_t>> spans;
  for (std::string& b : bufs) spans.emplace_back(reinterpret_cast<uint8_t*>(b.data()), b.size());
  return spans;
}

class PathConformanceTest : public ::testing::TestWithParam<Path> {
 protected:
  static void SetUpTestSuite() {
    // Children inherit it: the server's UCX uses TCP only, like two hosts without RDMA.
    setenv("UCX_TLS", "tcp", 1);
  }

  void SetUp() override {
    StartServer(testing::PickFreePort());
    client_ = Connect();
    ASSERT_NE(client_, nullptr);
    ASSERT_TRUE(OnPath()) << "the client does not use the path under test";
  }

  void TearDown() override {
    if (stopped_ && server_ != nullptr) kill(server_->pid(), SIGCONT);
  }

  void StartServer(int port) {
    auto p = ServerProcess::Start(testing::KvtierdPath(),
                                  {"--port", std::to_string(port), "--data-dir",
                                   dir_.Sub("data"), "--hot-capacity", "64MiB", "--ucx"});
    ASSERT_OK(p);
    server_ = std::make_unique<ServerProcess>(std::move(*p));
  }

  std::unique_ptr<Client> Connect() {
    ClientOptions o;
    o.server = server_->address();
    o.namespace_spec = testing::NamespaceSpecOf(kNs, kLayout, v1::CODEC_FP16);
    o.num_channels = 1;
    o.max_streams_per_call = 1;  // one call, one stream: all or nothing
    const Path path = GetParam();
    o.shared_memory = path == Path::kShmSocket || path == Path::kShmStream;
    o.shared_memory_bytes = 8 << 20;
    o.shared_memory_socket_calls = path == Path::kShmSocket;
    o.ucx = path == Path::kUcx || path == Path::kUcxCall;
    o.ucx_calls = path == Path::kUcxCall;
    o.ucx_transports = "tcp";
    auto c = Client::Connect(o);
    EXPECT_OK(c);
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Whether client_ would put its next call on the path under test.
  bool OnPath() {
    switch (GetParam()) {
      case Path::kShmSocket:
      case Path::kShmStream:
        return client_->uses_shared_memory();
      case Path::kUcxCall:
      case Path::kUcx:
        return client_->uses_ucx();
      case Path::kStream:
        return !client_->uses_shared_memory() && !client_->uses_ucx();
    }
    return false;
  }

  v1::StatsResponse ServerStats() {
    auto stub = v1::KvCacheAdmin::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::StatsResponse resp;
    EXPECT_OK(stub->Stats(&ctx, v1::StatsRequest(), &resp));
    return resp;
  }

  // How many of `keys` the server holds.
  int Stored(const std::vector<std::string>& keys) {
    auto infos = client_->GetBlocks(kNs, keys);
    EXPECT_OK(infos);
    int found = 0;
    for (const FetchedBlock& b : infos.ok() ? *infos : std::vector<FetchedBlock>{}) {
      found += b.info.found() ? 1 : 0;
    }
    return found;
  }

  // Puts `seq` and reads it back into private buffers: bit-exact.
  void RoundTrip(const Sequence& seq) {
    auto put = client_->PutBlocks(kNs, seq.blocks);
    ASSERT_OK(put);
    EXPECT_EQ(put->blocks_stored, seq.blocks.size());
    std::vector<std::string> bufs(seq.keys.size(), std::string(seq.encoded[0].size(), '\0'));
    auto infos = client_->GetBlocksInto(kNs, seq.keys, Spans(bufs));
    ASSERT_OK(infos);
    for (size_t i = 0; i < seq.keys.size(); ++i) {
      ASSERT_TRUE((*infos)[i].found()) << i;
      EXPECT_EQ(bufs[i].substr(0, (*infos)[i].size()), seq.encoded[i]) << i;
    }
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<Client> client_;
  bool stopped_ = false;
};

TEST_P(PathConformanceTest, RoundTripIsBitExactAndTakesThePath) {
  const v1::StatsResponse before = ServerStats();
  const uint64_t socket_before = client_->shared_memory_socket_calls();
  const uint64_t ucx_calls_before = client_->ucx_calls();
  const Sequence seq = MakeSequence(kNs, kLayout, 6, 1);
  RoundTrip(seq);
  const v1::StatsResponse after = ServerStats();
  uint64_t bytes = 0;
  for (const std::string& e : seq.encoded) bytes += e.size();
  const uint64_t socket_calls = client_->shared_memory_socket_calls() - socket_before;
  switch (GetParam()) {
    case Path::kShmSocket:
      EXPECT_EQ(socket_calls, 2u);  // the Put and the Get
      break;
    case Path::kShmStream:
      EXPECT_EQ(socket_calls, 0u);
      break;
    case Path::kUcxCall:
    case Path::kUcx:
      EXPECT_EQ(after.ucx_put_bytes() - before.ucx_put_bytes(), bytes);
      EXPECT_EQ(after.ucx_get_bytes() - before.ucx_get_bytes(), bytes);
      // The Put's call went as a frame over UCX, or as a gRPC call.
      EXPECT_EQ(client_->ucx_calls() - ucx_calls_before, GetParam() == Path::kUcxCall ? 1u : 0u);
      break;
    case Path::kStream:
      EXPECT_EQ(socket_calls, 0u);
      EXPECT_EQ(after.ucx_put_bytes(), before.ucx_put_bytes());
      break;
  }
  EXPECT_TRUE(OnPath());
}

TEST_P(PathConformanceTest, AfterALostSessionTheCallSucceedsOnTheNextPath) {
  const Sequence seq = MakeSequence(kNs, kLayout, 4, 2);
  ASSERT_OK(client_->PutBlocks(kNs, std::span(seq.blocks).first(2)));
  const int port = server_->port();
  auto code = server_->Terminate();
  ASSERT_OK(code);
  StartServer(port);  // same address and data dir; every session is gone
  ASSERT_OK(client_->Stats());  // retried until the channel reconnects

  auto put = client_->PutBlocks(kNs, std::span(seq.blocks).subspan(2));
  ASSERT_OK(put);
  EXPECT_EQ(put->blocks_stored, 2u);
  std::vector<std::string> bufs(4, std::string(seq.encoded[0].size(), '\0'));
  auto infos = client_->GetBlocksInto(kNs, seq.keys, Spans(bufs));
  ASSERT_OK(infos);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(bufs[i], seq.encoded[i]) << i;
  // The dead session's path is dropped; the stream stays.
  EXPECT_FALSE(client_->uses_shared_memory());
  EXPECT_FALSE(client_->uses_ucx());
}

TEST_P(PathConformanceTest, ARefusedPutHasTheSameStatusOnEveryPathAndStoresNothing) {
  Sequence seq = MakeSequence(kNs, kLayout, 3, 3);
  seq.blocks[2].parent_key = std::string(33, 'p');  // keys are 1..32 bytes
  auto put = client_->PutBlocks(kNs, seq.blocks);
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), absl::StatusCode::kInvalidArgument) << put.status();
  EXPECT_THAT(std::string(put.status().message()), HasSubstr("blocks[2].parent_key"));
  EXPECT_EQ(Stored(seq.keys), 0);
  EXPECT_TRUE(OnPath());  // a refusal is an answer, not a reason to leave the path
}

TEST_P(PathConformanceTest, AgainstAFrozenServerTheCallEndsAtItsDeadline) {
  const Sequence seq = MakeSequence(kNs, kLayout, 4, 4);
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  stopped_ = true;
  ASSERT_TRUE(testing::WaitUntilStopped(server_->pid()));
  // The server runs again only once the call has returned: nothing but the deadline can
  // end it, however late a busy machine starts the call.
  PutOptions opts;
  opts.deadline_ms = 300;
  auto put = client_->PutBlocks(kNs, seq.blocks, opts);
  kill(server_->pid(), SIGCONT);
  stopped_ = false;
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), absl::StatusCode::kDeadlineExceeded) << put.status();
  // The path is still in use. UCX may have lost its endpoint: payload sends the server has
  // not taken 5 s past the deadline make the client close it (UcxChannel::PutSends::Wait),
  // and whether the resumed server takes them in time varies; the call then goes on over
  // the stream.
  if (GetParam() != Path::kUcx && GetParam() != Path::kUcxCall) {
    EXPECT_TRUE(OnPath());
  }
  RoundTrip(seq);
}

TEST_P(PathConformanceTest, OversizeBlocksAreRefusedAndGetsNeverWritePastTheBuffer) {
  Sequence seq = MakeSequence(kNs, kLayout, 2, 5);
  const std::string big(2 * kLayout.BytesPerBlock(), 'x');
  std::vector<PutBlock> blocks = {seq.blocks[0]};
  blocks[0].payload = kv::AsBytes(big);
  auto put = client_->PutBlocks(kNs, blocks);
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), absl::StatusCode::kInvalidArgument) << put.status();
  EXPECT_THAT(std::string(put.status().message()), HasSubstr("blocks[0].size"));
  EXPECT_EQ(Stored(seq.keys), 0);

  ASSERT_OK(client_->PutBlocks(kNs, seq.blocks));
  // Buffers one byte short, inside strings whose tails must stay untouched.
  const size_t short_by_one = seq.encoded[0].size() - 1;
  std::vector<std::string> bufs(2, std::string(short_by_one + 64, '#'));
  std::vector<std::span<uint8_t>> spans;
  for (std::string& b : bufs) {
    spans.emplace_back(reinterpret_cast<uint8_t*>(b.data()), short_by_one);
  }
  auto infos = client_->GetBlocksInto(kNs, seq.keys, spans);
  ASSERT_FALSE(infos.ok());
  EXPECT_EQ(infos.status().code(), absl::StatusCode::kOutOfRange) << infos.status();
  for (const std::string& b : bufs) EXPECT_EQ(b.substr(short_by_one), std::string(64, '#'));
  EXPECT_TRUE(OnPath());
}

TEST_P(PathConformanceTest, ADamagedPayloadIsRefusedNamingItAndStoresNothing) {
  const Sequence seq = MakeSequence(kNs, kLayout, 2, 6);
  std::string damaged = seq.encoded[1];
  damaged[0] ^= 0x5a;  // the codec header's magic
  std::vector<PutBlock> blocks = seq.blocks;
  blocks[1].payload = kv::AsBytes(damaged);
  auto put = client_->PutBlocks(kNs, blocks);
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().code(), absl::StatusCode::kInvalidArgument) << put.status();
  EXPECT_THAT(std::string(put.status().message()), HasSubstr("blocks[1].payload"));
  EXPECT_EQ(Stored(seq.keys), 0);  // block 0 was valid, but the Put is all or nothing
  EXPECT_TRUE(OnPath());
}

INSTANTIATE_TEST_SUITE_P(EveryPath, PathConformanceTest,
                         ::testing::Values(Path::kShmSocket, Path::kShmStream, Path::kUcxCall,
                                           Path::kUcx, Path::kStream),
                         PathName);

}  // namespace
}  // namespace kvtier::client
