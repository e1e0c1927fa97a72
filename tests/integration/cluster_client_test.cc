// ClusterClient (client/cluster_client.h) against three real kvtierd processes forming one
// cluster (static peer list, ports chosen up front as in multi_node_cluster_test.cc).
//
// Puts must land only on the blocks' rendezvous owners (checked with each node's Stats),
// gets must be answered by the owners and be bit-exact, and with R=2 a SIGKILLed node
// must cost no block and no hang. Every test first asserts that the ClusterClient sees all
// the nodes, so a regression in kvtierd's cluster wiring fails the suite.
#include "client/cluster_client.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "protocol/lookup_form.h"
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
using ::testing::HasSubstr;

constexpr char kNs[] = "cc";
constexpr size_t kBlockBytes = 1 * 2 * 1 * 4 * 8 * 2;  // layers*kv*heads*tokens*dim*fp16
constexpr int kNodes = 3;
constexpr int kChains = 10;
constexpr int kChainLen = 30;  // 300 blocks

v1::NamespaceSpec Spec() {
  v1::NamespaceSpec spec;
  spec.set_name(kNs);
  spec.mutable_layout()->set_num_layers(1);
  spec.mutable_layout()->set_num_kv_heads(1);
  spec.mutable_layout()->set_head_dim(8);
  spec.mutable_layout()->set_tokens_per_block(4);
  spec.mutable_layout()->set_dtype(v1::DTYPE_FP16);
  spec.set_write_through(true);  // durable before the ack
  return spec;
}

// 300 blocks in prefix chains, random keys and payloads from a seeded RNG.
struct Blocks {
  std::vector<std::string> keys;
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<client::PutBlock> puts;
};

Blocks MakeBlocks(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Blocks b;
  for (int c = 0; c < kChains; ++c) {
    for (int i = 0; i < kChainLen; ++i) {
      std::string k(16, '\0');
      for (char& ch : k) ch = static_cast<char>(rng());
      std::vector<uint8_t> p(kBlockBytes);
      for (uint8_t& x : p) x = static_cast<uint8_t>(rng());
      b.keys.push_back(std::move(k));
      b.payloads.push_back(std::move(p));
    }
  }
  for (size_t i = 0; i < b.keys.size(); ++i) {
    client::PutBlock pb;
    pb.key = b.keys[i];
    pb.block_index = static_cast<uint32_t>(i % kChainLen);
    pb.parent_key = pb.block_index == 0 ? "" : b.keys[i - 1];
    pb.payload = b.payloads[i];
    b.puts.push_back(std::move(pb));
  }
  return b;
}

class ClusterClientTest : public ::testing::Test {
 protected:
  void StartCluster(uint32_t replication) {
    replication_ = replication;
    StaticPeerCluster::Options o;
    o.num_nodes = kNodes;
    o.replication_factor = replication;
    o.root_dir = dir_.path();
    auto nodes = StaticPeerCluster::Create(o);
    ASSERT_OK(nodes);
    nodes_.emplace(std::move(*nodes));
    ids_ = nodes_->ids();
    ring_ = protocol::RendezvousRing(ids_);
    const absl::Status started = nodes_->StartAll();
    ASSERT_OK(started);
  }

  // Connects a ClusterClient through node 0 and asserts that it sees every node.
  void ConnectCluster(int64_t per_owner_get_deadline_ms = 0) {
    cluster_ = NewClusterClient(per_owner_get_deadline_ms);
    ASSERT_NE(cluster_, nullptr);
    ASSERT_EQ(cluster_->members().size(), static_cast<size_t>(kNodes))
        << "node " << ids_[0] << " does not list the whole cluster in ClusterStatus";
  }

