// The same-node shared-memory data path end to end: a real kvtierd process, the real
// Client (client/client.h) and raw stub calls for malformed requests.
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/shared_region.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kv/codec.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "protocol/shm_wire.h"
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

v1::NamespaceSpec Spec(const std::string& name, v1::Codec codec = v1::CODEC_FP16) {
  return testing::NamespaceSpecOf(name, kLayout, codec);
}

// MakeSequence's blocks with payloads from `payloads` instead.
std::vector<PutBlock> WithPayloads(const Sequence& seq,
                                   const std::vector<std::span<const uint8_t>>& payloads) {
  EXPECT_EQ(payloads.size(), seq.blocks.size());
  std::vector<PutBlock> out = seq.blocks;
  for (size_t i = 0; i < out.size() && i < payloads.size(); ++i) out[i].payload = payloads[i];
  return out;
}

std::string AsString(std::span<const uint8_t> b, uint64_t n) {
  return std::string(reinterpret_cast<const char*>(b.data()), n);
}

class SharedMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(testing::PickFreePort()); }

  void StartServer(int port, std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), {"--hot-capacity", "64MiB"});
    std::vector<std::string> args = {"--port", std::to_string(port), "--data-dir",
                                     dir_.Sub("data")};
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = ServerProcess::Start(testing::KvtierdPath(), args);
    ASSERT_OK(p);
    server_ = std::make_unique<ServerProcess>(std::move(*p));
  }

  std::unique_ptr<Client> Connect(const std::string& ns, v1::Codec codec = v1::CODEC_FP16,
                                  bool shared_memory = true, std::string socket = "",
                                  uint64_t region_bytes = 16 << 20) {
    ClientOptions o;
    o.server = server_->address();
    o.namespace_spec = Spec(ns, codec);
    o.num_channels = 2;
    o.shared_memory = shared_memory;
    o.shared_memory_bytes = region_bytes;
    o.shared_memory_socket = std::move(socket);
    auto c = Client::Connect(o);
    EXPECT_OK(c);
    return c.ok() ? std::move(*c) : nullptr;
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(SharedMemoryTest, SameHostClientRoundTripsBitExactlyThroughSharedMemory) {
  auto shm = Connect("fp16");
  ASSERT_NE(shm, nullptr);
  ASSERT_TRUE(shm->uses_shared_memory()) << shm->connect_info().shared_memory_error;
  auto tcp = Connect("fp16", v1::CODEC_FP16, /*shared_memory=*/false);
  ASSERT_NE(tcp, nullptr);
  EXPECT_FALSE(tcp->uses_shared_memory());

  // Blocks 0-3 from private memory (staged), 4-7 from SharedBuffers (no client copy).
  const Sequence c = MakeSequence("fp16", kLayout, 8, 11);
  std::vector<SharedBuffer> shared;
  std::vector<std::span<const uint8_t>> payloads;
  for (size_t i = 0; i < 8; ++i) {
    if (i < 4) {
      payloads.push_back(kv::AsBytes(c.encoded[i]));
      continue;
    }
    auto b = shm->AllocateSharedBuffer(c.encoded[i].size());
    ASSERT_OK(b);
    std::memcpy(b->data(), c.encoded[i].data(), c.encoded[i].size());
    payloads.push_back(std::span<const uint8_t>(b->data(), b->size()));
    shared.push_back(std::move(*b));
  }
  auto put = shm->PutBlocks("fp16", WithPayloads(c, payloads));
  ASSERT_OK(put);
  EXPECT_EQ(put->blocks_stored, 8u);

  // Into private buffers (staged), into SharedBuffers, and over TCP: all bit-exact.
  std::vector<std::string> priv(8, std::string(c.encoded[0].size() + 100, '\0'));
  std::vector<SharedBuffer> into;
  std::vector<std::span<uint8_t>> priv_spans, shared_spans;
  for (size_t i = 0; i < 8; ++i) {
    priv_spans.emplace_back(reinterpret_cast<uint8_t*>(priv[i].data()), priv[i].size());
    auto b = shm->AllocateSharedBuffer(priv[i].size());
    ASSERT_OK(b);
    shared_spans.push_back(b->span());
    into.push_back(std::move(*b));
  }
  for (const auto& spans : {priv_spans, shared_spans}) {
    auto infos = shm->GetBlocksInto("fp16", c.keys, spans);
    ASSERT_OK(infos);
    for (size_t i = 0; i < 8; ++i) {
      ASSERT_TRUE((*infos)[i].found()) << i;
      EXPECT_EQ((*infos)[i].tier(), v1::TIER_HOT);
      EXPECT_EQ(AsString(spans[i], (*infos)[i].size()), c.encoded[i]) << i;
    }
  }
  auto over_tcp = tcp->GetBlocks("fp16", c.keys);
  ASSERT_OK(over_tcp);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ((*over_tcp)[i].data, c.encoded[i]) << i;

  // A miss leaves its buffer alone and says so; a too-small buffer is OUT_OF_RANGE.
  std::vector<std::string> keys = {c.keys[0], std::string(32, 'z')};
  std::memset(shared_spans[1].data(), 0x5a, 16);
  auto mixed = shm->GetBlocksInto("fp16", keys, std::span(shared_spans).first(2));
  ASSERT_OK(mixed);
  EXPECT_TRUE((*mixed)[0].found());
  EXPECT_FALSE((*mixed)[1].found());
  EXPECT_EQ(shared_spans[1][0], 0x5a);
  std::vector<std::span<uint8_t>> tiny = {shared_spans[0].first(100)};
  auto small = shm->GetBlocksInto("fp16", std::span(c.keys).first(1), tiny);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kOutOfRange) << small.status();
  EXPECT_THAT(std::string(small.status().message()), HasSubstr("shm_destinations[0]"));
  EXPECT_TRUE(shm->uses_shared_memory());
  EXPECT_GT(shm->shared_memory_socket_calls(), 0u);  // the calls went as socket frames
  auto stats = tcp->Stats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->shm_sessions(), 1u);  // `shm`'s; `tcp` has none
}

