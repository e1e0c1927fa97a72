// Three real kvtierd processes on 127.0.0.1 forming one cluster (static peer list).
//
// Puts are routed to owners with the rendezvous ring (protocol/rendezvous.h) and sent with
// one kvtier::client::Client per node; lookups go to any node and must give the same
// cluster-wide answer; a SIGKILLed node's blocks are misses within the deadline (none
// with R=2); a hung node, once detected, no longer slows lookups through the survivors;
// a restarted or resumed node serves its blocks again.
//
// Every test first asserts that each node's ClusterStatus lists all the nodes, so a
// regression in kvtierd's cluster wiring (service/server.cc) fails the suite.
#include <signal.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/cluster_client.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "protocol/rendezvous.h"
#include "tests/testing/poll_until.h"
#include "tests/testing/static_peer_cluster.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace kvtier {
namespace {

using ::kvtier::testing::PollUntil;
using ::kvtier::testing::StaticPeerCluster;
using ::kvtier::testing::TempDir;
using ::kvtier::testing::WaitUntilStopped;

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

  // Starts the kNodes nodes and asserts that each one sees all of them.
  void StartCluster(uint32_t replication, int peer_deadline_ms = kPeerDeadlineMs) {
    replication_ = replication;
    StaticPeerCluster::Options o;
    o.num_nodes = kNodes;
    o.replication_factor = replication;
    o.peer_deadline_ms = peer_deadline_ms;
    o.root_dir = dir_.path();
    o.extra_config =
        "namespaces {\n"
        "  name: \"ns\"\n"
        "  layout { num_layers: 1 num_kv_heads: 1 head_dim: 8 tokens_per_block: 4 "
        "dtype: DTYPE_FP16 }\n"
        "  write_through: true\n"
        "}\n";
    auto nodes = StaticPeerCluster::Create(o);
    ASSERT_OK(nodes);
    nodes_.emplace(std::move(*nodes));
    ids_ = nodes_->ids();
    ring_ = protocol::RendezvousRing(ids_);
    clients_.resize(kNodes);
    for (int i = 0; i < kNodes; ++i) ASSERT_NO_FATAL_FAILURE(StartNode(i));
    for (int i = 0; i < kNodes; ++i) {
      const std::optional<v1::ClusterStatusResponse> status = ClusterStatus(i);
      ASSERT_TRUE(status.has_value()) << ids_[i];
      ASSERT_EQ(status->peers_size(), kNodes) << "node " << ids_[i] << " does not see the cluster";
      EXPECT_EQ(status->node_id(), ids_[i]);
    }
  }