  std::unique_ptr<client::ClusterClient> NewClusterClient(int64_t per_owner_get_deadline_ms,
                                                          int64_t down_retry_ms = 1000) {
    client::ClusterClientOptions o;
    o.per_owner_get_deadline_ms = per_owner_get_deadline_ms;
    o.down_retry_ms = down_retry_ms;
    o.node.server = ids_[0];
    o.node.num_channels = 1;
    o.node.default_deadline_ms = 5000;
    o.node.namespace_spec = Spec();
    auto c = client::ClusterClient::Connect(o);
    EXPECT_OK(c);
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Starts a cluster of `replication`, connects, and puts MakeBlocks(seed) RAW into it.
  void StartAndPut(uint32_t replication, uint64_t seed, Blocks* b) {
    ASSERT_NO_FATAL_FAILURE(StartCluster(replication));
    ASSERT_NO_FATAL_FAILURE(ConnectCluster());
    *b = MakeBlocks(seed);
    client::PutOptions po;
    po.format = v1::PAYLOAD_FORMAT_RAW;
    auto put = cluster_->PutBlocks(kNs, b->puts, po);
    ASSERT_OK(put);
  }

  // One plain Client per node, for checking each node's own Stats.
  std::unique_ptr<client::Client> NodeClient(int i) {
    client::ClientOptions o;
    o.server = ids_[i];
    o.num_channels = 1;
    auto c = client::Client::Connect(o);
    EXPECT_OK(c);
    return c.ok() ? std::move(*c) : nullptr;
  }

  v1::NamespaceStats NsStats(int i) {
    auto c = NodeClient(i);
    if (c == nullptr) return {};
    auto s = c->Stats(kNs);
    EXPECT_OK(s);
    if (s.ok()) {
      for (const v1::NamespaceStats& n : s->namespaces()) {
        if (n.name() == kNs) return n;
      }
    }
    ADD_FAILURE() << "node " << ids_[i] << " has no stats for namespace " << kNs;
    return {};
  }

  void ExpectAllFoundBitExact(const std::vector<client::FetchedBlock>& got, const Blocks& b) {
    ASSERT_EQ(got.size(), b.keys.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(got[i].info.found()) << "block " << i;
      ASSERT_EQ(got[i].data.size(), kBlockBytes) << "block " << i;
      EXPECT_TRUE(std::equal(got[i].data.begin(), got[i].data.end(),
                             reinterpret_cast<const char*>(b.payloads[i].data())))
          << "block " << i;
    }
  }

  TempDir dir_;
  uint32_t replication_ = 1;
  std::vector<std::string> ids_;
  protocol::RendezvousRing ring_;
  std::optional<StaticPeerCluster> nodes_;
  std::unique_ptr<client::ClusterClient> cluster_;
};

TEST_F(ClusterClientTest, PutsLandOnlyOnOwnersAndGetsAreBitExact) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(1));
  ASSERT_NO_FATAL_FAILURE(ConnectCluster());
  ASSERT_EQ(cluster_->replication_factor(), 1u);
  EXPECT_EQ(cluster_->ring()->nodes(), ring_.nodes());
  for (const client::ClusterMember& m : cluster_->members()) EXPECT_TRUE(m.connected) << m.node_id;

  const Blocks b = MakeBlocks(21);
  client::PutOptions po;
  po.format = v1::PAYLOAD_FORMAT_RAW;
  auto put = cluster_->PutBlocks(kNs, b.puts, po);
  ASSERT_OK(put);
  EXPECT_EQ(put->blocks_stored, b.keys.size());

  // Each node stored exactly the blocks it owns.
  std::vector<uint64_t> owned(kNodes, 0);
  for (const std::string& k : b.keys) {
    const std::string owner = ring_.OwnerIds(kNs, k, 1)[0];
    for (int n = 0; n < kNodes; ++n) owned[n] += owner == ids_[n] ? 1 : 0;
  }
  for (int n = 0; n < kNodes; ++n) {
    EXPECT_GT(owned[n], 0u) << ids_[n];
    EXPECT_EQ(NsStats(n).puts(), owned[n]) << ids_[n];
  }

  auto got = cluster_->GetBlocks(kNs, b.keys, {.format = v1::PAYLOAD_FORMAT_RAW});
  ASSERT_OK(got);
  ASSERT_NO_FATAL_FAILURE(ExpectAllFoundBitExact(*got, b));
  // Each key was asked of its owner only.
  for (int n = 0; n < kNodes; ++n) EXPECT_EQ(NsStats(n).gets(), owned[n]) << ids_[n];

  // Into caller buffers, plus a key nobody holds (a miss, not an error).
  std::vector<std::string> keys = b.keys;
  keys.push_back(std::string(16, 'z'));
  std::vector<std::vector<uint8_t>> storage(keys.size(), std::vector<uint8_t>(kBlockBytes));
  std::vector<std::span<uint8_t>> bufs(storage.begin(), storage.end());
  auto into = cluster_->GetBlocksInto(kNs, keys, bufs, {.format = v1::PAYLOAD_FORMAT_RAW});
  ASSERT_OK(into);
  ASSERT_EQ(into->size(), keys.size());
  for (size_t i = 0; i < b.keys.size(); ++i) {
    ASSERT_TRUE((*into)[i].found()) << i;
    EXPECT_EQ(storage[i], b.payloads[i]) << i;
  }
  EXPECT_FALSE(into->back().found());

  // Lookup through any node sees every chain whole.
  for (int c = 0; c < kChains; ++c) {
    std::vector<std::string> chain(b.keys.begin() + c * kChainLen,
                                   b.keys.begin() + (c + 1) * kChainLen);
    auto l = cluster_->Lookup(kNs, chain);
    ASSERT_OK(l);
    EXPECT_EQ(l->prefix_blocks(), static_cast<uint64_t>(kChainLen)) << c;
  }

  ASSERT_OK(cluster_->Refresh());
  EXPECT_EQ(cluster_->members().size(), static_cast<size_t>(kNodes));
}