// Lookups of a same-host client go as frames on the region's socket, and answer as over
// gRPC: the same prefix, tiers, owners and leases, compact or expanded, and the same
// status, message and field for bad input.
TEST_F(SharedMemoryTest, LookupsGoOverTheSocketAndAnswerAsOverGrpc) {
  auto shm = Connect("fp16");
  ASSERT_NE(shm, nullptr);
  ASSERT_TRUE(shm->uses_shared_memory());
  auto tcp = Connect("fp16", v1::CODEC_FP16, /*shared_memory=*/false);
  ASSERT_NE(tcp, nullptr);
  const Sequence c = MakeSequence("fp16", kLayout, 6, 31);
  ASSERT_OK(tcp->PutBlocks("fp16", std::span(c.blocks).first(4)));
  std::vector<std::string> keys = c.keys;  // blocks 4 and 5 are not stored
  keys.push_back(std::string(32, 'x'));

  for (bool compact : {false, true}) {
    LookupOptions lo;
    lo.keep_compact = compact;
    const uint64_t before = shm->shared_memory_socket_calls();
    auto over_socket = shm->Lookup("fp16", keys, lo);
    auto over_grpc = tcp->Lookup("fp16", keys, lo);
    ASSERT_OK(over_socket);
    ASSERT_OK(over_grpc);
    EXPECT_EQ(shm->shared_memory_socket_calls(), before + 1) << "compact " << compact;
    EXPECT_EQ(over_socket->prefix_blocks(), 4u);
    EXPECT_EQ(over_socket->SerializeAsString(), over_grpc->SerializeAsString())
        << "compact " << compact;
  }

  // Leases: the socket's Lookup leases the prefix, and the lease ends like any other.
  LookupOptions leased;
  leased.lease_ms = 60000;
  auto held = shm->Lookup("fp16", keys, leased);
  ASSERT_OK(held);
  EXPECT_EQ(held->leased_blocks(), 4u);
  ASSERT_EQ(held->blocks_size(), 7);
  EXPECT_NE(held->blocks(0).lease_id(), 0u);
  auto stats = tcp->Stats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->leases().active(), 1u);
  auto released = shm->ReleaseLease("fp16", held->blocks(0).lease_id());
  ASSERT_OK(released);
  EXPECT_EQ(*released, 4u);

  // Bad input: the same status and message both ways, and nothing changes.
  const std::vector<std::string> bad = {c.keys[0], ""};
  for (const auto& [ns, ks] :
       {std::pair<std::string, std::vector<std::string>>{"nope", c.keys}, {"fp16", bad}}) {
    auto a = shm->Lookup(ns, ks);
    auto b = tcp->Lookup(ns, ks);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), b.status().code()) << a.status() << " vs " << b.status();
    EXPECT_EQ(a.status().message(), b.status().message());
  }
  EXPECT_THAT(std::string(shm->Lookup("fp16", bad).status().message()), HasSubstr("keys[1]"));
  auto again = shm->Lookup("fp16", c.keys);
  ASSERT_OK(again);
  EXPECT_EQ(again->prefix_blocks(), 4u);

  // Malformed Lookup frames, sent by hand: refused, and nothing changes. (A Lookup frame's
  // session only carries the caller's identity, so with auth off it is not checked.)
  auto stats_now = tcp->Stats();
  ASSERT_OK(stats_now);
  auto region = SharedRegion::Open(stats_now->shared_memory().socket_path(), 1 << 20,
                                   stats_now->shared_memory().instance_id());
  ASSERT_OK(region);
  namespace shm_wire = protocol::shm;
  struct Case {
    std::string body;
    grpc::StatusCode code;
    std::string text;
  };
  const Case cases[] = {
      {"x", grpc::StatusCode::INVALID_ARGUMENT, "no session length"},
      {std::string("\x40\x00", 2) + "ab", grpc::StatusCode::INVALID_ARGUMENT, "session length"},
      {shm_wire::JoinSessionAndRequest((*region)->session(), "\xff\xff\xff"),
       grpc::StatusCode::INVALID_ARGUMENT, "do not parse as kvtier.v1.LookupRequest"},
  };
  for (const Case& k : cases) {
    auto reply = (*region)->Call(shm_wire::FrameOp::kLookup, k.body, 0);
    ASSERT_OK(reply);
    EXPECT_EQ(reply->code, static_cast<int>(k.code)) << reply->message;
    EXPECT_THAT(reply->message, HasSubstr(k.text));
  }
  auto after = shm->Lookup("fp16", c.keys);
  ASSERT_OK(after);
  EXPECT_EQ(after->prefix_blocks(), 4u);
}

