// In-process tests of the KvCache reactors and handlers (service/put_reactor.h,
// service/get_reactor.h, service/data_handlers.cc): a real KvtierServer on 127.0.0.1
// port 0 over a real store in a temp dir, driven with hand-built Put/Get frames.
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/sync_stream.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "protocol/convert.h"
#include "protocol/error_detail.h"
#include "service/config.h"
#include "service/server.h"
#include "tests/testing/in_process_server.h"
#include "tests/testing/layouts.h"
#include "tests/testing/poll_until.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::service {
namespace {

using ::testing::HasSubstr;

// Payload bytes per Get chunk frame with --max-message-bytes 64KiB (ServiceLimits).
constexpr uint64_t kChunkBytes = (64u << 10) - 64;

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class KvCacheServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing::StartSmallServer(dir_.Sub("data"),
                                            [this](v1::ServerConfig& c) { Configure(c); });
    ASSERT_OK(server);
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    stub_ = v1::KvCache::NewStub(channel_);
  }

  // Adjusts the defaulted config before the server starts.
  virtual void Configure(v1::ServerConfig& /*config*/) {}

  // Runs one Put stream of `messages` (the header first) and returns its status.
  grpc::Status Put(const std::vector<v1::PutRequest>& messages, v1::PutResponse* resp) {
    grpc::ClientContext ctx;
    auto writer = stub_->Put(&ctx, resp);
    for (const auto& m : messages) {
      if (!writer->Write(m)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // A raw-format Put header for `payloads` keyed "k0", "k1", ... as one prefix chain.
  static v1::PutRequest Header(const std::vector<std::string>& payloads) {
    v1::PutRequest m;
    v1::PutHeader* h = m.mutable_header();
    h->set_namespace_("ns");
    h->set_format(v1::PAYLOAD_FORMAT_RAW);
    for (size_t i = 0; i < payloads.size(); ++i) {
      v1::PutBlock* b = h->add_blocks();
      b->set_key(absl::StrCat("k", i));
      if (i > 0) b->set_parent_key(absl::StrCat("k", i - 1));
      b->set_block_index(static_cast<uint32_t>(i));
      b->set_size(payloads[i].size());
    }
    return m;
  }

  // The header plus the concatenated payloads cut into chunk messages of `chunk` bytes
  // (so chunks straddle block boundaries).
  static std::vector<v1::PutRequest> PutMessages(const std::vector<std::string>& payloads,
                                                 size_t chunk) {
    std::vector<v1::PutRequest> out = {Header(payloads)};
    std::string all;
    for (const auto& p : payloads) all += p;
    for (size_t at = 0; at < all.size(); at += chunk) {
      out.emplace_back().set_chunk(all.substr(at, chunk));
    }
    return out;
  }

  // Runs a Get stream; returns its status and the messages received.
  grpc::Status Get(const v1::GetRequest& req, std::vector<v1::GetResponse>* messages) {
    grpc::ClientContext ctx;
    auto reader = stub_->Get(&ctx, req);
    v1::GetResponse m;
    while (reader->Read(&m)) messages->push_back(m);
    return reader->Finish();
  }

  testing::TempDir dir_;
  std::unique_ptr<KvtierServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KvCache::Stub> stub_;
};

TEST_F(KvCacheServiceTest, PutInOddChunksThenGetInBoundedFramesRoundTripsBitExact) {
  const uint64_t block = testing::SmallLayout().BytesPerBlock();
  std::vector<std::string> payloads;
  for (int i = 0; i < 8; ++i) payloads.push_back(RandomBytes(block, 100 + i));
  v1::PutResponse put;
  grpc::Status ps = Put(PutMessages(payloads, 10007), &put);
  ASSERT_OK(ps);
  EXPECT_EQ(put.blocks_stored(), 8u);

  v1::GetRequest req;
  req.set_namespace_("ns");
  req.set_format(v1::PAYLOAD_FORMAT_RAW);
  for (int i = 0; i < 8; ++i) req.add_keys(absl::StrCat("k", i));
  req.add_keys("missing");
  std::vector<v1::GetResponse> messages;
  grpc::Status gs = Get(req, &messages);
  ASSERT_OK(gs);
  ASSERT_FALSE(messages.empty());
  ASSERT_TRUE(messages[0].has_header());
  const v1::GetHeader& header = messages[0].header();
  ASSERT_EQ(header.blocks_size(), 9);
  EXPECT_FALSE(header.blocks(8).found());
  std::string got;
  for (size_t i = 1; i < messages.size(); ++i) {
    ASSERT_FALSE(messages[i].has_header());
    EXPECT_LE(messages[i].chunk().size(), kChunkBytes);
    got += messages[i].chunk();
  }
  // 256 KiB of payload in frames of at most kChunkBytes: 5 frames.
  EXPECT_EQ(messages.size() - 1, (8 * block + kChunkBytes - 1) / kChunkBytes);
  std::string want;
  for (int i = 0; i < 8; ++i) {
    EXPECT_TRUE(header.blocks(i).found());
    EXPECT_EQ(header.blocks(i).size(), block);
    EXPECT_EQ(header.blocks(i).codec(), v1::CODEC_FP16);
    want += payloads[i];
  }
  EXPECT_EQ(got, want);
}

TEST_F(KvCacheServiceTest, BadPutsNameTheFieldAndStoreNothing) {
  const uint64_t block = testing::SmallLayout().BytesPerBlock();
  std::vector<std::string> payloads = {RandomBytes(block, 1), RandomBytes(block, 2)};
  v1::PutResponse resp;
  {
    auto messages = PutMessages(payloads, 4096);
    messages[0].mutable_header()->mutable_blocks(1)->clear_key();
    grpc::Status s = Put(messages, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("header.blocks[1].key"));
  }
  {
    auto messages = PutMessages(payloads, 4096);
    messages[0].mutable_header()->mutable_blocks(0)->set_size(block - 2);
    grpc::Status s = Put(messages, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("header.blocks[0].size"));
  }
  {
    auto messages = PutMessages(payloads, 4096);
    messages.emplace_back().set_chunk("one byte too many");
    grpc::Status s = Put(messages, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("chunk:"));
  }
  {
    auto messages = PutMessages(payloads, 4096);
    messages.pop_back();
    grpc::Status s = Put(messages, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("header.blocks[1]"));
  }
  {
    auto messages = PutMessages(payloads, 4096);
    kv::Layout other = testing::SmallLayout();
    other.head_dim = 128;
    *messages[0].mutable_header()->mutable_layout() = protocol::ToProto(other);
    grpc::Status s = Put(messages, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(s.error_message(), HasSubstr("header.layout.head_dim is 128"));
  }
  {
    std::vector<v1::PutRequest> messages(1);
    messages[0].set_chunk("no header");
    grpc::Status s = Put(messages, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("header"));
  }
  v1::GetRequest req;
  req.set_namespace_("ns");
  req.add_keys("k0");
  std::vector<v1::GetResponse> messages;
  ASSERT_OK(Get(req, &messages));
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_FALSE(messages[0].header().blocks(0).found());
}

TEST_F(KvCacheServiceTest, BadGetsNameTheField) {
  std::vector<v1::GetResponse> messages;
  v1::GetRequest req;
  req.set_namespace_("ns");
  grpc::Status s = Get(req, &messages);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("keys is empty"));
  req.add_keys(std::string(33, 'k'));
  s = Get(req, &messages);
  EXPECT_THAT(s.error_message(), HasSubstr("keys[0] must be 1..32 bytes"));
  req.set_namespace_("nope");
  EXPECT_EQ(Get(req, &messages).error_code(), grpc::StatusCode::NOT_FOUND);

  // Bytes that are no GetRequest at all.
  grpc::ClientContext ctx;
  grpc::internal::RpcMethod method("/kvtier.v1.KvCache/Get",
                                   grpc::internal::RpcMethod::SERVER_STREAMING);
  grpc::Slice garbage(std::string("\xff\xff\xff\xff", 4));
  grpc::ByteBuffer request(&garbage, 1);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel_.get(), method, &ctx,
                                                                    request));
  grpc::ByteBuffer unused;
  while (reader->Read(&unused)) {
  }
  s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("GetRequest"));
}