TEST_F(ClusterClientTest, WithTwoReplicasAKilledNodeLosesNoBlockAndHangsNothing) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(2));
  ASSERT_NO_FATAL_FAILURE(ConnectCluster());
  ASSERT_EQ(cluster_->replication_factor(), 2u);

  const Blocks b = MakeBlocks(22);
  client::PutOptions po;
  po.format = v1::PAYLOAD_FORMAT_RAW;
  auto put = cluster_->PutBlocks(kNs, b.puts, po);
  ASSERT_OK(put);
  EXPECT_EQ(put->blocks_stored, 2 * b.keys.size());  // two copies of each
  uint64_t total = 0;
  for (int n = 0; n < kNodes; ++n) {
    uint64_t owned = 0;
    for (const std::string& k : b.keys) owned += ring_.IsOwner(ids_[n], kNs, k, 2) ? 1 : 0;
    EXPECT_EQ(NsStats(n).puts(), owned) << ids_[n];
    total += owned;
  }
  EXPECT_EQ(total, 2 * b.keys.size());

  nodes_->node(2).Kill();  // SIGKILL
  size_t primary_dead = 0;
  for (const std::string& k : b.keys) primary_dead += ring_.OwnerIds(kNs, k, 2)[0] == ids_[2];
  ASSERT_GT(primary_dead, 0u);
  for (int attempt = 0; attempt < 2; ++attempt) {  // the second with node 2 known down
    const auto start = std::chrono::steady_clock::now();
    auto got = cluster_->GetBlocks(kNs, b.keys,
                                   {.format = v1::PAYLOAD_FORMAT_RAW, .deadline_ms = 4000});
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(4500));
    ASSERT_OK(got);
    ASSERT_NO_FATAL_FAILURE(ExpectAllFoundBitExact(*got, b));
  }

  // Puts keep working: copies for the dead owner are skipped, the live owners store all.
  size_t owned_by_dead = 0;
  for (const std::string& k : b.keys) owned_by_dead += ring_.IsOwner(ids_[2], kNs, k, 2);
  auto again = cluster_->PutBlocks(kNs, b.puts, po);
  ASSERT_OK(again);
  EXPECT_EQ(again->replicas_skipped, owned_by_dead);
  EXPECT_EQ(again->blocks_stored, 2 * b.keys.size() - owned_by_dead);

  auto l =
      cluster_->Lookup(kNs, std::vector<std::string>(b.keys.begin(), b.keys.begin() + kChainLen));
  ASSERT_OK(l);
  EXPECT_EQ(l->prefix_blocks(), static_cast<uint64_t>(kChainLen));
  EXPECT_OK(cluster_->Refresh());  // a live member answers ClusterStatus

  // With both owners of a block dead the put fails, naming an unreachable node.
  nodes_->node(1).Kill();
  size_t both_dead = b.keys.size();
  for (size_t i = 0; i < b.keys.size(); ++i) {
    if (ring_.IsOwner(ids_[1], kNs, b.keys[i], 2) && ring_.IsOwner(ids_[2], kNs, b.keys[i], 2)) {
      both_dead = i;
      break;
    }
  }
  ASSERT_LT(both_dead, b.keys.size());
  auto lost = cluster_->PutBlocks(kNs, std::span(b.puts).subspan(both_dead, 1), po);
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(lost.status().message(), HasSubstr("no owner of block 0 is reachable"));
}