// The same round trip with the socket calls off: the gRPC streams naming the region.
TEST_F(SharedMemoryTest, WithSocketCallsOffTheRegionGoesOverGrpcStreams) {
  ClientOptions o;
  o.server = server_->address();
  o.namespace_spec = Spec("fp16");
  o.shared_memory_socket_calls = false;
  auto client = Client::Connect(o);
  ASSERT_OK(client);
  ASSERT_TRUE((*client)->uses_shared_memory());
  const Sequence c = MakeSequence("fp16", kLayout, 3, 17);
  ASSERT_OK((*client)->PutBlocks("fp16", c.blocks));
  std::vector<std::string> bufs(3, std::string(c.encoded[0].size(), '\0'));
  std::vector<std::span<uint8_t>> spans;
  for (auto& b : bufs) spans.emplace_back(reinterpret_cast<uint8_t*>(b.data()), b.size());
  ASSERT_OK((*client)->GetBlocksInto("fp16", c.keys, spans));
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(bufs[i], c.encoded[i]) << i;
  EXPECT_EQ((*client)->shared_memory_socket_calls(), 0u);
}

// Calls whose payloads or buffers do not fit the region go over TCP, and still round-trip.
// A 48 KiB region holds one ~32 KiB block but never two: PutBlocks / GetBlocksInto split
// six blocks into runs of one and two (max_streams_per_call 4), so the two-block runs
// always take TCP while one-block runs may use the region.
TEST_F(SharedMemoryTest, CallsLargerThanTheRegionFallBackToTcp) {
  auto small = Connect("fp16", v1::CODEC_FP16, true, "", /*region_bytes=*/48 << 10);
  ASSERT_NE(small, nullptr);
  ASSERT_TRUE(small->uses_shared_memory());
  const Sequence c = MakeSequence("fp16", kLayout, 6, 16);
  auto put = small->PutBlocks("fp16", c.blocks);
  ASSERT_OK(put);
  EXPECT_EQ(put->blocks_stored, 6u);
  std::vector<std::string> bufs(6, std::string(c.encoded[0].size(), '\0'));
  std::vector<std::span<uint8_t>> spans;
  for (auto& b : bufs) spans.emplace_back(reinterpret_cast<uint8_t*>(b.data()), b.size());
  auto infos = small->GetBlocksInto("fp16", c.keys, spans);
  ASSERT_OK(infos);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(bufs[i], c.encoded[i]) << i;
  EXPECT_TRUE(small->uses_shared_memory());  // still in use for calls that fit
  auto one = small->GetBlocksInto("fp16", std::span(c.keys).first(1), std::span(spans).first(1));
  ASSERT_OK(one);
  EXPECT_EQ(bufs[0], c.encoded[0]);
}

