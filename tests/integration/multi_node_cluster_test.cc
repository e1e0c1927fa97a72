// Three real kvtierd processes on 127.0.0.1 forming one cluster (static peer list).
//
// Puts are routed to owners with the rendezvous ring (protocol/rendezvous.h) and sent with
// one kvtier::client::Client per node; lookups go to any node and must give the same
// cluster-wide answer; a SIGKILLed node's blocks are misses within the deadline (none
// with R=2); a restarted node serves its persisted blocks again.
//
// Pending wiring: until kvtierd builds its Membership/PeerFanout from the config
// (service/cluster.h), ClusterStatus lists only the answering node and these tests
// GTEST_SKIP with that message instead of failing.
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "protocol/rendezvous.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "tests/testing/static_peer_cluster.h"
#include "tests/testing/temp_dir.h"

namespace kvtier {
namespace {

using ::kvtier::testing::StaticPeerCluster;
using ::kvtier::testing::TempDir;

constexpr char kNs[] = "ns";
constexpr size_t kBlockBytes = 1 * 2 * 1 * 4 * 8 * 2;  // layers*kv*heads*tokens*dim*fp16
constexpr int kPeerDeadlineMs = 300;

struct Chain {
  std::vector<std::string> keys;
};

// `n` prefix chains of `len` 16-byte keys from a seeded RNG.
std::vector<Chain> MakeChains(int n, int len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Chain> chains(n);
  for (Chain& c : chains) {
    for (int i = 0; i < len; ++i) {
      std::string k(16, '\0');
      for (size_t b = 0; b < 16; b += 8) {
        const uint64_t v = rng();
        for (size_t j = 0; j < 8; ++j) k[b + j] = static_cast<char>(v >> (8 * j));
      }
      c.keys.push_back(std::move(k));
    }
  }
  return chains;
}

class ClusterTest : public ::testing::Test {
 protected:
  static constexpr int kNodes = 3;

  void StartCluster(uint32_t replication) {
    replication_ = replication;
    StaticPeerCluster::Options o;
    o.num_nodes = kNodes;
    o.replication_factor = replication;
    o.peer_deadline_ms = kPeerDeadlineMs;
    o.root_dir = dir_.path();
    o.extra_config =
        "namespaces {\n"
        "  name: \"ns\"\n"
        "  layout { num_layers: 1 num_kv_heads: 1 head_dim: 8 tokens_per_block: 4 "
        "dtype: DTYPE_FP16 }\n"
        "  write_through: true\n"
        "}\n";
    auto nodes = StaticPeerCluster::Create(o);
    ASSERT_TRUE(nodes.ok()) << nodes.status();
    nodes_.emplace(std::move(*nodes));
    ids_ = nodes_->ids();
    ring_ = protocol::RendezvousRing(ids_);
    clients_.resize(kNodes);
    for (int i = 0; i < kNodes; ++i) ASSERT_NO_FATAL_FAILURE(StartNode(i));
  }

  // (Re)starts node i (same port and data dir) and connects clients_[i] to it.
  void StartNode(int i) {
    const absl::Status started = nodes_->StartNode(i);
    ASSERT_TRUE(started.ok()) << started;
    client::ClientOptions o;
    o.server = ids_[i];
    o.num_channels = 1;
    o.default_deadline_ms = 5000;
    auto c = client::Client::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    clients_[i] = std::move(*c);
  }

  int IndexOf(const std::string& id) const {
    for (int i = 0; i < kNodes; ++i) {
      if (ids_[i] == id) return i;
    }
    return -1;
  }

