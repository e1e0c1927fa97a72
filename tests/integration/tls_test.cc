// TLS and mutual TLS end to end: real kvtierd processes with certificates made in the test
// (tests/testing/test_certs.h), the real Client and ClusterClient, and a static-peer
// cluster whose nodes call each other over mutual TLS.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/cluster_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/sequences.h"
#include "tests/testing/layouts.h"
#include "tests/testing/namespace_spec.h"
#include "tests/testing/server_process.h"
#include "tests/testing/static_peer_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_certs.h"

namespace kvtier::client {
namespace {

namespace v1 = ::kvtier::v1;
using testing::CertFiles;
using ::testing::HasSubstr;
using testing::ServerProcess;
using testing::TempDir;
using testing::TestCa;

constexpr kv::Layout kLayout = testing::SmallLayout();
const std::vector<std::string> kLocalSans = {"IP:127.0.0.1", "DNS:localhost"};

v1::NamespaceSpec Spec(const std::string& name, const std::string& tenant = "") {
  return testing::NamespaceSpecOf(name, kLayout, v1::CODEC_FP16, tenant);
}

ClientOptions TlsOptions(const std::string& server, const std::string& ca,
                         const CertFiles* cert = nullptr) {
  ClientOptions o;
  o.server = server;
  o.tls_ca_file = ca;
  if (cert != nullptr) {
    o.tls_cert_file = cert->cert_file;
    o.tls_key_file = cert->key_file;
  }
  o.num_channels = 1;
  o.max_attempts = 1;
  o.connect_deadline_ms = 3000;
  o.shared_memory = false;
  return o;
}

std::string TlsBlock(const CertFiles& server, const std::string& client_ca,
                     const std::string& extra) {
  return absl::StrCat("tls {\n  cert_file: \"", server.cert_file, "\"\n  key_file: \"",
                      server.key_file, "\"\n  client_ca_file: \"", client_ca,
                      "\"\n  refresh_interval_s: 1\n", extra, "}\n");
}

// token-b (`printf %s token-b | sha256sum`) is tenant-b's bearer token.
constexpr char kTokenB[] =
    "tenants { tenant: \"tenant-b\" token_sha256: "
    "\"49e2bb7eab54cf09b409ffafd3fa8a8a955a60eb972faacaefbed3dbd3207132\" }\n";
constexpr char kIdentities[] =
    "  require_client_cert: true\n"
    "  identities { tenant: \"tenant-a\" cert_name: \"client-a\" }\n"
    "  identities { tenant: \"*\" cert_name: \"operator\" }\n";

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = TestCa::Create(dir_.path(), "good");
    ASSERT_OK(ca);
    auto other = TestCa::Create(dir_.path(), "other");
    ASSERT_OK(other);
    ca_ = std::make_unique<TestCa>(*ca);
    other_ca_ = std::make_unique<TestCa>(*other);
    auto server = ca_->Issue("server", "kvtier-server", kLocalSans);
    ASSERT_OK(server);
    server_cert_ = *server;
    // The client certificate names its holder in a SAN; the CN is only informative.
    auto a = ca_->Issue("client-a", "alice", {"DNS:client-a"});
    ASSERT_OK(a);
    client_a_ = *a;
    auto op = ca_->Issue("operator", "operator", {});
    ASSERT_OK(op);
    operator_ = *op;
    auto forged = other_ca_->Issue("forged-a", "alice", {"DNS:client-a"});
    ASSERT_OK(forged);
    forged_a_ = *forged;
  }

  void StartServer(const std::string& config) {
    std::ofstream(dir_.Sub("kvtierd.textproto")) << config;
    auto p =
        ServerProcess::StartKvtierd(dir_.Sub("data"), {"--config", dir_.Sub("kvtierd.textproto")});
    ASSERT_OK(p);
    server_ = std::make_unique<ServerProcess>(std::move(*p));
  }