// A Get into private memory larger than the region goes as pieces, each staged in the
// region and answered over the socket, two in flight (client/client_streams.cc
// GetPieces), not as one call over TCP; one stream of them, whatever
// max_streams_per_call says (more would not fit the region).
TEST_F(SharedMemoryTest, AGetLargerThanTheRegionGoesThroughItInPieces) {
  ClientOptions o;
  o.server = server_->address();
  o.namespace_spec = Spec("fp16");
  o.shared_memory_bytes = 1 << 20;
  o.get_piece_bytes = 256 << 10;
  o.max_streams_per_call = 1;
  auto client = Client::Connect(o);
  ASSERT_OK(client);
  ASSERT_TRUE((*client)->uses_shared_memory());
  const Sequence c = MakeSequence("fp16", kLayout, 96, 18);  // 96 x 32 KiB: 1.5x the region
  ASSERT_OK((*client)->PutBlocks("fp16", c.blocks));
  std::vector<std::string> bufs(96, std::string(c.encoded[0].size(), '\0'));
  std::vector<std::span<uint8_t>> spans;
  for (auto& b : bufs) spans.emplace_back(reinterpret_cast<uint8_t*>(b.data()), b.size());
  const uint64_t calls_before = (*client)->shared_memory_socket_calls();
  auto infos = (*client)->GetBlocksInto("fp16", c.keys, spans);
  ASSERT_OK(infos);
  for (size_t i = 0; i < 96; ++i) {
    EXPECT_EQ((*infos)[i].key(), c.keys[i]) << i;
    EXPECT_EQ(bufs[i], c.encoded[i]) << i;
  }
  // Eight keys of 32,808 bytes make a piece of at least 256 KiB: twelve pieces, one
  // socket call each.
  EXPECT_EQ((*client)->shared_memory_socket_calls() - calls_before, 12u);

  // With four streams allowed: the same twelve pieces in one stream.
  o.max_streams_per_call = 4;
  auto four = Client::Connect(o);
  ASSERT_OK(four);
  ASSERT_TRUE((*four)->uses_shared_memory());
  std::vector<std::string> again(96, std::string(c.encoded[0].size(), '\0'));
  spans.clear();
  for (auto& b : again) spans.emplace_back(reinterpret_cast<uint8_t*>(b.data()), b.size());
  auto infos4 = (*four)->GetBlocksInto("fp16", c.keys, spans);
  ASSERT_OK(infos4);
  for (size_t i = 0; i < 96; ++i) EXPECT_EQ(again[i], c.encoded[i]) << i;
  EXPECT_EQ((*four)->shared_memory_socket_calls(), 12u);
}

TEST_F(SharedMemoryTest, RawPutIsTranscodedAndRawGetDecodesLikeTcp) {
  auto shm = Connect("int8", v1::CODEC_INT8);
  auto tcp = Connect("int8", v1::CODEC_INT8, /*shared_memory=*/false);
  ASSERT_TRUE(shm != nullptr && tcp != nullptr);
  ASSERT_TRUE(shm->uses_shared_memory());
  const Sequence c = MakeSequence("int8", kLayout, 4, 12);
  std::vector<std::span<const uint8_t>> raw;
  for (const auto& r : c.raw) raw.push_back(kv::AsBytes(r));
  PutOptions po;
  po.format = v1::PAYLOAD_FORMAT_RAW;
  ASSERT_OK(shm->PutBlocks("int8", WithPayloads(c, raw), po));

  GetOptions go;
  go.format = v1::PAYLOAD_FORMAT_RAW;
  auto want = tcp->GetBlocks("int8", c.keys, go);
  ASSERT_OK(want);
  std::vector<std::string> got(4, std::string(kLayout.BytesPerBlock(), '\0'));
  std::vector<std::span<uint8_t>> spans;
  for (auto& g : got) spans.emplace_back(reinterpret_cast<uint8_t*>(g.data()), g.size());
  auto infos = shm->GetBlocksInto("int8", c.keys, spans, go);
  ASSERT_OK(infos);
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE((*infos)[i].found());
    EXPECT_EQ((*infos)[i].codec(), v1::CODEC_INT8);
    EXPECT_EQ(got[i], (*want)[i].data) << i;  // the same decoded fp16 either way
    EXPECT_NE(got[i], c.raw[i]);               // and really quantized
  }
  EXPECT_GT(shm->shared_memory_socket_calls(), 0u);
}

class RawCalls : public SharedMemoryTest {
 protected:
  void SetUp() override {
    SharedMemoryTest::SetUp();
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    kv_ = v1::KvCache::NewStub(channel_);
  }

