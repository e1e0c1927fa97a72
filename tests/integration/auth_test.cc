// Tenant authentication end to end: real kvtierd processes configured with tenant tokens
// (ServerConfig.tenants), the real Client, and a static-peer cluster whose fan-out
// authenticates with the peer token.
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/cluster_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "gtest/gtest.h"
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
using ::testing::UnorderedElementsAre;
using testing::ServerProcess;
using testing::TempDir;

constexpr kv::Layout kLayout = testing::SmallLayout();

// Tokens and their `printf %s TOKEN | sha256sum`, as an operator would configure them.
constexpr char kTenantsConfig[] =
    "tenants { tenant: \"team-a\" token_sha256: "
    "\"a70bf50e531ce1a817561f2f5d5b6645d4e806becf58ccc5e8cf6b8045a090a8\" }\n"  // token-a
    "tenants { tenant: \"team-b\" token_sha256: "
    "\"49e2bb7eab54cf09b409ffafd3fa8a8a955a60eb972faacaefbed3dbd3207132\" }\n"  // token-b
    "tenants { tenant: \"*\" token_sha256: "
    "\"9e2006e6e1c2d212766e683d1182cc30c65325954c6644e9d60c3bacb80901d0\" }\n";  // token-op

v1::NamespaceSpec Spec(const std::string& name, const std::string& tenant = "") {
  return testing::NamespaceSpecOf(name, kLayout, v1::CODEC_FP16, tenant);
}

std::vector<std::string> Names(const v1::ListNamespacesResponse& list) {
  std::vector<std::string> out;
  for (const auto& n : list.namespaces()) out.push_back(n.name());
  return out;
}

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_.Sub("kvtierd.textproto")) << kTenantsConfig;
    auto p = ServerProcess::StartKvtierd(dir_.Sub("data"),
                                         {"--config", dir_.Sub("kvtierd.textproto")});
    ASSERT_OK(p);
    server_ = std::make_unique<ServerProcess>(std::move(*p));
  }

  absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& token,
                                                  std::optional<v1::NamespaceSpec> spec = {}) {
    ClientOptions o;
    o.server = server_->address();
    o.auth_token = token;
    o.namespace_spec = std::move(spec);
    o.num_channels = 1;
    o.max_attempts = 1;
    return Client::Connect(o);
  }

  TempDir dir_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(AuthTest, CallsWithoutAListedTokenAreUnauthenticatedButHealthIsOpen) {
  auto none = Connect("");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnauthenticated) << none.status();
  EXPECT_THAT(none.status().message(), HasSubstr("authorization"));
  auto wrong = Connect("token-z", Spec("ns"));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated) << wrong.status();
  EXPECT_THAT(wrong.status().message(), HasSubstr("unknown token"));

  auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  grpc::ClientContext ctx;
  grpc::Slice empty("", 0);
  grpc::ByteBuffer req(&empty, 1), resp;
  grpc::internal::RpcMethod health("/grpc.health.v1.Health/Check",
                                   grpc::internal::RpcMethod::NORMAL_RPC);
  EXPECT_OK((grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
                   channel.get(), health, &ctx, req, &resp)));
}