  // ClusterStatus of node i (raw admin stub: the client library has no wrapper).
  std::optional<v1::ClusterStatusResponse> ClusterStatus(int i) {
    auto stub =
        v1::KvCacheAdmin::NewStub(grpc::CreateChannel(ids_[i], grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ClusterStatusResponse resp;
    if (!stub->ClusterStatus(&ctx, v1::ClusterStatusRequest(), &resp).ok()) return std::nullopt;
    return resp;
  }

  // True once kvtierd builds its membership from cluster.static_peers.
  bool ClusterWired() {
    auto s = ClusterStatus(0);
    return s.has_value() && s->peers_size() == kNodes;
  }

  // Puts every chain's blocks on their top-R owners, one PutBlocks per owner per chain.
  void PutChains(const std::vector<Chain>& chains) {
    const std::vector<uint8_t> payload(kBlockBytes, 0x3c);  // fp16 1.0-ish bytes
    for (const Chain& c : chains) {
      std::map<int, std::vector<client::PutBlock>> per_node;
      for (size_t b = 0; b < c.keys.size(); ++b) {
        client::PutBlock pb;
        pb.key = c.keys[b];
        pb.parent_key = b == 0 ? "" : c.keys[b - 1];
        pb.block_index = static_cast<uint32_t>(b);
        pb.payload = payload;
        for (const std::string& owner : ring_.OwnerIds(kNs, c.keys[b], replication_)) {
          per_node[IndexOf(owner)].push_back(pb);
        }
      }
      for (auto& [node, blocks] : per_node) {
        client::PutOptions po;
        po.format = v1::PAYLOAD_FORMAT_RAW;
        auto r = clients_[node]->PutBlocks(kNs, blocks, po);
        ASSERT_TRUE(r.ok()) << r.status();
        ASSERT_EQ(r->blocks_stored, blocks.size());
      }
    }
  }

  TempDir dir_;
  uint32_t replication_ = 1;
  std::vector<std::string> ids_;
  protocol::RendezvousRing ring_;
  std::optional<StaticPeerCluster> nodes_;
  std::vector<std::unique_ptr<client::Client>> clients_;
};

TEST_F(ClusterTest, PutsLandOnOwnersEvenlyAndEveryNodeGivesTheSameAnswer) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1));
  if (!ClusterWired()) GTEST_SKIP() << "cluster membership is not wired into kvtierd yet";
  const std::vector<Chain> chains = MakeChains(200, 50, 7);  // 10,000 blocks
  ASSERT_NO_FATAL_FAILURE(PutChains(chains));

  // Every node holds exactly the keys it owns, and the spread is within 20% of even.
  std::vector<int> held(kNodes, 0);
  for (const Chain& c : chains) {
    for (int n = 0; n < kNodes; ++n) {
      auto r = clients_[n]->Lookup(kNs, c.keys, /*local_only=*/true);
      ASSERT_TRUE(r.ok()) << r.status();
      for (size_t b = 0; b < c.keys.size(); ++b) {
        const bool here = r->blocks(static_cast<int>(b)).tier() != v1::TIER_NONE;
        EXPECT_EQ(here, ring_.OwnerIds(kNs, c.keys[b], 1)[0] == ids_[n]);
        held[n] += here ? 1 : 0;
      }
    }
  }
  for (int n = 0; n < kNodes; ++n) {
    EXPECT_GE(held[n], 10000 / 3 * 0.8) << ids_[n];
    EXPECT_LE(held[n], 10000 / 3 * 1.2) << ids_[n];
  }

  // Any node answers the whole prefix, with the same owners and tiers.
  for (size_t c = 0; c < 20; ++c) {
    std::vector<std::string> answers;
    for (int n = 0; n < kNodes; ++n) {
      auto r = clients_[n]->Lookup(kNs, chains[c].keys);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->prefix_blocks(), chains[c].keys.size());
      for (size_t b = 0; b < chains[c].keys.size(); ++b) {
        EXPECT_EQ(r->blocks(static_cast<int>(b)).owner(),
                  ring_.OwnerIds(kNs, chains[c].keys[b], 1)[0]);
      }
      answers.push_back(r->SerializeAsString());
    }
    EXPECT_EQ(answers[0], answers[1]);
    EXPECT_EQ(answers[0], answers[2]);
  }

  auto status = ClusterStatus(1);
  ASSERT_TRUE(status.has_value());
  for (const v1::PeerStatus& p : status->peers()) {
    EXPECT_TRUE(p.healthy()) << p.node_id();
    EXPECT_NEAR(p.ownership_share(), 1.0 / 3, 0.05);
  }
}