  TempDir dir_;
  std::unique_ptr<TestCa> ca_;
  std::unique_ptr<TestCa> other_ca_;
  CertFiles server_cert_, client_a_, operator_, forged_a_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(TlsTest, PlaintextUntrustedAndCertificateLessClientsFail) {
  StartServer(TlsBlock(server_cert_, ca_->ca_file(), kIdentities));
  ClientOptions plain;
  plain.server = server_->address();
  plain.max_attempts = 1;
  plain.connect_deadline_ms = 2000;
  plain.shared_memory = false;
  EXPECT_FALSE(Client::Connect(plain).ok());
  // Trusting another CA: the server's certificate does not verify.
  EXPECT_FALSE(
      Client::Connect(TlsOptions(server_->address(), other_ca_->ca_file(), &client_a_)).ok());
  // require_client_cert: no certificate, or one from another CA, cannot connect.
  EXPECT_FALSE(Client::Connect(TlsOptions(server_->address(), ca_->ca_file())).ok());
  EXPECT_FALSE(Client::Connect(TlsOptions(server_->address(), ca_->ca_file(), &forged_a_)).ok());
  auto ok = Client::Connect(TlsOptions(server_->address(), ca_->ca_file(), &client_a_));
  EXPECT_OK(ok);

  // `kvtier health`, the exec probe of deploy/components/tls: SERVING over mutual TLS
  // with a certificate (health needs no tenant), a failure without one.
  const std::string health =
      absl::StrCat(testing::BinaryDir(), "/client/cli/kvtier health --server ", server_->address(),
                   " --tls-ca ", ca_->ca_file());
  EXPECT_EQ(std::system(absl::StrCat(health, " --tls-cert ", operator_.cert_file, " --tls-key ",
                                     operator_.key_file, " >/dev/null")
                            .c_str()),
            0);
  EXPECT_NE(std::system(absl::StrCat(health, " 2>/dev/null").c_str()), 0);
}

TEST_F(TlsTest, TheClientCertificateNamesTheTenant) {
  StartServer(absl::StrCat(kTokenB, TlsBlock(server_cert_, ca_->ca_file(), kIdentities)));
  auto op = Client::Connect(TlsOptions(server_->address(), ca_->ca_file(), &operator_));
  ASSERT_OK(op);
  ASSERT_OK((*op)->RegisterNamespace(Spec("a-ns", "tenant-a")));
  ASSERT_OK((*op)->RegisterNamespace(Spec("b-ns", "tenant-b")));

  auto a = Client::Connect(TlsOptions(server_->address(), ca_->ca_file(), &client_a_));
  ASSERT_OK(a);
  const Sequence seq = MakeSequence("a-ns", kLayout, 3, 31);
  ASSERT_OK((*a)->PutBlocks("a-ns", seq.blocks));
  auto got = (*a)->GetBlocks("a-ns", seq.keys);
  ASSERT_OK(got);
  EXPECT_EQ((*got)[2].data, seq.encoded[2]);
  EXPECT_EQ((*a)->Lookup("b-ns", seq.keys).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ((*a)->PutBlocks("b-ns", seq.blocks).status().code(),
            absl::StatusCode::kPermissionDenied);

  // A token and a certificate at once must name the same tenant.
  ClientOptions both = TlsOptions(server_->address(), ca_->ca_file(), &client_a_);
  both.auth_token = "token-b";
  auto mixed = Client::Connect(both);
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kPermissionDenied) << mixed.status();
  EXPECT_THAT(mixed.status().message(), HasSubstr("must agree"));
  // A certificate whose names map to two tenants names none.
  auto two = ca_->Issue("two-names", "client-a", {"DNS:operator"});
  ASSERT_OK(two);
  auto ambiguous = Client::Connect(TlsOptions(server_->address(), ca_->ca_file(), &*two));
  EXPECT_EQ(ambiguous.status().code(), absl::StatusCode::kUnauthenticated) << ambiguous.status();
  EXPECT_THAT(ambiguous.status().message(), HasSubstr("two tenants"));
  // The operator certificate with tenant-b's token: they disagree too.
  ClientOptions op_b = TlsOptions(server_->address(), ca_->ca_file(), &operator_);
  op_b.auth_token = "token-b";
  EXPECT_EQ(Client::Connect(op_b).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(TlsTest, ARotatedCertificateIsServedToNewConnectionsWithoutARestart) {
  StartServer(TlsBlock(server_cert_, ca_->ca_file(), ""));
  auto before = Client::Connect(TlsOptions(server_->address(), ca_->ca_file()));
  ASSERT_OK(before);
  EXPECT_FALSE(Client::Connect(TlsOptions(server_->address(), other_ca_->ca_file())).ok());

  // Replace the server's files in place with a certificate of the other CA.
  ASSERT_OK(other_ca_->Issue("server", "kvtier-server", kLocalSans));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  absl::Status rotated = absl::UnknownError("not tried");
  while (std::chrono::steady_clock::now() < deadline) {
    rotated = Client::Connect(TlsOptions(server_->address(), other_ca_->ca_file())).status();
    if (rotated.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // polling, bounded
  }
  EXPECT_OK(rotated);
  // The connection made before the rotation keeps working; the pid is the same.
  EXPECT_OK((*before)->Stats());
  EXPECT_GT(server_->pid(), 0);
}

// Node i's tls block: its own certificate, the cluster CA for clients and peers, and the
// nodes' certificate name mapped to an operator, so fan-out calls need no token.
std::string NodeTls(const CertFiles& node, const std::string& ca) {
  return TlsBlock(node, ca,
                  "  require_client_cert: true\n"
                  "  identities { tenant: \"*\" cert_name: \"kvtier-node\" }\n"
                  "  identities { tenant: \"tenant-a\" cert_name: \"client-a\" }\n");
}

TEST_F(TlsTest, AThreeNodeClusterWorksOverMutualTls) {
  auto node = ca_->Issue("node", "kvtier-node", kLocalSans);
  ASSERT_OK(node);
  auto rogue = other_ca_->Issue("rogue", "kvtier-node", kLocalSans);
  ASSERT_OK(rogue);

  testing::StaticPeerCluster::Options o;
  o.num_nodes = 3;
  o.root_dir = dir_.path();
  o.node_config = {NodeTls(*node, ca_->ca_file()), NodeTls(*node, ca_->ca_file()),
                   NodeTls(*node, ca_->ca_file())};
  auto cluster = testing::StaticPeerCluster::Create(o);
  ASSERT_OK(cluster);
  ASSERT_OK(cluster->StartAll());

  ClusterClientOptions co;
  co.node = TlsOptions(cluster->ids()[0], ca_->ca_file(), &client_a_);
  co.node.namespace_spec = Spec("a-ns");
  auto cc = ClusterClient::Connect(co);
  ASSERT_OK(cc);
  const Sequence seq = MakeSequence("a-ns", kLayout, 12, 32);
  ASSERT_OK((*cc)->PutBlocks("a-ns", seq.blocks));
  auto c = Client::Connect(TlsOptions(cluster->ids()[1], ca_->ca_file(), &client_a_));
  ASSERT_OK(c);
  auto l = (*c)->Lookup("a-ns", seq.keys);
  ASSERT_OK(l);
  EXPECT_EQ(l->prefix_blocks(), 12u);  // the other nodes' blocks came over mutual TLS
  std::set<std::string> owners;
  for (const auto& b : l->blocks()) owners.insert(b.owner());
  EXPECT_GT(owners.size(), 1u);
}

// Peers are checked both ways: the chain (the cluster CA) and the name (the certificate's
// SANs must name the peer's address in the membership).
TEST_F(TlsTest, AClusterRejectsPeersWithACertificateFromAnotherCaOrForAnotherHost) {
  auto node = ca_->Issue("node", "kvtier-node", kLocalSans);
  ASSERT_OK(node);
  // Same name and SANs as the real nodes, signed by another CA.
  auto rogue = other_ca_->Issue("rogue", "kvtier-node", kLocalSans);
  ASSERT_OK(rogue);
  // Signed by the cluster CA, but naming another host than the peer's address.
  auto misnamed = ca_->Issue("misnamed", "kvtier-node", {"DNS:elsewhere.example"});
  ASSERT_OK(misnamed);
  testing::StaticPeerCluster::Options o;
  o.num_nodes = 4;
  o.root_dir = dir_.path();
  o.node_config = {NodeTls(*node, ca_->ca_file()), NodeTls(*node, ca_->ca_file()),
                   NodeTls(*rogue, ca_->ca_file()), NodeTls(*misnamed, ca_->ca_file())};
  auto cluster = testing::StaticPeerCluster::Create(o);
  ASSERT_OK(cluster);
  ASSERT_OK(cluster->StartAll());

  auto c = Client::Connect(TlsOptions(cluster->ids()[0], ca_->ca_file(), &client_a_));
  ASSERT_OK(c);
  auto status = (*c)->ClusterStatus();
  ASSERT_OK(status);
  ASSERT_EQ(status->peers_size(), 4);
  for (const v1::PeerStatus& p : status->peers()) {
    // A peer that did not answer has empty stats and was never seen.
    if (p.node_id() == cluster->ids()[2] || p.node_id() == cluster->ids()[3]) {
      EXPECT_EQ(p.stats().ByteSizeLong(), 0u) << "the rogue node answered: " << p.DebugString();
      EXPECT_EQ(p.last_seen_ms_ago(), -1);
    } else {
      EXPECT_GT(p.stats().ByteSizeLong(), 0u) << p.DebugString();
    }
  }
  // Clients of the cluster CA do not trust the rogue node either.
  EXPECT_FALSE(Client::Connect(TlsOptions(cluster->ids()[2], ca_->ca_file(), &client_a_)).ok());
}

}  // namespace
}  // namespace kvtier::client