TEST_F(AuthTest, TenantsOnlySeeAndUseTheirOwnNamespaces) {
  auto a = Connect("token-a", Spec("a-ns"));
  ASSERT_OK(a);
  EXPECT_EQ((*a)->connect_info().stored_spec.tenant(), "team-a");  // empty = the caller's
  auto b = Connect("token-b", Spec("b-ns"));
  ASSERT_OK(b);
  const Sequence seq = MakeSequence("a-ns", kLayout, 3, 21);
  ASSERT_OK((*a)->PutBlocks("a-ns", seq.blocks));
  auto got = (*a)->GetBlocks("a-ns", seq.keys);
  ASSERT_OK(got);
  EXPECT_EQ((*got)[2].data, seq.encoded[2]);

  // team-b cannot touch team-a's namespace in any way, nor claim it.
  const auto denied = absl::StatusCode::kPermissionDenied;
  EXPECT_EQ((*b)->GetBlocks("a-ns", seq.keys).status().code(), denied);
  EXPECT_EQ((*b)->PutBlocks("a-ns", seq.blocks).status().code(), denied);
  EXPECT_EQ((*b)->Lookup("a-ns", seq.keys).status().code(), denied);
  EXPECT_EQ((*b)->Delete("a-ns", seq.keys).status().code(), denied);
  EXPECT_EQ((*b)->Evict("a-ns", {}, /*drop=*/true).status().code(), denied);
  EXPECT_EQ((*b)->Stats("a-ns").status().code(), denied);
  auto claim = (*b)->RegisterNamespace(Spec("a-ns"));
  EXPECT_EQ(claim.status().code(), denied) << claim.status();
  auto impersonate = (*b)->RegisterNamespace(Spec("b-ns2", "team-a"));
  EXPECT_EQ(impersonate.status().code(), denied);
  EXPECT_THAT(impersonate.status().message(), HasSubstr("spec.tenant"));
  EXPECT_EQ((*b)->Flush().code(), denied);  // every namespace: operators only
  EXPECT_OK((*b)->Flush("b-ns"));
  auto b_cluster = (*b)->ClusterStatus();
  ASSERT_OK(b_cluster);
  for (const auto& ns : b_cluster->peers(0).stats().namespaces()) {
    EXPECT_EQ(ns.tenant(), "team-b") << ns.name();
  }

  auto b_list = (*b)->ListNamespaces();
  ASSERT_OK(b_list);
  EXPECT_THAT(Names(*b_list), UnorderedElementsAre("b-ns"));
  auto b_stats = (*b)->Stats();
  ASSERT_OK(b_stats);
  for (const auto& ns : b_stats->namespaces()) EXPECT_EQ(ns.tenant(), "team-b") << ns.name();

  // team-a's data is intact; an operator sees and reads everything.
  got = (*a)->GetBlocks("a-ns", seq.keys);
  ASSERT_OK(got);
  EXPECT_EQ((*got)[0].data, seq.encoded[0]);
  auto op = Connect("token-op");
  ASSERT_OK(op);
  auto all = (*op)->ListNamespaces();
  ASSERT_OK(all);
  EXPECT_THAT(Names(*all), UnorderedElementsAre("a-ns", "b-ns"));
  auto op_get = (*op)->GetBlocks("a-ns", seq.keys);
  ASSERT_OK(op_get);
  EXPECT_TRUE((*op_get)[1].info.found());
  EXPECT_OK((*op)->Flush());
}

// Peers authenticate their fan-out Lookups with the operator token from
// cluster.peer_token_file, so a tenant's cluster-wide Lookup sees blocks on every node.
TEST(AuthClusterTest, FanOutCarriesThePeerToken) {
  TempDir dir;
  std::ofstream(dir.Sub("peer-token")) << "token-op\n";
  testing::StaticPeerCluster::Options o;
  o.num_nodes = 3;
  o.root_dir = dir.path();
  o.extra_config = kTenantsConfig;
  o.extra_cluster_config = "  peer_token_file: \"" + dir.Sub("peer-token") + "\"\n";
  auto cluster = testing::StaticPeerCluster::Create(o);
  ASSERT_OK(cluster);
  ASSERT_OK(cluster->StartAll());

  ClusterClientOptions co;
  co.node.server = cluster->ids()[0];
  co.node.auth_token = "token-a";
  co.node.namespace_spec = Spec("a-ns");
  auto cc = ClusterClient::Connect(co);
  ASSERT_OK(cc);
  const Sequence seq = MakeSequence("a-ns", kLayout, 12, 22);
  ASSERT_OK((*cc)->PutBlocks("a-ns", seq.blocks));
  // Ask one node with a plain client: the other nodes' blocks come through fan-out.
  ClientOptions one;
  one.server = cluster->ids()[1];
  one.auth_token = "token-a";
  auto c = Client::Connect(one);
  ASSERT_OK(c);
  auto l = (*c)->Lookup("a-ns", seq.keys);
  ASSERT_OK(l);
  EXPECT_EQ(l->prefix_blocks(), 12u);
  std::set<std::string> owners;
  for (const auto& b : l->blocks()) owners.insert(b.owner());
  EXPECT_GT(owners.size(), 1u);  // really spread over nodes
}

}  // namespace
}  // namespace kvtier::client
