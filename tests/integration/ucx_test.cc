// The cross-node UCX data path end to end: real kvtierd processes with --ucx on
// 127.0.0.1, UCX forced onto its TCP transport (UCX_TLS=tcp, so shared-memory transports
// cannot stand in), the real Client with the shared-memory path off, and raw stub calls
// (plus a bare UcxChannel) for the refused and broken transfers.
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <latch>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/cluster_client.h"
#include "client/ucx_channel.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kv/codec.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "protocol/error_detail.h"
#include "tests/integration/sequences.h"
#include "tests/testing/layouts.h"
#include "tests/testing/namespace_spec.h"
#include "tests/testing/server_process.h"
#include "tests/testing/static_peer_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tools/synthetic_blocks.h"

namespace kvtier::client {
namespace {

namespace v1 = ::kvtier::v1;
using testing::ServerProcess;
using testing::TempDir;

constexpr kv::Layout kLayout = testing::SmallLayout();  // 32 KiB raw blocks

v1::NamespaceSpec Spec(const std::string& name, v1::Codec codec = v1::CODEC_FP16) {
  return testing::NamespaceSpecOf(name, kLayout, codec);
}

class UcxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Children inherit it: the servers' UCX uses TCP only, like two hosts without RDMA.
    setenv("UCX_TLS", "tcp", 1);
  }

  void StartServer(std::vector<std::string> extra = {"--ucx"}) {
    extra.insert(extra.end(), {"--hot-capacity", "64MiB", "--shm-socket", "off"});
    auto p = ServerProcess::StartKvtierd(dir_.Sub("data"), extra);
    ASSERT_OK(p);
    server_ = std::make_unique<ServerProcess>(std::move(*p));
  }

  ClientOptions Options(const std::string& ns, v1::Codec codec = v1::CODEC_FP16, bool ucx = true) {
    ClientOptions o;
    o.server = server_->address();
    o.namespace_spec = Spec(ns, codec);
    o.num_channels = 2;
    o.shared_memory = false;
    o.ucx = ucx;
    o.ucx_transports = "tcp";
    return o;
  }

  std::unique_ptr<Client> Connect(const std::string& ns, v1::Codec codec = v1::CODEC_FP16,
                                  bool ucx = true) {
    return Connect(Options(ns, codec, ucx));
  }

  std::unique_ptr<Client> Connect(const ClientOptions& o) {
    auto c = Client::Connect(o);
    EXPECT_OK(c);
    return c.ok() ? std::move(*c) : nullptr;
  }

  // The server's count of calls of `operation` ("put", "get") so far.
  uint64_t ServedCalls(const std::string& operation) {
    const v1::StatsResponse st = Stats();
    for (const v1::LatencyHistogram& h : st.latencies()) {
      if (h.operation() == operation) return h.count();
    }
    return 0;
  }

  v1::StatsResponse Stats() {
    auto stub = v1::KvCacheAdmin::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::StatsResponse resp;
    EXPECT_OK(stub->Stats(&ctx, v1::StatsRequest(), &resp));
    return resp;
  }

  // The header of a Put of seq's blocks into "fp16" whose payloads come over UCX as
  // (session, transfer).
  static v1::PutRequest UcxPutRequest(const Sequence& seq, const std::string& session,
                                      uint64_t transfer) {
    v1::PutRequest req;
    v1::PutHeader* h = req.mutable_header();
    h->set_namespace_("fp16");
    h->set_ucx_session(session);
    h->set_ucx_transfer(transfer);
    for (const PutBlock& b : seq.blocks) {
      v1::PutBlock* pb = h->add_blocks();
      pb->set_key(b.key);
      pb->set_parent_key(b.parent_key);
      pb->set_block_index(b.block_index);
      pb->set_size(b.payload.size());
    }
    return req;
  }

  // A raw Put stream that names a UCX session and transfer and sends no chunks.
  grpc::Status RawUcxPut(const Sequence& seq, const std::string& session, uint64_t transfer) {
    auto stub = v1::KvCache::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::PutResponse resp;
    auto writer = stub->Put(&ctx, &resp);
    writer->Write(UcxPutRequest(seq, session, transfer));
    writer->WritesDone();
    return writer->Finish();
  }