  grpc::Status PutHeaderOnly(const v1::PutHeader& h, bool add_chunk = false) {
    grpc::ClientContext ctx;
    v1::PutResponse resp;
    auto w = kv_->Put(&ctx, &resp);
    v1::PutRequest req;
    *req.mutable_header() = h;
    w->Write(req);
    if (add_chunk) {
      v1::PutRequest chunk;
      chunk.set_chunk("x");
      w->Write(chunk);
    }
    w->WritesDone();
    return w->Finish();
  }

  grpc::Status GetHeaderOnly(const v1::GetRequest& req, v1::GetHeader* header) {
    grpc::ClientContext ctx;
    auto r = kv_->Get(&ctx, req);
    v1::GetResponse msg;
    while (r->Read(&msg)) {
      if (msg.has_header()) *header = msg.header();
    }
    return r->Finish();
  }

  // Sends `request` as a socket frame on `region` and checks it gets `want`'s code and
  // message.
  static void ExpectSameOverSocket(SharedRegion& region, protocol::shm::FrameOp op,
                                   const google::protobuf::Message& request,
                                   const grpc::Status& want) {
    auto reply = region.Call(op, request.SerializeAsString(), 0);
    ASSERT_OK(reply);
    EXPECT_EQ(reply->code, static_cast<int>(want.error_code())) << reply->message;
    EXPECT_EQ(reply->message, want.error_message());
    EXPECT_EQ(reply->details, want.error_details());
  }
  static void ExpectSamePutOverSocket(SharedRegion& region, const v1::PutHeader& h,
                                      const grpc::Status& want) {
    v1::PutRequest req;
    *req.mutable_header() = h;
    ExpectSameOverSocket(region, protocol::shm::FrameOp::kPut, req, want);
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KvCache::Stub> kv_;
};

TEST_F(RawCalls, BadSharedMemoryRequestsGetTheirStatusAndChangeNothing) {
  auto client = Connect("fp16");
  ASSERT_NE(client, nullptr);
  const Sequence c = MakeSequence("fp16", kLayout, 1, 13);
  ASSERT_OK(client->PutBlocks("fp16", c.blocks));

  // A session of our own, opened the way Client does.
  v1::StatsResponse stats;
  {
    grpc::ClientContext ctx;
    ASSERT_OK(v1::KvCacheAdmin::NewStub(channel_)->Stats(&ctx, {}, &stats));
  }
  ASSERT_FALSE(stats.shared_memory().socket_path().empty());
  auto region = SharedRegion::Open(stats.shared_memory().socket_path(), 1 << 20,
                                   stats.shared_memory().instance_id());
  ASSERT_OK(region);
  std::memset((*region)->base(), 0x33, 1 << 20);  // garbage that must never be stored

  v1::PutHeader h;
  h.set_namespace_("fp16");
  h.set_shm_session((*region)->session());
  v1::PutBlock* b = h.add_blocks();
  b->set_key(c.keys[0]);
  b->set_size(c.encoded[0].size());
  b->set_shm_offset((1 << 20) - 100);  // runs past the region's end
  grpc::Status s = PutHeaderOnly(h);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("header.blocks[0].shm_offset"));
  ExpectSamePutOverSocket(**region, h, s);