// Issue 16. A ClusterClient Lookup asks each owner about its share, one hop: every key of
// every owner's share, and no more (each node's lookup_blocks counter), and the answer is
// the one a member's own fan-out gives. Errors name the key's index in the whole request.
TEST_F(ClusterClientTest, LookupsAskTheOwnersDirectlyAndAgreeWithAMembersFanOut) {
  Blocks b;
  ASSERT_NO_FATAL_FAILURE(StartAndPut(2, 31, &b));
  // A whole chain, then 5 keys nobody holds.
  std::vector<std::string> chain(b.keys.begin(), b.keys.begin() + kChainLen);
  for (int i = 0; i < 5; ++i) chain.push_back("absent-" + std::to_string(i));

  std::vector<uint64_t> before(kNodes), share(kNodes);
  for (int n = 0; n < kNodes; ++n) {
    before[n] = NsStats(n).lookup_blocks();
    for (const std::string& k : chain) share[n] += ring_.IsOwner(ids_[n], kNs, k, 2) ? 1 : 0;
  }
  auto direct = cluster_->Lookup(kNs, chain);
  ASSERT_OK(direct);
  for (int n = 0; n < kNodes; ++n) {
    EXPECT_EQ(NsStats(n).lookup_blocks() - before[n], share[n]) << ids_[n];
  }
  EXPECT_EQ(direct->prefix_blocks(), static_cast<uint32_t>(kChainLen));
  ASSERT_EQ(direct->blocks_size(), static_cast<int>(chain.size()));
  for (size_t k = 0; k < chain.size(); ++k) {
    // Every key is named by its primary owner: the holder when found (the primary's
    // copy wins), the owner to ask for a miss.
    EXPECT_EQ(direct->blocks(k).owner(), ring_.OwnerIds(kNs, chain[k], 2)[0]) << k;
  }
  for (int n = 0; n < kNodes; ++n) {
    auto member = NodeClient(n)->Lookup(kNs, chain);  // that member's fan-out
    ASSERT_OK(member);
    EXPECT_EQ(member->prefix_blocks(), direct->prefix_blocks()) << ids_[n];
    for (size_t k = 0; k < chain.size(); ++k) {
      EXPECT_EQ(member->blocks(k).tier(), direct->blocks(k).tier()) << ids_[n] << " key " << k;
    }
  }

  // Leased: every owner leases what it holds of its share.
  client::LookupOptions leased;
  leased.lease_ms = 10000;
  leased.keep_compact = true;
  auto lease = cluster_->Lookup(kNs, chain, leased);
  ASSERT_OK(lease);
  EXPECT_TRUE(protocol::IsCompactLookup(*lease));
  EXPECT_EQ(lease->leased_blocks(), static_cast<uint32_t>(kChainLen));
  auto released = cluster_->ReleaseLeases(kNs, *lease);
  ASSERT_OK(released);
  EXPECT_GE(*released, static_cast<uint64_t>(kChainLen));

  // Refused by the owners: one member answers for the request, so the error names the
  // key's index in the whole chain.
  std::vector<std::string> bad = chain;
  bad[17].clear();
  auto refused = cluster_->Lookup(kNs, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("keys[17]"));
  auto unknown = cluster_->Lookup("no-such-namespace", chain);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
}