  // How many of seq's blocks the server holds.
  uint32_t Resident(Client& c, const Sequence& seq) {
    auto l = c.Lookup("fp16", seq.keys, /*local_only=*/true);
    EXPECT_OK(l);
    return l.ok() ? l->prefix_blocks() : 0;
  }

  std::unique_ptr<UcxChannel> OpenChannel() {
    v1::StatsResponse st = Stats();
    auto ch = UcxChannel::Open("127.0.0.1", static_cast<uint16_t>(st.ucx().port()),
                               st.ucx().instance_id(), "tcp",
                               std::chrono::system_clock::now() + std::chrono::seconds(5));
    EXPECT_OK(ch);
    return ch.ok() ? std::move(*ch) : nullptr;
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(UcxTest, EncodedAndRawBlocksRoundTripBitExactlyOverUcx) {
  StartServer();
  auto c = Connect("fp16");
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->uses_ucx()) << c->connect_info().ucx_error;
  EXPECT_FALSE(c->uses_shared_memory());
  const Sequence seq = MakeSequence("fp16", kLayout, 12, 7);
  auto put = c->PutBlocks("fp16", seq.blocks);
  ASSERT_OK(put);
  EXPECT_EQ(put->blocks_stored, 12u);

  auto got = c->GetBlocks("fp16", seq.keys);
  ASSERT_OK(got);
  ASSERT_EQ(got->size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    ASSERT_TRUE((*got)[i].info.found()) << i;
    EXPECT_TRUE((*got)[i].info.ucx()) << i;
    EXPECT_EQ((*got)[i].data, seq.encoded[i]) << i;
  }
  // Raw, into the caller's buffers (one of them a miss).
  std::vector<std::string> keys = seq.keys;
  keys.push_back(std::string(32, 'z'));
  std::vector<std::string> bufs(keys.size(), std::string(kLayout.BytesPerBlock(), '\0'));
  std::vector<std::span<uint8_t>> spans;
  for (auto& b : bufs) spans.emplace_back(reinterpret_cast<uint8_t*>(b.data()), b.size());
  GetOptions raw;
  raw.format = v1::PAYLOAD_FORMAT_RAW;
  auto into = c->GetBlocksInto("fp16", keys, spans, raw);
  ASSERT_OK(into);
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(bufs[i], seq.raw[i]) << i;
  EXPECT_FALSE((*into)[12].found());
  uint64_t encoded_bytes = 0;
  for (const std::string& e : seq.encoded) encoded_bytes += e.size();
  EXPECT_EQ(Stats().ucx_put_bytes(), encoded_bytes);

  // Raw blocks for an fp16 namespace land in their reserved slots behind the codec
  // header the server writes: the stored blob is the client's encoding, bit for bit.
  const Sequence raw_seq = MakeSequence("fp16", kLayout, 3, 8);
  std::vector<PutBlock> raw_blocks = raw_seq.blocks;
  for (size_t i = 0; i < raw_blocks.size(); ++i) raw_blocks[i].payload = kv::AsBytes(raw_seq.raw[i]);
  PutOptions raw_put;
  raw_put.format = v1::PAYLOAD_FORMAT_RAW;
  ASSERT_OK(c->PutBlocks("fp16", raw_blocks, raw_put));
  got = c->GetBlocks("fp16", raw_seq.keys);
  ASSERT_OK(got);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ((*got)[i].data, raw_seq.encoded[i]) << i;

  const v1::StatsResponse st = Stats();
  EXPECT_EQ(st.ucx_sessions(), 1u);
  uint64_t raw_encoded_bytes = 0;
  for (const std::string& e : raw_seq.encoded) raw_encoded_bytes += e.size();
  EXPECT_EQ(st.ucx_get_bytes(),
            encoded_bytes + 12 * kLayout.BytesPerBlock() + raw_encoded_bytes);
}

// Concurrent calls over UCX go through their own coalescer (ucx_coalesce_max_bytes), which
// takes calls too big for coalesce_max_bytes: the calls of several threads share Get
// streams, and Put streams when the Puts' headers go over gRPC (ucx_calls off), and each
// thread gets its own blocks back bit-exact. Puts sent as UCX call frames go one frame
// each. With ucx_coalesce_max_bytes 0 every call goes on its own.
TEST_F(UcxTest, ConcurrentCallsShareStreamsThroughTheUcxCoalescer) {
  StartServer();
  constexpr int kThreads = 8;
  constexpr uint32_t kRounds = 4;
  constexpr uint64_t kCalls = kThreads * kRounds;
  int seed = 100;
  struct Case {
    uint64_t ucx_coalesce;
    bool ucx_calls;
  };
  for (const Case& k : {Case{16 << 20, true}, Case{16 << 20, false}, Case{0, false}}) {
    SCOPED_TRACE(absl::StrCat("ucx_coalesce_max_bytes ", k.ucx_coalesce, ", ucx_calls ",
                              k.ucx_calls));
    ClientOptions o = Options("fp16");
    // Blocks of 32 KiB are more than half of coalesce_max_bytes: only the UCX coalescer
    // takes them. A long delay lets calls queue behind the batch on the wire.
    o.coalesce_max_bytes = 32 << 10;
    o.coalesce_max_delay_us = 300000;
    o.ucx_coalesce_max_bytes = k.ucx_coalesce;
    o.ucx_calls = k.ucx_calls;
    auto c = Connect(o);
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->uses_ucx()) << c->connect_info().ucx_error;
    std::vector<Sequence> seqs;
    for (int t = 0; t < kThreads; ++t) {
      seqs.push_back(MakeSequence("fp16", kLayout, kRounds, ++seed));
    }
    const uint64_t puts_before = ServedCalls("put");
    const uint64_t gets_before = ServedCalls("get");
    const uint64_t ucx_before = Stats().ucx_get_bytes();
    std::latch start(kThreads);
    std::vector<std::string> failures(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();
        const Sequence& seq = seqs[t];
        for (uint32_t r = 0; r < kRounds; ++r) {
          auto put = c->PutBlocks("fp16", std::span(&seq.blocks[r], 1));
          if (!put.ok() || put->blocks_stored != 1) {
            failures[t] += absl::StrCat("put ", r, ": ", put.status().ToString(), "; ");
            continue;
          }
          std::string buf(seq.encoded[r].size(), '\0');
          std::span<uint8_t> span(reinterpret_cast<uint8_t*>(buf.data()), buf.size());
          auto get = c->GetBlocksInto("fp16", std::span(&seq.keys[r], 1), std::span(&span, 1));
          if (!get.ok() || !(*get)[0].found() || !(*get)[0].ucx() || buf != seq.encoded[r]) {
            failures[t] += absl::StrCat("get ", r, ": ", get.status().ToString(), "; ");
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
    uint64_t bytes = 0;
    for (const Sequence& seq : seqs) {
      for (const std::string& e : seq.encoded) bytes += e.size();
    }
    EXPECT_EQ(Stats().ucx_get_bytes() - ucx_before, bytes);
    const uint64_t puts = ServedCalls("put") - puts_before;
    const uint64_t gets = ServedCalls("get") - gets_before;
    EXPECT_EQ(c->ucx_calls(), k.ucx_calls ? kCalls : 0);
    if (k.ucx_coalesce > 0) {
      if (k.ucx_calls) {
        EXPECT_EQ(puts, kCalls);
      } else {
        EXPECT_LT(puts, kCalls);
      }
      EXPECT_LT(gets, kCalls);
    } else {
      EXPECT_EQ(puts, kCalls);
      EXPECT_EQ(gets, kCalls);
    }
  }
}

TEST_F(UcxTest, RawPutsAreTranscodedIntoTheNamespaceCodec) {
  StartServer();
  auto c = Connect("int8", v1::CODEC_INT8);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->uses_ucx()) << c->connect_info().ucx_error;
  Sequence seq = MakeSequence("int8", kLayout, 4, 3);
  std::vector<PutBlock> blocks = seq.blocks;
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i].payload = kv::AsBytes(seq.raw[i]);
  PutOptions po;
  po.format = v1::PAYLOAD_FORMAT_RAW;
  auto put = c->PutBlocks("int8", blocks, po);
  ASSERT_OK(put);
  auto got = c->GetBlocks("int8", seq.keys);
  ASSERT_OK(got);
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE((*got)[i].info.found());
    EXPECT_EQ((*got)[i].info.codec(), v1::CODEC_INT8);
    // The server's encoding of the raw block, bit for bit.
    auto want = kv::Encode(kv::CodecId::kInt8, kLayout, static_cast<uint32_t>(i),
                           kv::AsBytes(seq.raw[i]));
    ASSERT_OK(want);
    EXPECT_EQ((*got)[i].data, *want) << i;
  }
}