  b->set_shm_offset(0);
  s = PutHeaderOnly(h, /*add_chunk=*/true);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("chunk"));

  s = PutHeaderOnly(h);  // the garbage is not a valid encoded block
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("blocks[0].payload"));
  ExpectSamePutOverSocket(**region, h, s);

  for (const char* ns : {"", "no-such-namespace"}) {  // NOT_FOUND / INVALID_ARGUMENT
    v1::PutHeader bad = h;
    bad.set_namespace_(ns);
    s = PutHeaderOnly(bad);
    EXPECT_FALSE(s.ok());
    ExpectSamePutOverSocket(**region, bad, s);
  }
  v1::PutHeader wrong_size = h;
  wrong_size.set_format(v1::PAYLOAD_FORMAT_RAW);
  s = PutHeaderOnly(wrong_size);
  EXPECT_THAT(s.error_message(), HasSubstr("header.blocks[0].size"));
  ExpectSamePutOverSocket(**region, wrong_size, s);

  h.set_shm_session(std::string(16, 'q'));
  s = PutHeaderOnly(h);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("header.shm_session"));
  ExpectSamePutOverSocket(**region, h, s);  // with its SHM_SESSION_UNKNOWN detail

  v1::GetRequest g;
  g.set_namespace_("fp16");
  g.add_keys(c.keys[0]);
  g.set_shm_session((*region)->session());
  v1::GetHeader gh;
  s = GetHeaderOnly(g, &gh);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("shm_destinations: 0 ranges for 1 keys"));
  ExpectSameOverSocket(**region, protocol::shm::FrameOp::kGet, g, s);
  v1::ShmRange* d = g.add_shm_destinations();
  d->set_offset(1 << 20);
  d->set_capacity(1);
  s = GetHeaderOnly(g, &gh);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("shm_destinations[0]"));
  ExpectSameOverSocket(**region, protocol::shm::FrameOp::kGet, g, s);
  d->set_offset(0);
  d->set_capacity(c.encoded[0].size());
  g.set_shm_session(std::string(16, 'q'));
  s = GetHeaderOnly(g, &gh);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("shm_session"));
  ExpectSameOverSocket(**region, protocol::shm::FrameOp::kGet, g, s);
  v1::GetRequest no_session = g;
  no_session.clear_shm_session();  // over the socket, payloads must go to a region
  auto reply = (*region)->Call(protocol::shm::FrameOp::kGet, no_session.SerializeAsString(), 0);
  ASSERT_OK(reply);
  EXPECT_EQ(reply->code, static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_THAT(reply->message, HasSubstr("shm_session is empty"));

  // The stored block is unchanged, and a well-formed shared-memory Get delivers it.
  g.set_shm_session((*region)->session());
  s = GetHeaderOnly(g, &gh);
  ASSERT_OK(s);
  ASSERT_EQ(gh.blocks_size(), 1);
  ASSERT_TRUE(gh.blocks(0).found());
  EXPECT_EQ(AsString({(*region)->base(), c.encoded[0].size()}, gh.blocks(0).size()),
            c.encoded[0]);
  std::memset((*region)->base(), 0, c.encoded[0].size());
  reply = (*region)->Call(protocol::shm::FrameOp::kGet, g.SerializeAsString(), 0);
  ASSERT_OK(reply);
  ASSERT_EQ(reply->code, 0) << reply->message;
  EXPECT_EQ(AsString({(*region)->base(), c.encoded[0].size()}, c.encoded[0].size()), c.encoded[0]);
}