// The lost-session condition travels as a structured detail, not as message text.
TEST_F(KvCacheServiceTest, UnknownShmSessionAnswersWithAStructuredErrorDetail) {
  v1::GetRequest req;
  req.set_namespace_("ns");
  req.add_keys("k0");
  req.set_shm_session("no-such-session");
  req.add_shm_destinations()->set_capacity(16);
  std::vector<v1::GetResponse> messages;
  const grpc::Status get = Get(req, &messages);
  EXPECT_EQ(get.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  const absl::Status got = protocol::FromGrpcStatus("Get", get);
  ASSERT_TRUE(protocol::GetErrorDetail(got).has_value()) << get.error_message();
  EXPECT_EQ(protocol::GetErrorDetail(got)->reason(), v1::SHM_SESSION_UNKNOWN);
  EXPECT_EQ(protocol::GetErrorDetail(got)->field(), "shm_session");

  std::vector<v1::PutRequest> put = {Header({std::string(testing::SmallLayout().BytesPerBlock(),
                                                         '\0')})};
  put[0].mutable_header()->set_shm_session("no-such-session");
  v1::PutResponse resp;
  const absl::Status put_status = protocol::FromGrpcStatus("Put", Put(put, &resp));
  EXPECT_TRUE(protocol::HasErrorReason(put_status, v1::SHM_SESSION_UNKNOWN)) << put_status;
  EXPECT_EQ(protocol::GetErrorDetail(put_status)->field(), "header.shm_session");

  // Other errors carry no detail.
  req.clear_shm_session();
  req.clear_shm_destinations();
  req.set_namespace_("nope");
  messages.clear();
  EXPECT_FALSE(protocol::GetErrorDetail(protocol::FromGrpcStatus("Get", Get(req, &messages)))
                   .has_value());
}

// Every unary method parses its request itself: bytes that are no request at all get
// INVALID_ARGUMENT naming the method (not gRPC's generic INTERNAL).
TEST_F(KvCacheServiceTest, UnaryRequestsThatDoNotParseAreInvalidArgumentNamingTheMethod) {
  const char* const kMethods[] = {
      "/kvtier.v1.KvCache/RegisterNamespace", "/kvtier.v1.KvCache/Lookup",
      "/kvtier.v1.KvCache/Pin",               "/kvtier.v1.KvCache/Unpin",
      "/kvtier.v1.KvCache/ReportScores",      "/kvtier.v1.KvCache/Delete",
      "/kvtier.v1.KvCache/Compact",           "/kvtier.v1.KvCacheAdmin/Stats",
      "/kvtier.v1.KvCacheAdmin/ListNamespaces", "/kvtier.v1.KvCacheAdmin/Evict",
      "/kvtier.v1.KvCacheAdmin/Flush",        "/kvtier.v1.KvCacheAdmin/ClusterStatus"};
  for (const char* path : kMethods) {
    grpc::ClientContext ctx;
    grpc::internal::RpcMethod method(path, grpc::internal::RpcMethod::NORMAL_RPC);
    grpc::Slice garbage(std::string("\xff\xff\xff\xff", 4));
    grpc::ByteBuffer request(&garbage, 1), response;
    const grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel_.get(), method, &ctx, request, &response);
    const std::string name = std::string(path).substr(std::string(path).rfind('/') + 1);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << path;
    EXPECT_THAT(s.error_message(), HasSubstr(name + ": request bytes do not parse")) << path;
  }
  // Well-formed requests still get their answers.
  auto admin = v1::KvCacheAdmin::NewStub(channel_);
  grpc::ClientContext ctx;
  v1::ListNamespacesResponse list;
  ASSERT_OK(admin->ListNamespaces(&ctx, v1::ListNamespacesRequest(), &list));
  ASSERT_EQ(list.namespaces_size(), 1);
  EXPECT_EQ(list.namespaces(0).name(), "ns");
}

