// Mutation fuzzing at the gRPC level: an in-process KvtierServer (service/server.h) on
// 127.0.0.1 port 0 gets mutated Put streams, mutated Get requests and mutated unary
// request bytes, sent as raw byte buffers so they reach the server's own parsers. Every
// answer is OK or an error status with a message (never UNKNOWN / INTERNAL /
// UNIMPLEMENTED, which would mean a request was misread or mishandled); every OK Get
// stream parses as a well-formed stream; and the server keeps serving well-formed calls.
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/sync_stream.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "protocol/convert.h"
#include "protocol/wire.h"
#include "service/config.h"
#include "service/server.h"
#include "tests/testing/in_process_server.h"
#include "tests/testing/layouts.h"
#include "tests/testing/mutator.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::service {
namespace {

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// An answer a hostile request may get: OK, or an error that names what was wrong.
void ExpectAnswered(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return;
  EXPECT_NE(s.error_code(), grpc::StatusCode::UNKNOWN) << what << ": " << s.error_message();
  EXPECT_NE(s.error_code(), grpc::StatusCode::INTERNAL) << what << ": " << s.error_message();
  EXPECT_NE(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << what << ": " << s.error_message();
  EXPECT_FALSE(s.error_message().empty()) << what << " code " << s.error_code();
}

class GrpcFuzzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing::StartSmallServer(dir_.Sub("data"));
    ASSERT_OK(server);
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    stub_ = v1::KvCache::NewStub(channel_);
    register_seed_ = testing::SmallNamespaceRequest().SerializeAsString();
  }

  // The messages of a well-formed raw Put of `n` blocks keyed k0.. as one prefix chain,
  // payload cut into chunks of `chunk` bytes.
  std::vector<std::string> PutSeed(size_t n, size_t chunk, testing::Mutator& m) {
    const uint64_t block = testing::SmallLayout().BytesPerBlock();
    v1::PutRequest header;
    auto* h = header.mutable_header();
    h->set_namespace_("ns");
    h->set_format(v1::PAYLOAD_FORMAT_RAW);
    std::string all;
    for (size_t i = 0; i < n; ++i) {
      auto* b = h->add_blocks();
      b->set_key(absl::StrCat("k", i));
      if (i > 0) b->set_parent_key(absl::StrCat("k", i - 1));
      b->set_block_index(static_cast<uint32_t>(i));
      b->set_size(block);
      for (uint64_t j = 0; j < block; ++j) all.push_back(static_cast<char>(m.rng()()));
    }
    std::vector<std::string> out = {header.SerializeAsString()};
    for (size_t at = 0; at < all.size(); at += chunk) {
      v1::PutRequest c;
      c.set_chunk(all.substr(at, chunk));
      out.push_back(c.SerializeAsString());
    }
    return out;
  }

  grpc::Status RawPut(const std::vector<std::string>& messages) {
    grpc::ClientContext ctx;
    grpc::internal::RpcMethod method("/kvtier.v1.KvCache/Put",
                                     grpc::internal::RpcMethod::CLIENT_STREAMING);
    grpc::ByteBuffer response;
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel_.get(), method,
                                                                      &ctx, &response));
    for (const std::string& msg : messages) {
      if (!writer->Write(Buffer(msg))) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  grpc::Status RawGet(const std::string& request, std::vector<std::string>* responses) {
    grpc::ClientContext ctx;
    grpc::internal::RpcMethod method("/kvtier.v1.KvCache/Get",
                                     grpc::internal::RpcMethod::SERVER_STREAMING);
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel_.get(), method,
                                                                      &ctx, Buffer(request)));
    grpc::ByteBuffer msg;
    while (reader->Read(&msg)) responses->push_back(Flatten(msg));
    return reader->Finish();
  }

  grpc::Status RawUnary(const std::string& path, const std::string& request) {
    grpc::ClientContext ctx;
    grpc::internal::RpcMethod method(path.c_str(), grpc::internal::RpcMethod::NORMAL_RPC);
    grpc::ByteBuffer response;
    return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel_.get(), method, &ctx, Buffer(request), &response);
  }

  // A well-formed Put and Get of fresh keys still work (the server keeps serving).
  void ExpectStillServing(testing::Mutator& m) {
    ASSERT_OK(RawPut(PutSeed(2, 1000, m)));
    v1::GetRequest get;
    get.set_namespace_("ns");
    get.add_keys("k0");
    get.add_keys("k1");
    std::vector<std::string> responses;
    const grpc::Status s = RawGet(get.SerializeAsString(), &responses);
    ASSERT_OK(s);
    v1::GetResponse header;
    ASSERT_FALSE(responses.empty());
    ASSERT_TRUE(header.ParseFromString(responses[0]));
    EXPECT_TRUE(header.header().blocks(0).found());
  }

  testing::TempDir dir_;
  std::unique_ptr<KvtierServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KvCache::Stub> stub_;
  std::string register_seed_;
};