TEST_F(UcxTest, BadInputGetsTheSameStatusAsOverTheStream) {
  StartServer();
  auto ucx = Connect("fp16");
  auto tcp = Connect("fp16", v1::CODEC_FP16, /*ucx=*/false);
  ASSERT_NE(ucx, nullptr);
  ASSERT_NE(tcp, nullptr);
  ASSERT_TRUE(ucx->uses_ucx());
  ASSERT_FALSE(tcp->uses_ucx());
  const Sequence seq = MakeSequence("fp16", kLayout, 2, 5);
  std::string garbage(seq.encoded[0].size(), 'x');
  std::vector<PutBlock> bad_payload = seq.blocks;
  bad_payload[0].payload = kv::AsBytes(garbage);
  std::vector<PutBlock> bad_index = seq.blocks;
  bad_index[0].block_index = 3;
  std::vector<PutBlock> bad_key = seq.blocks;
  bad_key[0].key = "";
  for (const auto* blocks : {&bad_payload, &bad_index, &bad_key}) {
    auto a = ucx->PutBlocks("fp16", *blocks);
    auto b = tcp->PutBlocks("fp16", *blocks);
    ASSERT_FALSE(a.ok());
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(a.status().code(), b.status().code()) << a.status() << " vs " << b.status();
    EXPECT_EQ(a.status().message(), b.status().message());
  }
  auto a = ucx->PutBlocks("nope", seq.blocks);
  auto b = tcp->PutBlocks("nope", seq.blocks);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a.status().code(), b.status().code());
  EXPECT_EQ(Resident(*tcp, seq), 0u);
  EXPECT_TRUE(ucx->uses_ucx());  // refusals are no UCX failure
  // The channel still works after them.
  ASSERT_OK(ucx->PutBlocks("fp16", seq.blocks));
  EXPECT_EQ(Resident(*tcp, seq), 2u);
}