// Lookup reads its request in place (protocol::ReadLookupRequest); encodings that reader
// declines go to protobuf, with protobuf's verdict: valid UTF-8 in the namespace is a
// name like any other, invalid UTF-8 does not parse, unknown fields are ignored.
TEST_F(KvCacheServiceTest, LookupAnswersEveryEncodingAsProtobufReadsIt) {
  auto lookup = [&](const std::string& bytes, v1::LookupResponse* out) {
    grpc::ClientContext ctx;
    grpc::internal::RpcMethod method("/kvtier.v1.KvCache/Lookup",
                                     grpc::internal::RpcMethod::NORMAL_RPC);
    grpc::Slice body(bytes);
    grpc::ByteBuffer request(&body, 1), response;
    const grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel_.get(), method, &ctx, request, &response);
    if (s.ok()) {
      std::vector<grpc::Slice> slices;
      EXPECT_OK(response.Dump(&slices));
      std::string flat;
      for (const grpc::Slice& sl : slices)
        flat.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
      EXPECT_TRUE(out->ParseFromString(flat));
    }
    return s;
  };
  v1::LookupRequest req;
  req.set_namespace_("ns");
  req.add_keys("k0");
  req.add_keys("k1");
  req.set_compact(true);
  std::string bytes = req.SerializeAsString() + std::string("\xa0\x06\x07", 3);  // field 100
  v1::LookupResponse resp;
  ASSERT_OK(lookup(bytes, &resp));
  EXPECT_EQ(resp.tiers().size(), 2u);  // compact, as asked
  EXPECT_EQ(resp.prefix_blocks(), 0u);

  req.set_namespace_("n\xc3\xa9");  // valid UTF-8: the protobuf path, an unknown name
  grpc::Status s = lookup(req.SerializeAsString(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("is not registered"));

  bytes = req.SerializeAsString();
  bytes[bytes.find("\xa9")] = '(';  // no longer UTF-8
  s = lookup(bytes, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("Lookup: request bytes do not parse"));

  req.set_namespace_("ns");
  req.add_keys("");  // checked as before: the key is named
  s = lookup(req.SerializeAsString(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("keys[2]"));
}

// A 64 MiB Put budget (and gRPC memory quota), puts of up to 16 MiB each, and a short
// progress timeout.
class PutAdmissionTest : public KvCacheServiceTest {
 protected:
  static constexpr uint32_t kTimeoutMs = 300;
  void Configure(v1::ServerConfig& config) override {
    config.set_memory_quota_bytes(64u << 20);
    config.set_max_put_bytes(16u << 20);
    config.set_put_progress_timeout_ms(kTimeoutMs);
  }
};

TEST_F(PutAdmissionTest, IdleHeaderOnlyStreamsNeitherStarveOtherPutsNorLiveForever) {
  const uint64_t block = testing::SmallLayout().BytesPerBlock();
  // 16 streams each declare 16 MiB in their header (four times the budget in all), then
  // send nothing.
  struct Idle {
    grpc::ClientContext ctx;
    v1::PutResponse resp;
    std::unique_ptr<grpc::ClientWriter<v1::PutRequest>> writer;
  };
  std::vector<std::unique_ptr<Idle>> idle;
  for (int s = 0; s < 16; ++s) {
    std::vector<std::string> sizes(static_cast<size_t>((16u << 20) / block), std::string(block, 'x'));
    v1::PutRequest header = Header(sizes);
    for (auto& b : *header.mutable_header()->mutable_blocks()) b.set_key(absl::StrCat(s, "-", b.key()));
    auto stream = std::make_unique<Idle>();
    stream->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stream->writer = stub_->Put(&stream->ctx, &stream->resp);
    ASSERT_TRUE(stream->writer->Write(header));
    idle.push_back(std::move(stream));
  }
  // The victim's puts (a few MiB each) still go through.
  for (int round = 0; round < 3; ++round) {
    std::vector<std::string> payloads;
    for (int i = 0; i < 64; ++i) payloads.push_back(RandomBytes(block, 1000 * round + i));
    v1::PutResponse resp;
    grpc::Status ps = Put(PutMessages(payloads, 1 << 15), &resp);
    ASSERT_OK(ps) << "round " << round << ": " << ps.error_message();
    EXPECT_EQ(resp.blocks_stored(), 64u);
  }
  // Each idle stream is finished by the progress timeout, with a status naming it.
  for (auto& stream : idle) {
    const grpc::Status s = stream->writer->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("put_progress_timeout_ms"));
  }
  // Afterwards a Put of the largest allowed size (max_put_bytes) goes through whole.
  const size_t n = static_cast<size_t>((16u << 20) / block);
  std::vector<std::string> large;
  for (size_t i = 0; i < n; ++i) large.push_back(RandomBytes(block, 90000 + i));
  v1::PutResponse resp;
  const grpc::Status ps = Put(PutMessages(large, 1 << 15), &resp);
  ASSERT_OK(ps);
  EXPECT_EQ(resp.blocks_stored(), n);
}