  // (Re)starts node i (same port and data dir) and connects clients_[i] to it.
  void StartNode(int i) {
    const absl::Status started = nodes_->StartNode(i);
    ASSERT_OK(started);
    client::ClientOptions o;
    o.server = ids_[i];
    o.num_channels = 1;
    o.default_deadline_ms = 5000;
    auto c = client::Client::Connect(o);
    ASSERT_OK(c);
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

  // Node n's cluster-wide Lookup of `keys`; the call deadline is well past any peer
  // deadline used here.
  absl::StatusOr<v1::LookupResponse> Lookup(int n, const std::vector<std::string>& keys) {
    client::CallOptions call;
    call.deadline_ms = 30000;
    return clients_[n]->Lookup(kNs, keys, /*local_only=*/false, call);
  }

  // Expects `r` to miss exactly the keys whose primary owner is node `dead` (R=1).
  void ExpectMissesExactlyOn(const v1::LookupResponse& r, const Chain& c, int dead) {
    ASSERT_EQ(r.blocks_size(), static_cast<int>(c.keys.size()));
    size_t first_dead = c.keys.size();
    for (size_t b = 0; b < c.keys.size(); ++b) {
      const bool on_dead = ring_.OwnerIds(kNs, c.keys[b], 1)[0] == ids_[dead];
      if (on_dead) first_dead = std::min(first_dead, b);
      EXPECT_EQ(r.blocks(static_cast<int>(b)).tier() == v1::TIER_NONE, on_dead) << b;
    }
    EXPECT_EQ(r.prefix_blocks(), first_dead);
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
        ASSERT_OK(r);
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
  const std::vector<Chain> chains = MakeChains(200, 50, 7);  // 10,000 blocks
  ASSERT_NO_FATAL_FAILURE(PutChains(chains));

  // Every node holds exactly the keys it owns, and the spread is within 20% of even.
  std::vector<int> held(kNodes, 0);
  for (const Chain& c : chains) {
    for (int n = 0; n < kNodes; ++n) {
      auto r = clients_[n]->Lookup(kNs, c.keys, /*local_only=*/true);
      ASSERT_OK(r);
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
      ASSERT_OK(r);
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
  const std::vector<Chain> chains = MakeChains(10, 30, 11);
  ASSERT_NO_FATAL_FAILURE(PutChains(chains));
  nodes_->node(2).Kill();  // SIGKILL
  for (const Chain& c : chains) {
    for (int n = 0; n < 2; ++n) {
      const auto start = std::chrono::steady_clock::now();
      client::CallOptions call;
      call.deadline_ms = 3000;
      auto r = clients_[n]->Lookup(kNs, c.keys, false, call);
      ASSERT_OK(r);
      EXPECT_LT(std::chrono::steady_clock::now() - start,
                std::chrono::milliseconds(kPeerDeadlineMs + 1000));
      ASSERT_NO_FATAL_FAILURE(ExpectMissesExactlyOn(*r, c, 2));
    }
    // Gets of live owners' blocks still answer.
    for (size_t b = 0; b < c.keys.size(); ++b) {
      const int owner = IndexOf(ring_.OwnerIds(kNs, c.keys[b], 1)[0]);
      if (owner == 2) continue;
      auto g = clients_[owner]->GetBlocks(kNs, std::vector<std::string>{c.keys[b]});
      ASSERT_OK(g);
      EXPECT_TRUE((*g)[0].info.found());
    }
  }
  // Each survivor had at least three calls to it refused: both report it down.
  for (int n = 0; n < 2; ++n) {
    auto status = ClusterStatus(n);
    ASSERT_TRUE(status.has_value());
    for (const v1::PeerStatus& p : status->peers()) {
      EXPECT_EQ(p.healthy(), p.node_id() != ids_[2]) << ids_[n] << " on " << p.node_id();
    }
  }
}

// Issue 16. A hung node (SIGSTOP: its sockets accept, nothing answers, as when a host
// vanishes) makes every call to it wait the whole peer deadline. Once the survivors have
// detected it, lookups through them must not ask it again: they answer well within that
// deadline, its blocks counted as misses. After SIGCONT a background probe brings it
// back and its blocks are found again.
TEST_F(ClusterTest, AHungNodeOnceDetectedDoesNotSlowLookupsThroughTheSurvivors) {
  constexpr int kLongDeadlineMs = 5000;
  constexpr int kFailuresToDetect = 3;  // FanoutOptions::failures_to_unhealthy default
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, kLongDeadlineMs));
  const std::vector<Chain> chains = MakeChains(6, 30, 17);
  ASSERT_NO_FATAL_FAILURE(PutChains(chains));
  for (const Chain& c : chains) {
    auto r = Lookup(0, c.keys);
    ASSERT_OK(r);
    ASSERT_EQ(r->prefix_blocks(), c.keys.size());
  }

  ASSERT_EQ(kill(nodes_->node(2).pid(), SIGSTOP), 0);
  ASSERT_TRUE(WaitUntilStopped(nodes_->node(2).pid()));
  // Detection: each survivor needs kFailuresToDetect calls to node 2 to time out. Run
  // them side by side so the test pays one deadline, not six.
  {
    std::vector<std::thread> detect;
    std::vector<absl::StatusOr<v1::LookupResponse>> answers(2 * kFailuresToDetect);
    for (int k = 0; k < 2 * kFailuresToDetect; ++k) {
      detect.emplace_back([&, k] { answers[k] = Lookup(k % 2, chains[k / 2].keys); });
    }
    for (std::thread& t : detect) t.join();
    for (int k = 0; k < 2 * kFailuresToDetect; ++k) {
      ASSERT_OK(answers[k]);
      ASSERT_NO_FATAL_FAILURE(ExpectMissesExactlyOn(*answers[k], chains[k / 2], 2));
    }
  }

  // Detected: a lookup that still asked node 2 would take the full 5 s deadline. Allow
  // half of it per lookup (a loaded machine answers in milliseconds). Keep looking up for
  // a few probe intervals (1 s each): a probe must not make any lookup wait either.
  const auto detected = std::chrono::steady_clock::now();
  int lookups = 0;
  while (std::chrono::steady_clock::now() - detected < std::chrono::milliseconds(3500)) {
    for (const Chain& c : chains) {
      for (int n = 0; n < 2; ++n) {
        const auto start = std::chrono::steady_clock::now();
        auto r = Lookup(n, c.keys);
        EXPECT_LT(std::chrono::steady_clock::now() - start,
                  std::chrono::milliseconds(kLongDeadlineMs / 2))
            << "lookup " << lookups << " through " << ids_[n] << " waited for the hung node";
        ASSERT_OK(r);
        ASSERT_NO_FATAL_FAILURE(ExpectMissesExactlyOn(*r, c, 2));
        ++lookups;
      }
    }
  }
  EXPECT_GT(lookups, 2 * static_cast<int>(chains.size()));

  // Resumed: a probe (at most one a second per survivor) finds it, and lookups through
  // either survivor see its blocks again.
  ASSERT_EQ(kill(nodes_->node(2).pid(), SIGCONT), 0);
  const bool back = PollUntil(
      [&] {
        for (int n = 0; n < 2; ++n) {
          auto r = Lookup(n, chains[0].keys);
          if (!r.ok() || r->prefix_blocks() != chains[0].keys.size()) return false;
        }
        return true;
      },
      std::chrono::milliseconds(4 * kLongDeadlineMs));
  EXPECT_TRUE(back) << "node 2 was not found healthy again after SIGCONT";
  for (const Chain& c : chains) {
    for (int n = 0; n < kNodes; ++n) {
      auto r = Lookup(n, c.keys);
      ASSERT_OK(r);
      EXPECT_EQ(r->prefix_blocks(), c.keys.size()) << ids_[n];
    }
  }
}

TEST_F(ClusterTest, WithTwoReplicasNoBlockIsLostAndARestartedNodeServesItsBlocksAgain) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(2));
  const std::vector<Chain> chains = MakeChains(10, 30, 13);
  ASSERT_NO_FATAL_FAILURE(PutChains(chains));  // write_through: durable before the ack
  nodes_->node(2).Kill();
  for (const Chain& c : chains) {
    for (int n = 0; n < 2; ++n) {
      auto r = clients_[n]->Lookup(kNs, c.keys);
      ASSERT_OK(r);
      EXPECT_EQ(r->prefix_blocks(), c.keys.size());
    }
  }

