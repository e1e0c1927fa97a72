// In-process tests of KvtierServer's lifecycle: health and UNAVAILABLE before the store
// is open, SERVING after, refusal and flush on shutdown.
#include "service/server.h"

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "service/config.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier::service {
namespace {

// Calls grpc.health.v1.Health/Check for `service` ("" = the whole server); returns the
// serving status (1 = SERVING, 2 = NOT_SERVING) or -1 on an RPC error.
int HealthStatus(grpc::Channel* channel, const std::string& service = "") {
  grpc::ClientContext ctx;
  // HealthCheckRequest { string service = 1; }
  std::string request_bytes;
  if (!service.empty()) {
    request_bytes.push_back(0x0a);
    request_bytes.push_back(static_cast<char>(service.size()));
    request_bytes += service;
  }
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer req(&slice, 1), resp;
  grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check",
                                   grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel, method, &ctx, req, &resp);
  if (!s.ok()) return -1;
  grpc::Slice out;
  if (!resp.DumpToSingleSlice(&out).ok() || out.size() != 2 || out.begin()[0] != 0x08) {
    return -1;
  }
  return out.begin()[1];
}

v1::ServerConfig TestConfig(const testing::TempDir& dir) {
  auto cl = ParseCommandLine({"--port", "0", "--data-dir", dir.Sub("data"), "--hot-capacity",
                              "8MiB", "--executor-threads", "2"});
  EXPECT_OK(cl);
  return cl->config;
}

TEST(KvtierServerTest, NotServingUntilTheStoreIsOpen) {
  testing::TempDir dir;
  auto server = KvtierServer::Start(TestConfig(dir));
  ASSERT_OK(server);
  ASSERT_GT((*server)->port(), 0);
  auto channel = grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials());
  EXPECT_EQ(HealthStatus(channel.get()), 2);  // NOT_SERVING
  EXPECT_EQ(HealthStatus(channel.get(), "kvtier.v1.KvCache"), 2);
  EXPECT_EQ(HealthStatus(channel.get(), "kvtier.v1.KvCacheAdmin"), 2);
  EXPECT_EQ(HealthStatus(channel.get(), "no.such.Service"), -1);  // NOT_FOUND

  auto kv = v1::KvCache::NewStub(channel);
  v1::LookupRequest req;
  req.set_namespace_("x");
  req.add_keys("k");
  v1::LookupResponse resp;
  {
    grpc::ClientContext ctx;
    grpc::Status s = kv->Lookup(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  }

  ASSERT_OK((*server)->OpenStore());
  EXPECT_EQ(HealthStatus(channel.get()), 1);  // SERVING
  EXPECT_EQ(HealthStatus(channel.get(), "kvtier.v1.KvCache"), 1);
  EXPECT_EQ(HealthStatus(channel.get(), "kvtier.v1.KvCacheAdmin"), 1);
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(kv->Lookup(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  EXPECT_OK((*server)->Shutdown());
  EXPECT_OK((*server)->Shutdown());  // idempotent
}

TEST(KvtierServerTest, ConfigNamespacesAreRegisteredAtStartAndMismatchesFail) {
  testing::TempDir dir;
  v1::ServerConfig config = TestConfig(dir);
  v1::NamespaceSpec* ns = config.add_namespaces();
  ns->set_name("cfg");
  ns->mutable_layout()->set_num_layers(1);
  ns->mutable_layout()->set_num_kv_heads(1);
  ns->mutable_layout()->set_head_dim(32);
  ns->mutable_layout()->set_tokens_per_block(32);
  ns->mutable_layout()->set_dtype(v1::DTYPE_FP16);
  {
    auto server = KvtierServer::Start(config);
    ASSERT_OK(server);
    ASSERT_OK((*server)->OpenStore());
    auto channel = grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials());
    auto admin = v1::KvCacheAdmin::NewStub(channel);
    grpc::ClientContext ctx;
    v1::ListNamespacesResponse list;
    ASSERT_OK(admin->ListNamespaces(&ctx, v1::ListNamespacesRequest(), &list));
    ASSERT_EQ(list.namespaces_size(), 1);
    EXPECT_EQ(list.namespaces(0).name(), "cfg");
    EXPECT_EQ(list.namespaces(0).codec(), v1::CODEC_FP16);
  }
  // The same data dir with a different layout for "cfg" refuses to start.
  ns->mutable_layout()->set_head_dim(64);
  auto server = KvtierServer::Start(config);
  ASSERT_OK(server);
  absl::Status s = (*server)->OpenStore();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("namespaces[0]"));
}

TEST(KvtierServerTest, JoinHostPortBracketsIpv6) {
  EXPECT_EQ(JoinHostPort("127.0.0.1", 5), "127.0.0.1:5");
  EXPECT_EQ(JoinHostPort("::1", 5), "[::1]:5");
  EXPECT_EQ(JoinHostPort("[::1]", 5), "[::1]:5");
}

}  // namespace
}  // namespace kvtier::service