// A config file with the ucx block (and `extra` lines) for --config.
std::string WriteConfig(TempDir& dir, int transfer_timeout_ms, const std::string& extra = "") {
  const std::string path = dir.Sub("kvtierd.textproto");
  std::ofstream(path) << "ucx { enabled: true transfer_timeout_ms: " << transfer_timeout_ms
                      << " }\n"
                      << extra;
  return path;
}

bool HasReason(const grpc::Status& s, v1::ErrorReason reason) {
  return protocol::HasErrorReason(protocol::FromGrpcStatus("Put", s), reason);
}

TEST_F(UcxTest, UnknownStaleOrMismatchedTransfersAreRefusedAndStoreNothing) {
  StartServer({"--config", WriteConfig(dir_, 1000)});
  auto c = Connect("fp16", v1::CODEC_FP16, /*ucx=*/false);
  ASSERT_NE(c, nullptr);
  const Sequence seq = MakeSequence("fp16", kLayout, 3, 9);

  // A session this server never issued.
  grpc::Status s = RawUcxPut(seq, std::string(16, '\x5a'), 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_TRUE(HasReason(s, v1::UCX_SESSION_UNKNOWN));

  std::unique_ptr<UcxChannel> ch = OpenChannel();
  ASSERT_NE(ch, nullptr);
  std::vector<std::span<const uint8_t>> payloads;
  for (const std::string& e : seq.encoded) payloads.push_back(kv::AsBytes(e));

  // Payloads for transfer 5, a header naming transfer 6: the header's transfer never
  // gets its payloads (UNAVAILABLE after ucx.transfer_timeout_ms), transfer 5's are
  // dropped.
  auto sends = ch->SendPut(5, payloads);
  s = RawUcxPut(seq, ch->session(), 6);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_TRUE(HasReason(s, v1::UCX_TRANSFER_FAILED));
  EXPECT_OK(sends->Wait(std::chrono::system_clock::now() + std::chrono::seconds(10)));

  // A stale transfer: one whose Put already ended. Its late payloads change nothing.
  s = RawUcxPut(seq, ch->session(), 7);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  sends = ch->SendPut(7, payloads);
  EXPECT_OK(sends->Wait(std::chrono::system_clock::now() + std::chrono::seconds(10)));

  // A payload of another size than its header declares.
  std::vector<std::span<const uint8_t>> short_payloads = payloads;
  short_payloads[1] = short_payloads[1].subspan(1);
  sends = ch->SendPut(8, short_payloads);
  s = RawUcxPut(seq, ch->session(), 8);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_OK(sends->Wait(std::chrono::system_clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(Resident(*c, seq), 0u);

  // The same session and payloads with the right transfer id are stored.
  sends = ch->SendPut(9, payloads);
  s = RawUcxPut(seq, ch->session(), 9);
  EXPECT_OK(s);
  EXPECT_OK(sends->Wait(std::chrono::system_clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(Resident(*c, seq), 3u);

  // A Get naming an unknown session is refused the same way.
  auto stub = v1::KvCache::NewStub(
      grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::GetRequest get;
  get.set_namespace_("fp16");
  get.add_keys(seq.keys[0]);
  get.set_ucx_session(std::string(16, '\x11'));
  auto reader = stub->Get(&ctx, get);
  v1::GetResponse msg;
  while (reader->Read(&msg)) {
  }
  s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(HasReason(s, v1::UCX_SESSION_UNKNOWN));
}

// A Put's call frame sent over UCX by hand on a bare channel (docs/dataplane.md, "Put
// calls over UCX"): refused like the gRPC call, never run for another session, stored
// when right.
TEST_F(UcxTest, PutCallFramesAreRefusedLikeTheGrpcCallAndStoredWhenRight) {
  StartServer({"--config", WriteConfig(dir_, 1000)});
  auto c = Connect("fp16", v1::CODEC_FP16, /*ucx=*/false);  // registers the namespace
  ASSERT_NE(c, nullptr);
  std::unique_ptr<UcxChannel> ch = OpenChannel();
  ASSERT_NE(ch, nullptr);
  ASSERT_TRUE(ch->serves_calls());
  const Sequence seq = MakeSequence("fp16", kLayout, 3, 31);
  std::vector<std::span<const uint8_t>> payloads;
  for (const std::string& e : seq.encoded) payloads.push_back(kv::AsBytes(e));
  auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(20); };
  auto request = [&](const std::string& session, uint64_t transfer) {
    return UcxPutRequest(seq, session, transfer);
  };
  using protocol::shm::FrameOp;
  const int kFailedPrecondition = static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION);
  const int kInvalidArgument = static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT);

  // Another session's id in the header: refused, whatever the id.
  auto r = ch->Call(FrameOp::kPut, request(std::string(16, '\x5a'), 1).SerializeAsString(),
                    deadline());
  ASSERT_OK(r);
  EXPECT_EQ(r->code, kFailedPrecondition) << r->message;
  EXPECT_THAT(r->message, ::testing::HasSubstr("header.ucx_session"));
  // Not a Put; not a PutRequest.
  r = ch->Call(FrameOp::kGet, "", deadline());
  ASSERT_OK(r);
  EXPECT_EQ(r->code, kInvalidArgument) << r->message;
  EXPECT_THAT(r->message, ::testing::HasSubstr("only Put"));
  r = ch->Call(FrameOp::kPut, "\xff\xff\xff", deadline());
  ASSERT_OK(r);
  EXPECT_EQ(r->code, kInvalidArgument) << r->message;
  // A header that fails its checks: the gRPC call's status, nothing stored.
  v1::PutRequest bad = request(ch->session(), 2);
  bad.mutable_header()->mutable_blocks(1)->set_size(0);
  auto sends = ch->SendPut(2, payloads);
  r = ch->Call(FrameOp::kPut, bad.SerializeAsString(), deadline());
  ASSERT_OK(r);
  EXPECT_EQ(r->code, kInvalidArgument) << r->message;
  EXPECT_THAT(r->message, ::testing::HasSubstr("header.blocks[1].size"));
  EXPECT_OK(sends->Wait(deadline()));
  EXPECT_EQ(Resident(*c, seq), 0u);

  // Payloads and a right frame: stored, answered with the PutResponse.
  sends = ch->SendPut(3, payloads);
  r = ch->Call(FrameOp::kPut, request(ch->session(), 3).SerializeAsString(), deadline());
  ASSERT_OK(r);
  EXPECT_EQ(r->code, 0) << r->message;
  v1::PutResponse response;
  ASSERT_TRUE(response.ParseFromString(r->body));
  EXPECT_EQ(response.blocks_stored(), 3u);
  EXPECT_OK(sends->Wait(deadline()));
  EXPECT_EQ(Resident(*c, seq), 3u);
  auto got = c->GetBlocks("fp16", seq.keys);
  ASSERT_OK(got);
  for (size_t i = 0; i < seq.keys.size(); ++i) EXPECT_EQ((*got)[i].data, seq.encoded[i]) << i;

  // A frame over UCX's message limit never leaves the channel.
  EXPECT_EQ(ch->Call(FrameOp::kPut, std::string(ch->max_call_frame(), 'x'), deadline())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// With tokens on, a session's call frames run as the identity of the first gRPC call that
// named it: the client's first Put sends its header over gRPC (the frame is refused
// UNAUTHENTICATED before the transfer is touched), the next ones go as frames, and a
// namespace of another tenant is refused as over gRPC.
TEST_F(UcxTest, WithAuthPutCallFramesRunAsTheIdentityTheirSessionIsBoundTo) {
  StartServer({"--config",
               WriteConfig(dir_, 10000,
                           "tenants { tenant: \"team-a\" token_sha256: "
                           "\"a70bf50e531ce1a817561f2f5d5b6645d4e806becf58ccc5e8cf6b8045a090a8\" }\n"
                           "tenants { tenant: \"team-b\" token_sha256: "
                           "\"49e2bb7eab54cf09b409ffafd3fa8a8a955a60eb972faacaefbed3dbd3207132\" }\n")});
  ClientOptions a = Options("fp16");
  a.auth_token = "token-a";
  a.namespace_spec = testing::NamespaceSpecOf("fp16", kLayout, v1::CODEC_FP16, "team-a");
  std::unique_ptr<Client> ca = Connect(a);
  ASSERT_NE(ca, nullptr);
  ASSERT_TRUE(ca->uses_ucx());
  ClientOptions b = Options("other");
  b.auth_token = "token-b";
  b.ucx = false;
  b.namespace_spec = testing::NamespaceSpecOf("other", kLayout, v1::CODEC_FP16, "team-b");
  std::unique_ptr<Client> cb = Connect(b);
  ASSERT_NE(cb, nullptr);

  const Sequence seq = MakeSequence("fp16", kLayout, 2, 32);
  ASSERT_OK(ca->PutBlocks("fp16", std::span(seq.blocks).first(1)));
  EXPECT_EQ(ca->ucx_calls(), 0u);
  ASSERT_OK(ca->PutBlocks("fp16", std::span(seq.blocks).subspan(1)));
  EXPECT_EQ(ca->ucx_calls(), 1u);
  auto got = ca->GetBlocks("fp16", seq.keys);
  ASSERT_OK(got);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ((*got)[i].data, seq.encoded[i]) << i;

  // team-b's namespace, from team-a's session: the frame's answer is the gRPC call's.
  const Sequence other = MakeSequence("other", kLayout, 1, 33);
  auto over_frame = ca->PutBlocks("other", other.blocks);
  EXPECT_EQ(ca->ucx_calls(), 2u);
  a.ucx = false;
  std::unique_ptr<Client> grpc_only = Connect(a);
  ASSERT_NE(grpc_only, nullptr);
  auto over_grpc = grpc_only->PutBlocks("other", other.blocks);
  ASSERT_FALSE(over_frame.ok());
  ASSERT_FALSE(over_grpc.ok());
  EXPECT_EQ(over_frame.status().code(), over_grpc.status().code()) << over_frame.status();
  auto stored = cb->GetBlocks("other", other.keys);
  ASSERT_OK(stored);
  EXPECT_FALSE((*stored)[0].info.found());
}

TEST_F(UcxTest, AClientGoneMidTransferReleasesItsReservation) {
  // 16 MiB of Put budget: one 300-block (about 9.5 MiB) Put fits, two do not.
  StartServer({"--config",
               WriteConfig(dir_, 60000, "memory_quota_bytes: 16777216 max_put_bytes: 10485760\n")});
  // One stream per call: the refused Put below asks for all its room in one header (with
  // several streams, each fitting the budget left, whether they overlap is timing).
  ClientOptions one_stream = Options("fp16", v1::CODEC_FP16, true);
  one_stream.max_streams_per_call = 1;
  auto c = Connect(one_stream);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->uses_ucx());
  const Sequence big = MakeSequence("fp16", kLayout, 300, 21);
  std::unique_ptr<UcxChannel> ch = OpenChannel();
  ASSERT_NE(ch, nullptr);
  ASSERT_EQ(Stats().ucx_sessions(), 2u);
  // The Put announces its payloads and reserves them; only block 0's ever comes. Once it
  // has landed (the server counts it) the transfer and its reservation are in place.
  grpc::Status stalled;
  std::thread put([&] { stalled = RawUcxPut(big, ch->session(), 1); });
  const std::span<const uint8_t> first[] = {kv::AsBytes(big.encoded[0])};
  auto sends = ch->SendPut(1, first);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Stats().ucx_put_bytes() < big.encoded[0].size() &&
         std::chrono::steady_clock::now() < give_up) {
  }
  EXPECT_EQ(Stats().ucx_put_bytes(), big.encoded[0].size());
  // The payloads land in hot slots reserved for them (TieredStore::ReservePut): the
  // room of all 300 blocks is taken while the transfer waits.
  uint64_t announced = 0;
  for (const std::string& e : big.encoded) announced += e.size();
  EXPECT_GE(Stats().hot_used_bytes(), announced);
  // Another Put of that size does not fit beside it.
  absl::Status refused =
      c->PutBlocks("fp16", MakeSequence("fp16", kLayout, 300, 100).blocks).status();
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_TRUE(c->uses_ucx());
  // The client goes away: its endpoint fails, its session ends, the Put fails and its
  // reservation is released.
  const uint64_t held = Stats().hot_used_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  ch.reset();
  put.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(stalled.error_code(), grpc::StatusCode::UNAVAILABLE) << stalled.error_message();
  EXPECT_TRUE(HasReason(stalled, v1::UCX_TRANSFER_FAILED));
  EXPECT_EQ(Resident(*c, big), 0u);
  // The reserved slots went back (released once the failed receives let go of them);
  // what stays in use is the refused Put's batches stored before its refusal.
  const auto released_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Stats().hot_used_bytes() + announced > held &&
         std::chrono::steady_clock::now() < released_by) {
  }
  EXPECT_LE(Stats().hot_used_bytes() + announced, held);
  EXPECT_OK(c->PutBlocks("fp16", MakeSequence("fp16", kLayout, 300, 999).blocks));
  EXPECT_EQ(Stats().ucx_sessions(), 1u);
}

TEST_F(UcxTest, UcxOffOnEitherSideFallsBackToTheStream) {
  StartServer({});  // no --ucx
  auto c = Connect("fp16");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->uses_ucx());
  const Sequence seq = MakeSequence("fp16", kLayout, 4, 13);
  ASSERT_OK(c->PutBlocks("fp16", seq.blocks));
  auto got = c->GetBlocks("fp16", seq.keys);
  ASSERT_OK(got);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ((*got)[i].data, seq.encoded[i]);
  ASSERT_OK(server_->Terminate());

  StartServer();
  auto off = Connect("fp16", v1::CODEC_FP16, /*ucx=*/false);
  ASSERT_NE(off, nullptr);
  EXPECT_FALSE(off->uses_ucx());
  got = off->GetBlocks("fp16", seq.keys);
  ASSERT_OK(got);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ((*got)[i].data, seq.encoded[i]);
  EXPECT_EQ(Stats().ucx_get_bytes(), 0u);
}

TEST_F(UcxTest, AServerKilledMidTransferGivesUnavailableAndStoresNothingPartial) {
  StartServer();
  auto c = Connect("fp16");
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->uses_ucx());
  const Sequence seq = MakeSequence("fp16", kLayout, 64, 17);
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  ASSERT_TRUE(testing::WaitUntilStopped(server_->pid()));
  absl::Status status;
  std::thread put([&] { status = c->PutBlocks("fp16", seq.blocks).status(); });
  server_->Kill();
  put.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  StartServer();
  auto after = Connect("fp16", v1::CODEC_FP16, /*ucx=*/false);
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(Resident(*after, seq), 0u);
}