  // Restart on the same port and data dir: its persisted blocks are there again...
  ASSERT_NO_FATAL_FAILURE(StartNode(2));
  for (const Chain& c : chains) {
    auto r = clients_[2]->Lookup(kNs, c.keys, /*local_only=*/true);
    ASSERT_OK(r);
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
  const bool owner_back = PollUntil(
      [&] {
        bool back = true;
        checked = 0;
        for (const Chain& c : chains) {
          auto r = clients_[0]->Lookup(kNs, c.keys);
          if (!r.ok() || r->prefix_blocks() != c.keys.size()) return false;
          for (size_t b = 0; b < c.keys.size(); ++b) {
            if (ring_.OwnerIds(kNs, c.keys[b], 2) == std::vector<std::string>{ids_[2], ids_[1]}) {
              back &= r->blocks(static_cast<int>(b)).owner() == ids_[2];
              ++checked;
            }
          }
        }
        return back;
      },
      std::chrono::seconds(10));
  EXPECT_GT(checked, 0);
  EXPECT_TRUE(owner_back);
  auto g = clients_[2]->GetBlocks(kNs, chains[0].keys);
  ASSERT_OK(g);
  for (size_t b = 0; b < chains[0].keys.size(); ++b) {
    EXPECT_EQ((*g)[b].info.found(), ring_.IsOwner(ids_[2], kNs, chains[0].keys[b], 2)) << b;
  }
}

TEST_F(ClusterTest, EachOwnerLeasesItsPartAndAGetOrReleaseEndsIt) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1));
  const std::vector<Chain> chains = MakeChains(2, 30, 11);
  ASSERT_NO_FATAL_FAILURE(PutChains(chains));
  const std::vector<std::string>& keys = chains[0].keys;
  client::LookupOptions lease;
  lease.lease_ms = 60'000;
  auto r = clients_[0]->Lookup(kNs, keys, lease);
  ASSERT_OK(r);
  EXPECT_EQ(r->prefix_blocks(), keys.size());
  EXPECT_EQ(r->leased_blocks(), keys.size());
  EXPECT_EQ(r->lease_limit(), v1::LEASE_LIMIT_NONE);
  // One lease per owner, on exactly the blocks it owns.
  std::map<std::string, uint64_t> lease_of;
  std::map<std::string, std::vector<std::string>> keys_of;
  for (size_t b = 0; b < keys.size(); ++b) {
    const v1::BlockLocation& loc = r->blocks(static_cast<int>(b));
    ASSERT_EQ(loc.owner(), ring_.OwnerIds(kNs, keys[b], 1)[0]);
    ASSERT_NE(loc.lease_id(), 0u) << b;
    auto [it, fresh] = lease_of.emplace(loc.owner(), loc.lease_id());
    EXPECT_EQ(it->second, loc.lease_id()) << "two leases on " << loc.owner();
    keys_of[loc.owner()].push_back(keys[b]);
  }
  ASSERT_EQ(lease_of.size(), static_cast<size_t>(kNodes));  // 30 keys: every node owns some
  for (int n = 0; n < kNodes; ++n) {
    auto st = clients_[n]->Stats();
    ASSERT_OK(st);
    EXPECT_EQ(st->leases().active(), 1u) << ids_[n];
    EXPECT_EQ(st->leases().granted(), 1u) << ids_[n];
    EXPECT_GT(st->leases().leased_bytes(), 0u) << ids_[n];
  }
  // The Get that loads an owner's blocks ends that owner's lease.
  for (int n = 0; n < kNodes; ++n) {
    client::GetOptions get;
    get.lease_id = lease_of[ids_[n]];
    auto got = clients_[n]->GetBlocks(kNs, keys_of[ids_[n]], get);
    ASSERT_OK(got);
    for (const client::FetchedBlock& f : *got) EXPECT_TRUE(f.info.found());
    auto st = clients_[n]->Stats();
    ASSERT_OK(st);
    EXPECT_EQ(st->leases().active(), 0u) << ids_[n];
    EXPECT_EQ(st->leases().released(), 1u) << ids_[n];
    EXPECT_EQ(st->leases().leased_bytes(), 0u) << ids_[n];
  }
  // ReleaseLeases ends every owner's part of another lookup.
  client::ClusterClientOptions co;
  co.node.server = ids_[1];
  co.node.default_deadline_ms = 5000;
  auto cluster = client::ClusterClient::Connect(co);
  ASSERT_OK(cluster);
  auto again = (*cluster)->Lookup(kNs, chains[1].keys, lease);
  ASSERT_OK(again);
  EXPECT_EQ(again->leased_blocks(), chains[1].keys.size());
  auto released = (*cluster)->ReleaseLeases(kNs, *again);
  ASSERT_OK(released);
  EXPECT_EQ(*released, chains[1].keys.size());
  for (int n = 0; n < kNodes; ++n) EXPECT_EQ(clients_[n]->Stats()->leases().active(), 0u);
}

}  // namespace
}  // namespace kvtier