// With every owner hung, a Lookup ends with the first deadline instead of retrying the
// whole request on each member.
TEST_F(ClusterClientTest, ALookupWithEveryOwnerHungEndsWithinItsDeadline) {
  Blocks b;
  ASSERT_NO_FATAL_FAILURE(StartAndPut(1, 37, &b));
  for (int n = 0; n < kNodes; ++n) {
    ASSERT_EQ(kill(nodes_->node(n).pid(), SIGSTOP), 0);
    ASSERT_TRUE(testing::WaitUntilStopped(nodes_->node(n).pid()));
  }
  client::CallOptions call;
  call.deadline_ms = 600;
  const auto start = std::chrono::steady_clock::now();
  auto r = cluster_->Lookup(kNs, std::vector<std::string>(b.keys.begin(), b.keys.end()), call);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_LT(took, std::chrono::milliseconds(1200));
  for (int n = 0; n < kNodes; ++n) kill(nodes_->node(n).pid(), SIGCONT);
}

TEST_F(ClusterClientTest, AHungNodeNeverHoldsAGetPastItsDeadline) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(2));
  ASSERT_NO_FATAL_FAILURE(ConnectCluster());
  std::unique_ptr<client::ClusterClient> fast = NewClusterClient(/*per_owner=*/300);
  ASSERT_NE(fast, nullptr);
  const Blocks b = MakeBlocks(23);
  client::PutOptions po;
  po.format = v1::PAYLOAD_FORMAT_RAW;
  auto put = cluster_->PutBlocks(kNs, b.puts, po);
  ASSERT_OK(put);

  // SIGSTOP: the node's sockets stay open but it never answers (unlike a killed node,
  // whose connections are refused at once).
  ASSERT_EQ(kill(nodes_->node(2).pid(), SIGSTOP), 0);
  {
    // Without a per-owner deadline the hung owner takes the whole call deadline: its
    // primary keys are misses, everything else is served, and the call ends on time.
    const auto start = std::chrono::steady_clock::now();
    auto got = cluster_->GetBlocks(kNs, b.keys,
                                   {.format = v1::PAYLOAD_FORMAT_RAW, .deadline_ms = 800});
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_LT(took, std::chrono::milliseconds(1500));
    ASSERT_OK(got);
    size_t missed = 0;
    for (size_t i = 0; i < b.keys.size(); ++i) {
      const bool hung_primary = ring_.OwnerIds(kNs, b.keys[i], 2)[0] == ids_[2];
      EXPECT_EQ((*got)[i].info.found(), !hung_primary) << i;
      missed += hung_primary;
    }
    EXPECT_GT(missed, 0u);
  }
  {
    // With a 300 ms per-owner deadline the replicas answer for it within the call.
    const auto start = std::chrono::steady_clock::now();
    auto got = fast->GetBlocks(kNs, b.keys,
                               {.format = v1::PAYLOAD_FORMAT_RAW, .deadline_ms = 3000});
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2000));
    ASSERT_OK(got);
    ASSERT_NO_FATAL_FAILURE(ExpectAllFoundBitExact(*got, b));
  }
  {
    // Now known down, the hung node is asked last, so nothing waits on it.
    const auto start = std::chrono::steady_clock::now();
    auto got = cluster_->GetBlocks(kNs, b.keys,
                                   {.format = v1::PAYLOAD_FORMAT_RAW, .deadline_ms = 3000});
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));
    ASSERT_OK(got);
    ASSERT_NO_FATAL_FAILURE(ExpectAllFoundBitExact(*got, b));
  }
  kill(nodes_->node(2).pid(), SIGCONT);
}