TEST_F(ClusterTest, KilledNodesBlocksAreMissesWithinTheDeadline) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1));
  if (!ClusterWired()) GTEST_SKIP() << "cluster membership is not wired into kvtierd yet";
  const std::vector<Chain> chains = MakeChains(10, 30, 11);
  ASSERT_NO_FATAL_FAILURE(PutChains(chains));
  nodes_->node(2).Kill();  // SIGKILL
  for (const Chain& c : chains) {
    for (int n = 0; n < 2; ++n) {
      const auto start = std::chrono::steady_clock::now();
      client::CallOptions call;
      call.deadline_ms = 3000;
      auto r = clients_[n]->Lookup(kNs, c.keys, false, call);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_LT(std::chrono::steady_clock::now() - start,
                std::chrono::milliseconds(kPeerDeadlineMs + 1000));
      size_t first_dead = c.keys.size();
      for (size_t b = 0; b < c.keys.size(); ++b) {
        const bool dead = ring_.OwnerIds(kNs, c.keys[b], 1)[0] == ids_[2];
        if (dead) first_dead = std::min(first_dead, b);
        EXPECT_EQ(r->blocks(static_cast<int>(b)).tier() == v1::TIER_NONE, dead) << b;
      }
      EXPECT_EQ(r->prefix_blocks(), first_dead);
    }
    // Gets of live owners' blocks still answer.
    for (size_t b = 0; b < c.keys.size(); ++b) {
      const int owner = IndexOf(ring_.OwnerIds(kNs, c.keys[b], 1)[0]);
      if (owner == 2) continue;
      auto g = clients_[owner]->GetBlocks(kNs, std::vector<std::string>{c.keys[b]});
      ASSERT_TRUE(g.ok()) << g.status();
      EXPECT_TRUE((*g)[0].info.found());
    }
  }
}

TEST_F(ClusterTest, WithTwoReplicasNoBlockIsLostAndARestartedNodeServesItsBlocksAgain) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(2));
  if (!ClusterWired()) GTEST_SKIP() << "cluster membership is not wired into kvtierd yet";
  const std::vector<Chain> chains = MakeChains(10, 30, 13);
  ASSERT_NO_FATAL_FAILURE(PutChains(chains));  // write_through: durable before the ack
  nodes_->node(2).Kill();
  for (const Chain& c : chains) {
    for (int n = 0; n < 2; ++n) {
      auto r = clients_[n]->Lookup(kNs, c.keys);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->prefix_blocks(), c.keys.size());
    }
  }

  // Restart on the same port and data dir: its persisted blocks are there again...
  ASSERT_NO_FATAL_FAILURE(StartNode(2));
  for (const Chain& c : chains) {
    auto r = clients_[2]->Lookup(kNs, c.keys, /*local_only=*/true);
    ASSERT_TRUE(r.ok()) << r.status();
    for (size_t b = 0; b < c.keys.size(); ++b) {
      if (ring_.IsOwner(ids_[2], kNs, c.keys[b], 2)) {
        EXPECT_NE(r->blocks(static_cast<int>(b)).tier(), v1::TIER_NONE) << b;
      }
    }
  }
  // ...and once node 0 sees it healthy again, node 2 is reported as the owner of the
  // blocks it is primary for and node 0 does not hold (node 0 answers its own copies
  // itself). Peers retry an unhealthy node about once a second, so allow a few seconds
  // for the reconnect.
  int checked = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool owner_back = false;
  while (!owner_back && std::chrono::steady_clock::now() < until) {
    owner_back = true;
    checked = 0;
    for (const Chain& c : chains) {
      auto r = clients_[0]->Lookup(kNs, c.keys);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->prefix_blocks(), c.keys.size());
      for (size_t b = 0; b < c.keys.size(); ++b) {
        if (ring_.OwnerIds(kNs, c.keys[b], 2) == std::vector<std::string>{ids_[2], ids_[1]}) {
          owner_back &= r->blocks(static_cast<int>(b)).owner() == ids_[2];
          ++checked;
        }
      }
    }
    if (!owner_back) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GT(checked, 0);
  EXPECT_TRUE(owner_back);
  auto g = clients_[2]->GetBlocks(kNs, chains[0].keys);
  ASSERT_TRUE(g.ok()) << g.status();
  for (size_t b = 0; b < chains[0].keys.size(); ++b) {
    EXPECT_EQ((*g)[b].info.found(), ring_.IsOwner(ids_[2], kNs, chains[0].keys[b], 2)) << b;
  }
}

}  // namespace
}  // namespace kvtier