TEST_F(GrpcFuzzTest, MutatedPutStreamsAreAnsweredWithAStatus) {
  testing::Mutator m(4242);
  for (int it = 0; it < 600; ++it) {
    SCOPED_TRACE(absl::StrCat("iteration ", it));
    std::vector<std::string> messages = PutSeed(1 + m.Below(3), 1 + m.Below(6000), m);
    for (int k = 0, n = 1 + static_cast<int>(m.Below(2)); k < n; ++k) {
      // The header half of the time: that is where most of the parsing is.
      std::string& victim = m.Below(2) == 0 ? messages[0] : messages[m.Below(messages.size())];
      victim = m.Mutate(victim);
    }
    switch (m.Below(5)) {
      case 0:
        messages.erase(messages.begin() + m.Below(messages.size()));
        break;
      case 1:
        messages.push_back(messages[m.Below(messages.size())]);
        break;
      case 2:
        std::swap(messages[0], messages[m.Below(messages.size())]);
        break;
      default:
        break;
    }
    ExpectAnswered(RawPut(messages), "Put");
  }
  ExpectStillServing(m);
}

TEST_F(GrpcFuzzTest, MutatedGetRequestsAreAnsweredAndOkStreamsAreWellFormed) {
  testing::Mutator m(77);
  ASSERT_OK(RawPut(PutSeed(3, 4096, m)));
  std::vector<std::string> seeds;
  for (auto format : {v1::PAYLOAD_FORMAT_RAW, v1::PAYLOAD_FORMAT_ENCODED}) {
    v1::GetRequest req;
    req.set_namespace_("ns");
    for (const char* k : {"k0", "k1", "k2", "absent"}) req.add_keys(k);
    req.set_format(format);
    seeds.push_back(req.SerializeAsString());
  }
  int ok = 0;
  for (int it = 0; it < 800; ++it) {
    SCOPED_TRACE(absl::StrCat("iteration ", it));
    std::vector<std::string> responses;
    const grpc::Status s = RawGet(m.Mutate(seeds[m.Below(seeds.size())]), &responses);
    ExpectAnswered(s, "Get");
    if (!s.ok()) continue;
    ++ok;
    std::deque<std::string> dest;
    protocol::GetStreamParser parser([&](size_t, const v1::GetBlockInfo& info)
                                         -> absl::StatusOr<std::span<uint8_t>> {
      dest.emplace_back(info.size(), '\0');
      return std::span<uint8_t>(reinterpret_cast<uint8_t*>(dest.back().data()),
                                dest.back().size());
    });
    for (const std::string& r : responses) {
      const std::span<const uint8_t> one(reinterpret_cast<const uint8_t*>(r.data()), r.size());
      ASSERT_OK(parser.Consume({&one, 1}));
    }
    EXPECT_OK(parser.Finish());
  }
  EXPECT_GT(ok, 0);
  ExpectStillServing(m);
}

TEST_F(GrpcFuzzTest, MutatedUnaryRequestsAreAnsweredWithAStatus) {
  auto keyed = [](auto req) {
    req.set_namespace_("ns");
    req.add_keys("k0");
    req.add_keys("k1");
    return req.SerializeAsString();
  };
  v1::ReportScoresRequest scores;
  scores.add_scores(0.5f);
  scores.add_scores(0.25f);
  v1::EvictRequest evict;
  evict.set_namespace_("ns");
  evict.add_keys("k1");
  const std::vector<std::pair<std::string, std::string>> seeds = {
      {"/kvtier.v1.KvCache/RegisterNamespace", register_seed_},
      {"/kvtier.v1.KvCache/Lookup", keyed(v1::LookupRequest())},
      {"/kvtier.v1.KvCache/Pin", keyed(v1::PinRequest())},
      {"/kvtier.v1.KvCache/Unpin", keyed(v1::UnpinRequest())},
      {"/kvtier.v1.KvCache/ReportScores", keyed(scores)},
      {"/kvtier.v1.KvCache/Delete", keyed(v1::DeleteRequest())},
      {"/kvtier.v1.KvCacheAdmin/Stats", v1::StatsRequest().SerializeAsString()},
      {"/kvtier.v1.KvCacheAdmin/ListNamespaces", v1::ListNamespacesRequest().SerializeAsString()},
      {"/kvtier.v1.KvCacheAdmin/Evict", evict.SerializeAsString()},
      {"/kvtier.v1.KvCacheAdmin/ClusterStatus", v1::ClusterStatusRequest().SerializeAsString()},
  };
  testing::Mutator m(31337);
  ASSERT_OK(RawPut(PutSeed(2, 4096, m)));
  for (int it = 0; it < 1500; ++it) {
    const auto& [path, seed] = seeds[m.Below(seeds.size())];
    SCOPED_TRACE(absl::StrCat("iteration ", it, " ", path));
    ExpectAnswered(RawUnary(path, m.Mutate(seed)), path);
  }
  ExpectStillServing(m);
}

}  // namespace
}  // namespace kvtier::service