TEST_F(PutAdmissionTest, AStreamThatStallsMidPayloadIsCutWithAStatusNamingTheTimeout) {
  const uint64_t block = testing::SmallLayout().BytesPerBlock();
  std::vector<std::string> big(static_cast<size_t>((16u << 20) / block), std::string(block, 'y'));
  auto messages = PutMessages(big, 1 << 15);
  {
    grpc::ClientContext ctx;
    v1::PutResponse resp;
    auto writer = stub_->Put(&ctx, &resp);
    // All but the last chunk, then the client stalls.
    for (size_t i = 0; i + 1 < messages.size(); ++i) ASSERT_TRUE(writer->Write(messages[i]));
    const grpc::Status s = writer->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("put_progress_timeout_ms"));
  }
  // The same put, complete, goes through.
  v1::PutResponse resp;
  grpc::Status ps = Put(messages, &resp);
  EXPECT_OK(ps);
}

// At most four Put streams per connection.
class PutConnectionCapTest : public KvCacheServiceTest {
 protected:
  void Configure(v1::ServerConfig& config) override { config.set_max_puts_per_connection(4); }
};

TEST_F(PutConnectionCapTest, OneConnectionCannotOpenMorePutsThanTheCapOthersStillCan) {
  const uint64_t block = testing::SmallLayout().BytesPerBlock();
  struct Open {
    grpc::ClientContext ctx;
    v1::PutResponse resp;
    std::unique_ptr<grpc::ClientWriter<v1::PutRequest>> writer;
  };
  std::vector<std::unique_ptr<Open>> open;
  // Ends the open streams; each declared a block it never sent, so a stream the server
  // counted ends INVALID_ARGUMENT (`counted`), one it refused RESOURCE_EXHAUSTED.
  const auto end_open = [&open](bool counted) {
    for (auto& stream : open) {
      stream->writer->WritesDone();
      const grpc::StatusCode code = stream->writer->Finish().error_code();
      if (counted) {
        EXPECT_EQ(code, grpc::StatusCode::INVALID_ARGUMENT);
      }
    }
    open.clear();
  };
  // The server counts a stream when its reactor starts, which a busy server may do after
  // a later call on the same connection has been answered: a fifth Put is refused once
  // the four are counted, which happens within the poll (a fifth that got in first stores
  // its block and closes, so the next try meets the cap again). On a loaded host one of
  // the four may itself start after a fifth and be the one refused; then no fifth is ever
  // refused, and the round is redone.
  v1::PutResponse resp;
  const std::vector<std::string> payloads = {RandomBytes(block, 7)};
  grpc::Status fifth;
  for (int round = 0; round < 5 && fifth.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED;
       ++round) {
    end_open(false);  // after a round where one of the four was refused
    for (int i = 0; i < 4; ++i) {
      auto stream = std::make_unique<Open>();
      stream->writer = stub_->Put(&stream->ctx, &stream->resp);
      ASSERT_TRUE(stream->writer->Write(Header({std::string(block, 'z')})));
      open.push_back(std::move(stream));
    }
    testing::PollUntil(
        [&] {
          fifth = Put(PutMessages(payloads, 1 << 15), &resp);
          return fifth.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
        },
        std::chrono::seconds(3));
  }
  EXPECT_EQ(fifth.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << fifth.error_message();
  EXPECT_THAT(fifth.error_message(), HasSubstr("max_puts_per_connection"));

  // Another connection is not affected.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto other = v1::KvCache::NewStub(
      grpc::CreateCustomChannel(server_->address(), grpc::InsecureChannelCredentials(), args));
  {
    grpc::ClientContext ctx;
    auto writer = other->Put(&ctx, &resp);
    for (const auto& m : PutMessages(payloads, 1 << 15)) ASSERT_TRUE(writer->Write(m));
    writer->WritesDone();
    const grpc::Status s = writer->Finish();
    EXPECT_OK(s);
  }
  // Once the four streams end, the first connection may put again.
  end_open(true);
  const grpc::Status again = Put(PutMessages(payloads, 1 << 15), &resp);
  EXPECT_OK(again);
}

}  // namespace
}  // namespace kvtier::service