TEST_F(UcxTest, AThreeNodeClusterWithTwoReplicasServesOverUcxWithANodeKilled) {
  testing::StaticPeerCluster::Options o;
  o.num_nodes = 3;
  o.replication_factor = 2;
  o.root_dir = dir_.path();
  o.extra_config = "ucx { enabled: true }\nshm_socket: \"off\"\n";
  auto nodes = testing::StaticPeerCluster::Create(o);
  ASSERT_OK(nodes);
  ASSERT_OK(nodes->StartAll());
  ClusterClientOptions co;
  co.node.server = nodes->ids()[0];
  co.node.num_channels = 1;
  co.node.default_deadline_ms = 5000;
  co.node.namespace_spec = Spec("fp16");
  co.node.shared_memory = false;
  co.node.ucx_transports = "tcp";
  auto cluster = ClusterClient::Connect(co);
  ASSERT_OK(cluster);
  ASSERT_EQ((*cluster)->members().size(), 3u);
  const Sequence seq = MakeSequence("fp16", kLayout, 24, 31);
  auto put = (*cluster)->PutBlocks("fp16", seq.blocks);
  ASSERT_OK(put);
  EXPECT_EQ(put->blocks_stored, 48u);  // two copies of each
  // Every node received its copies over UCX, none in the gRPC stream.
  auto node_stats = [&](int i) {
    auto stub = v1::KvCacheAdmin::NewStub(
        grpc::CreateChannel(nodes->ids()[i], grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::StatsResponse resp;
    EXPECT_OK(stub->Stats(&ctx, v1::StatsRequest(), &resp));
    return resp;
  };
  uint64_t ucx_put = 0;
  for (int i = 0; i < 3; ++i) {
    const uint64_t n = node_stats(i).ucx_put_bytes();
    EXPECT_GT(n, 0u) << nodes->ids()[i];
    ucx_put += n;
  }
  uint64_t encoded = 0;
  for (const std::string& e : seq.encoded) encoded += e.size();
  EXPECT_EQ(ucx_put, 2 * encoded);

  nodes->node(2).Kill();  // SIGKILL
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second with node 2 known down
    auto got = (*cluster)->GetBlocks("fp16", seq.keys, {.deadline_ms = 4000});
    ASSERT_OK(got);
    for (size_t i = 0; i < seq.keys.size(); ++i) {
      ASSERT_TRUE((*got)[i].info.found()) << i;
      EXPECT_TRUE((*got)[i].info.ucx()) << i;
      EXPECT_EQ((*got)[i].data, seq.encoded[i]) << i;
    }
  }
}

}  // namespace
}  // namespace kvtier::client