// Issue 16. Lookups ask every owner. Once a call finds one hung (SIGSTOP: it accepts
// connections and never answers, so any call to it waits its whole deadline), the
// ClusterClient marks it down and later Lookups skip it: the survivors answer without
// waiting on it. A background probe re-admits it once it
// answers again (SIGCONT).
TEST_F(ClusterClientTest, ADownMemberIsSkippedByLookupsUntilAProbeFindsItBack) {
  constexpr int64_t kLongDeadlineMs = 20000;
  ASSERT_NO_FATAL_FAILURE(StartCluster(1));
  std::unique_ptr<client::ClusterClient> cluster =
      NewClusterClient(/*per_owner=*/0, /*down_retry_ms=*/200);
  ASSERT_NE(cluster, nullptr);
  const Blocks b = MakeBlocks(29);
  client::PutOptions po;
  po.format = v1::PAYLOAD_FORMAT_RAW;
  ASSERT_OK(cluster->PutBlocks(kNs, b.puts, po));
  const std::vector<std::string> chain(b.keys.begin(), b.keys.begin() + kChainLen);
  auto lookup = [&](int64_t deadline_ms) {
    client::CallOptions call;
    call.deadline_ms = deadline_ms;
    return cluster->Lookup(kNs, chain, call);
  };
  ASSERT_EQ(lookup(kLongDeadlineMs)->prefix_blocks(), static_cast<uint32_t>(kChainLen));

  const std::string first = cluster->members()[0].node_id;  // the member to hang
  const int hung = static_cast<int>(std::find(ids_.begin(), ids_.end(), first) - ids_.begin());
  auto is_down = [&] {
    for (const client::ClusterMember& m : cluster->members()) {
      if (m.node_id == first) return m.down;
    }
    return false;
  };
  ASSERT_FALSE(is_down());
  ASSERT_EQ(kill(nodes_->node(hung).pid(), SIGSTOP), 0);
  ASSERT_TRUE(testing::WaitUntilStopped(nodes_->node(hung).pid()));
  // Detection costs one short deadline; a survivor answers, the hung node's keys missing.
  auto detected = lookup(1000);
  ASSERT_OK(detected);
  EXPECT_TRUE(is_down());
  // Known down: a Lookup that still asked it would wait the whole long deadline. Keep
  // looking up over several probe intervals: the probes (which time out) keep it down
  // and never hold a Lookup.
  for (int i = 0; i < 20; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto r = lookup(kLongDeadlineMs);
    EXPECT_LT(std::chrono::steady_clock::now() - start,
              std::chrono::milliseconds(kLongDeadlineMs / 2))
        << "lookup " << i << " waited for the hung member";
    ASSERT_OK(r);
    ASSERT_EQ(r->blocks_size(), kChainLen);
    for (int k = 0; k < kChainLen; ++k) {
      const bool on_hung = ring_.OwnerIds(kNs, chain[k], 1)[0] == first;
      EXPECT_EQ(r->blocks(k).tier() != v1::TIER_NONE, !on_hung) << k;
    }
    EXPECT_TRUE(is_down());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // spans probe intervals
  }

  // Resumed: a probe finds it (Lookups keep triggering probes) and it is up again.
  ASSERT_EQ(kill(nodes_->node(hung).pid(), SIGCONT), 0);
  EXPECT_TRUE(PollUntil(
      [&] {
        EXPECT_OK(lookup(kLongDeadlineMs));
        return !is_down();
      },
      std::chrono::milliseconds(10000)))
      << "the resumed member was not re-admitted";
  // Its blocks are found again.
  EXPECT_TRUE(PollUntil(
      [&] {
        auto r = lookup(kLongDeadlineMs);
        return r.ok() && r->prefix_blocks() == static_cast<uint32_t>(kChainLen);
      },
      std::chrono::milliseconds(10000)));
}

}  // namespace
}  // namespace kvtier