// A client that dies right after sending a Put frame: the frame is one message, so the
// server has all of it or none of it; here it has it, stores every block whole and stays
// up for the next call.
TEST_F(RawCalls, AClientKilledMidCallLeavesNothingPartial) {
  auto client = Connect("fp16");
  ASSERT_NE(client, nullptr);
  ASSERT_OK(client->PutBlocks("fp16", MakeSequence("fp16", kLayout, 1, 20).blocks));
  v1::StatsResponse stats;
  {
    grpc::ClientContext ctx;
    ASSERT_OK(v1::KvCacheAdmin::NewStub(channel_)->Stats(&ctx, {}, &stats));
  }
  auto region = SharedRegion::Open(stats.shared_memory().socket_path(), 1 << 20,
                                   stats.shared_memory().instance_id());
  ASSERT_OK(region);
  const Sequence c = MakeSequence("fp16", kLayout, 4, 21);
  v1::PutRequest req;
  v1::PutHeader* h = req.mutable_header();
  h->set_namespace_("fp16");
  h->set_shm_session((*region)->session());
  uint64_t at = 0;
  for (size_t i = 0; i < c.encoded.size(); ++i) {
    std::memcpy((*region)->base() + at, c.encoded[i].data(), c.encoded[i].size());
    v1::PutBlock* b = h->add_blocks();
    b->set_key(c.keys[i]);
    b->set_size(c.encoded[i].size());
    b->set_shm_offset(at);
    at += c.encoded[i].size();
  }
  protocol::shm::FrameHeader fh{};
  std::memcpy(fh.magic, protocol::shm::kFrameMagic, sizeof(fh.magic));
  fh.op = static_cast<uint32_t>(protocol::shm::FrameOp::kPut);
  std::string frame(reinterpret_cast<const char*>(&fh), sizeof(fh));
  frame += req.SerializeAsString();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string& path = stats.shared_memory().socket_path();
  std::memcpy(addr.sun_path, path.data(), path.size());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // only syscalls here: send the frame, then die without the reply
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(2);
    if (send(fd, frame.data(), frame.size(), 0) != static_cast<ssize_t>(frame.size())) _exit(3);
    raise(SIGKILL);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "the child failed before sending: " << wstatus;
  // The server finishes the call it received; wait for it (the outcome, not its speed, is
  // what is checked: each block is either absent or whole, and in the end all are there).
  size_t found = 0;
  for (int attempt = 0; attempt < 500 && found < c.keys.size(); ++attempt) {
    auto got = client->GetBlocks("fp16", c.keys);
    ASSERT_OK(got);
    found = 0;
    for (size_t i = 0; i < c.keys.size(); ++i) {
      if (!(*got)[i].info.found()) continue;
      EXPECT_EQ((*got)[i].data, c.encoded[i]) << i;
      ++found;
    }
    if (found < c.keys.size()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(found, c.keys.size());
  auto again = (*region)->Call(protocol::shm::FrameOp::kPut, req.SerializeAsString(), 0);
  ASSERT_OK(again);
  EXPECT_EQ(again->code, 0) << again->message;
}

TEST_F(SharedMemoryTest, AfterAServerRestartTheClientFallsBackToTcp) {
  auto client = Connect("fp16");
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->uses_shared_memory());
  const Sequence c = MakeSequence("fp16", kLayout, 2, 14);
  ASSERT_OK(client->PutBlocks("fp16", std::span(c.blocks).first(1)));
  EXPECT_EQ(client->shared_memory_socket_calls(), 1u);

  const int port = server_->port();
  auto code = server_->Terminate();
  ASSERT_OK(code);
  StartServer(port);  // same address and data dir; the old session is gone
  ASSERT_OK(client->Stats());  // retried until the channel reconnects

  auto put = client->PutBlocks("fp16", std::span(c.blocks).subspan(1));
  ASSERT_OK(put);
  EXPECT_FALSE(client->uses_shared_memory());
  std::vector<std::string> bufs(2, std::string(c.encoded[0].size(), '\0'));
  std::vector<std::span<uint8_t>> spans;
  for (auto& b : bufs) spans.emplace_back(reinterpret_cast<uint8_t*>(b.data()), b.size());
  auto infos = client->GetBlocksInto("fp16", c.keys, spans);
  ASSERT_OK(infos);
  EXPECT_EQ(bufs[0], c.encoded[0]);  // persisted across the restart
  EXPECT_EQ(bufs[1], c.encoded[1]);
  EXPECT_EQ(client->shared_memory_socket_calls(), 1u);  // the socket died with the server

  // A new client gets a new session, and its calls take the socket again.
  auto fresh = Connect("fp16");
  ASSERT_NE(fresh, nullptr);
  ASSERT_TRUE(fresh->uses_shared_memory());
  auto again = fresh->GetBlocksInto("fp16", c.keys, spans);
  ASSERT_OK(again);
  EXPECT_EQ(bufs[1], c.encoded[1]);
  EXPECT_GT(fresh->shared_memory_socket_calls(), 0u);
}

// A Put right after the server restarted (no call in between to notice the old
// connections closed) finds its stream broken ("Broken pipe", "Connection reset") and is
// redone on a new connection: Puts are retried like the idempotent calls.
TEST_F(SharedMemoryTest, APutRightAfterAServerRestartIsRedoneOnANewConnection) {
  auto client = Connect("fp16", v1::CODEC_FP16, /*shared_memory=*/false);
  ASSERT_NE(client, nullptr);
  const Sequence c = MakeSequence("fp16", kLayout, 257, 15);  // 8 MiB: many stream writes
  ASSERT_OK(client->PutBlocks("fp16", std::span(c.blocks).first(1)));
  const int port = server_->port();
  ASSERT_OK(server_->Terminate());
  StartServer(port);

  auto put = client->PutBlocks("fp16", std::span(c.blocks).subspan(1));
  ASSERT_OK(put);
  EXPECT_EQ(put->blocks_stored, 256u);
  auto got = client->GetBlocks("fp16", c.keys);
  ASSERT_OK(got);
  ASSERT_EQ(got->size(), c.keys.size());
  for (size_t i = 0; i < c.keys.size(); ++i) EXPECT_EQ((*got)[i].data, c.encoded[i]) << i;
}

// With tokens on, a session's socket calls run as the identity of the first gRPC call
// that named it; before that they are refused, and the client falls back to gRPC.
TEST_F(SharedMemoryTest, WithAuthAnUnboundSessionIsRefusedOverTheSocket) {
  std::ofstream(dir_.Sub("auth.textproto"))
      << "tenants { tenant: \"team-a\" token_sha256: "
         "\"a70bf50e531ce1a817561f2f5d5b6645d4e806becf58ccc5e8cf6b8045a090a8\" }\n";  // token-a
  ASSERT_OK(server_->Terminate());
  StartServer(testing::PickFreePort(), {"--config", dir_.Sub("auth.textproto")});
  ClientOptions o;
  o.server = server_->address();
  o.auth_token = "token-a";
  o.namespace_spec = testing::NamespaceSpecOf("fp16", kLayout, v1::CODEC_FP16, "team-a");
  auto client = Client::Connect(o);
  ASSERT_OK(client);
  ASSERT_TRUE((*client)->uses_shared_memory());

  // A region opened by hand: no gRPC call has named its session.
  auto stats = (*client)->Stats();
  ASSERT_OK(stats);
  auto region = SharedRegion::Open(stats->shared_memory().socket_path(), 1 << 20,
                                   stats->shared_memory().instance_id());
  ASSERT_OK(region);
  v1::GetRequest g;
  g.set_namespace_("fp16");
  g.add_keys(std::string(32, 'k'));
  g.set_shm_session((*region)->session());
  v1::ShmRange* d = g.add_shm_destinations();
  d->set_capacity(4096);
  auto reply = (*region)->Call(protocol::shm::FrameOp::kGet, g.SerializeAsString(), 0);
  ASSERT_OK(reply);
  EXPECT_EQ(reply->code, static_cast<int>(grpc::StatusCode::UNAUTHENTICATED));
  EXPECT_THAT(reply->message, HasSubstr("no authenticated gRPC call has used yet"));
  // A refused frame binds nothing: the next one is refused too (it once ran as an
  // operator, with every tenant's namespaces).
  auto second = (*region)->Call(protocol::shm::FrameOp::kGet, g.SerializeAsString(), 0);
  ASSERT_OK(second);
  EXPECT_EQ(second->code, static_cast<int>(grpc::StatusCode::UNAUTHENTICATED)) << second->message;

  // A Lookup before any Put or Get: its session is unbound, the socket refuses it and the
  // client asks over gRPC.
  const Sequence c = MakeSequence("fp16", kLayout, 2, 22);
  auto before = (*client)->Lookup("fp16", c.keys);
  ASSERT_OK(before);
  EXPECT_EQ(before->prefix_blocks(), 0u);
  EXPECT_EQ((*client)->shared_memory_socket_calls(), 0u);

  // The client's first call binds its session over gRPC; the next ones take the socket.
  ASSERT_OK((*client)->PutBlocks("fp16", std::span(c.blocks).first(1)));
  EXPECT_EQ((*client)->shared_memory_socket_calls(), 0u);
  ASSERT_OK((*client)->PutBlocks("fp16", std::span(c.blocks).subspan(1)));
  EXPECT_EQ((*client)->shared_memory_socket_calls(), 1u);
  // Once a socket call was answered, Lookups take the socket again.
  auto after = (*client)->Lookup("fp16", c.keys);
  ASSERT_OK(after);
  EXPECT_EQ(after->prefix_blocks(), 2u);
  EXPECT_EQ((*client)->shared_memory_socket_calls(), 2u);
  auto got = (*client)->GetBlocks("fp16", c.keys);
  ASSERT_OK(got);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ((*got)[i].data, c.encoded[i]) << i;
}

TEST_F(SharedMemoryTest, ASocketOfAnotherServerIsNotUsed) {
  TempDir other_dir;
  auto other = ServerProcess::StartKvtierd(other_dir.Sub("data"));
  ASSERT_OK(other);
  auto client = Connect("fp16", v1::CODEC_FP16, true, other_dir.Sub("data/kvtierd.sock"));
  ASSERT_NE(client, nullptr);
  EXPECT_FALSE(client->uses_shared_memory());
  EXPECT_THAT(client->connect_info().shared_memory_error, HasSubstr("another kvtierd"));
  EXPECT_EQ(client->AllocateSharedBuffer(4096).status().code(),
            absl::StatusCode::kFailedPrecondition);
  const Sequence c = MakeSequence("fp16", kLayout, 1, 15);
  ASSERT_OK(client->PutBlocks("fp16", c.blocks));
  auto got = client->GetBlocks("fp16", c.keys);
  ASSERT_OK(got);
  EXPECT_EQ((*got)[0].data, c.encoded[0]);
}

TEST_F(SharedMemoryTest, ShmSocketOffOffersNothing) {
  auto code = server_->Terminate();
  ASSERT_OK(code);
  StartServer(testing::PickFreePort(), {"--shm-socket", "off"});
  auto client = Connect("fp16");
  ASSERT_NE(client, nullptr);
  EXPECT_FALSE(client->uses_shared_memory());
  EXPECT_EQ(client->connect_info().shared_memory_error, "");
  auto stats = client->Stats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->shared_memory().socket_path(), "");
}

}  // namespace
}  // namespace kvtier::client
