#include "service/cluster.h"

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.grpc.pb.h"

namespace kvtier::service {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class FakeClock : public common::Clock {
 public:
  int64_t NowMicros() const override { return now_us_.load(); }
  void AdvanceMs(int64_t ms) { now_us_ += ms * 1000; }

 private:
  std::atomic<int64_t> now_us_{1'000'000};
};

// A scripted resolver: a name -> IPs table, IP -> reverse names, and local IPs.
class FakeResolver : public Resolver {
 public:
  absl::StatusOr<std::vector<std::string>> Resolve(const std::string& host) override {
    absl::MutexLock lock(&mu_);
    ++resolves_;
    if (!fail_.ok()) return fail_;
    auto it = names_.find(host);
    if (it == names_.end()) return absl::NotFoundError(host);
    return it->second;
  }
  absl::StatusOr<std::string> ReverseLookup(const std::string& ip) override {
    absl::MutexLock lock(&mu_);
    auto it = reverse_.find(ip);
    if (it == reverse_.end()) return absl::NotFoundError(ip);
    return it->second;
  }
  bool IsLocalAddress(const std::string& ip) override {
    absl::MutexLock lock(&mu_);
    return local_.count(ip) != 0;
  }

  void Set(const std::string& host, std::vector<std::string> ips) {
    absl::MutexLock lock(&mu_);
    names_[host] = std::move(ips);
  }
  void SetReverse(const std::string& ip, const std::string& name) {
    absl::MutexLock lock(&mu_);
    reverse_[ip] = name;
  }
  void AddLocal(const std::string& ip) {
    absl::MutexLock lock(&mu_);
    local_.insert(ip);
  }
  void Fail(absl::Status s) {
    absl::MutexLock lock(&mu_);
    fail_ = std::move(s);
  }
  // Blocks until Resolve() has been called at least n times (or 10 s passed).
  bool AwaitResolves(int n) {
    absl::MutexLock lock(&mu_);
    want_ = n;
    return mu_.AwaitWithTimeout(absl::Condition(this, &FakeResolver::Reached), absl::Seconds(10));
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::vector<std::string>> names_;
  std::map<std::string, std::string> reverse_;
  std::set<std::string> local_;
  absl::Status fail_;
  int resolves_ = 0;
  int want_ = 0;
  bool Reached() const { return resolves_ >= want_; }
};

std::vector<std::string> Ids(const std::vector<Peer>& peers) {
  std::vector<std::string> ids;
  for (const Peer& p : peers) ids.push_back(p.id);
  return ids;
}

TEST(SplitHostPortTest, AcceptsHostPortAndBracketedIpv6) {
  std::string host;
  uint32_t port = 0;
  ASSERT_TRUE(SplitHostPort("10.0.0.1:50051", "f", &host, &port).ok());
  EXPECT_EQ(host, "10.0.0.1");
  EXPECT_EQ(port, 50051u);
  ASSERT_TRUE(SplitHostPort("[::1]:7", "f", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 7u);
  for (const char* bad : {"nohost", ":1", "h:", "h:0", "h:70000", "::1:5", "[::1", "h:x"}) {
    absl::Status s = SplitHostPort(bad, "cluster.static_peers[0]", &host, &port);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("cluster.static_peers[0]")) << bad;
  }
}

TEST(ValidateClusterConfigTest, NamesTheBadField) {
  v1::ClusterConfig c;
  EXPECT_TRUE(ValidateClusterConfig(c).ok());
  c.add_static_peers("a:1");
  c.add_static_peers("b:2");
  EXPECT_TRUE(ValidateClusterConfig(c).ok());
  c.set_replication_factor(3);
  EXPECT_THAT(std::string(ValidateClusterConfig(c).message()),
              HasSubstr("cluster.replication_factor"));
  c.set_replication_factor(2);
  c.add_static_peers("a:1");
  EXPECT_THAT(std::string(ValidateClusterConfig(c).message()),
              HasSubstr("cluster.static_peers[2]"));
  c.clear_static_peers();
  c.add_static_peers("c");
  EXPECT_THAT(std::string(ValidateClusterConfig(c).message()),
              HasSubstr("cluster.static_peers[0]"));
  c.set_peer_dns("kvtier-peers");
  EXPECT_THAT(std::string(ValidateClusterConfig(c).message()), HasSubstr("mutually exclusive"));
  c.clear_static_peers();
  c.set_peer_dns("kvtier-peers:50051");
  EXPECT_EQ(ValidateClusterConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.set_peer_dns("kvtier-peers.kvtier.svc.cluster.local");
  EXPECT_TRUE(ValidateClusterConfig(c).ok());
}

TEST(MembershipTest, StaticListFindsSelfByIdOrByLocalAddressAndPort) {
  FakeResolver resolver;
  resolver.AddLocal("127.0.0.1");
  MembershipOptions o;
  o.self_id = "some-default-name:2";  // not in the list: found by address + port
  o.self_port = 2;
  o.static_peers = {"127.0.0.1:3", "127.0.0.1:1", "127.0.0.1:2"};
  o.resolver = &resolver;
  auto m = Membership::Create(o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->self_id(), "127.0.0.1:2");
  const std::vector<Peer> peers = (*m)->peers();
  EXPECT_THAT(Ids(peers), ElementsAre("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"));
  EXPECT_FALSE(peers[0].self);
  EXPECT_TRUE(peers[1].self);
  EXPECT_EQ((*m)->ring()->size(), 3u);

  // A node missing from the list still counts itself in.
  o.static_peers = {"a:1", "b:1"};
  o.self_id = "c:1";
  o.self_port = 1;
  auto lone = Membership::Create(o);
  ASSERT_TRUE(lone.ok());
  EXPECT_THAT(Ids((*lone)->peers()), ElementsAre("a:1", "b:1", "c:1"));
}

TEST(MembershipTest, RejectsBadOptions) {
  MembershipOptions o;
  o.self_id = "";
  EXPECT_EQ(Membership::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.self_id = "a:1";
  o.static_peers = {"a:1", "b"};
  auto bad = Membership::Create(o);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("cluster.static_peers[1]"));
  o.static_peers = {"a:1"};
  o.peer_dns = "kvtier-peers";
  EXPECT_EQ(Membership::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MembershipTest, DnsMembersAreNamedByReverseDnsAndFollowJoinsAndLeaves) {
  FakeResolver r;
  const std::string dns = "kvtier-peers.kvtier.svc.cluster.local";
  r.Set(dns, {"10.0.0.1", "10.0.0.2"});
  r.AddLocal("10.0.0.1");
  r.SetReverse("10.0.0.2", "kvtier-1.kvtier-peers.kvtier.svc.cluster.local");
  MembershipOptions o;
  o.self_id = "kvtier-0.kvtier-peers.kvtier.svc.cluster.local:50051";
  o.self_port = 50051;
  o.peer_dns = dns;
  o.resolver = &r;
  auto m = Membership::Create(o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(Ids((*m)->peers()),
              ElementsAre("kvtier-0.kvtier-peers.kvtier.svc.cluster.local:50051",
                          "kvtier-1.kvtier-peers.kvtier.svc.cluster.local:50051"));
  EXPECT_EQ((*m)->peers()[0].address, "10.0.0.1:50051");
  EXPECT_TRUE((*m)->peers()[0].self);
  const uint64_t v1 = (*m)->version();

  // A new pod without a PTR record yet joins under its IP.
  r.Set(dns, {"10.0.0.1", "10.0.0.2", "10.0.0.3"});
  ASSERT_TRUE((*m)->Refresh().ok());
  EXPECT_EQ((*m)->ring()->size(), 3u);
  EXPECT_EQ((*m)->peers().front().id, "10.0.0.3:50051");  // ids sort; digits first
  EXPECT_GT((*m)->version(), v1);

  // Same answer: no change. A DNS failure keeps the list.
  const uint64_t v2 = (*m)->version();
  ASSERT_TRUE((*m)->Refresh().ok());
  EXPECT_EQ((*m)->version(), v2);
  r.Fail(absl::UnavailableError("dns down"));
  EXPECT_FALSE((*m)->Refresh().ok());
  EXPECT_EQ((*m)->ring()->size(), 3u);
  r.Fail(absl::OkStatus());

  // kvtier-1 is deleted; then it restarts with a new IP but the same name: same id.
  r.Set(dns, {"10.0.0.1", "10.0.0.3"});
  ASSERT_TRUE((*m)->Refresh().ok());
  EXPECT_EQ((*m)->ring()->size(), 2u);
  r.Set(dns, {"10.0.0.1", "10.0.0.3", "10.0.0.9"});
  r.SetReverse("10.0.0.9", "kvtier-1.kvtier-peers.kvtier.svc.cluster.local");
  ASSERT_TRUE((*m)->Refresh().ok());
  const std::vector<Peer> peers = (*m)->peers();
  ASSERT_EQ(peers.size(), 3u);
  EXPECT_EQ(peers[2].id, "kvtier-1.kvtier-peers.kvtier.svc.cluster.local:50051");
  EXPECT_EQ(peers[2].address, "10.0.0.9:50051");
}

TEST(MembershipTest, StartedMembershipRefreshesInTheBackground) {
  FakeResolver r;
  r.Set("peers", {"10.0.0.1"});
  r.AddLocal("10.0.0.1");
  MembershipOptions o;
  o.self_id = "self:9";
  o.self_port = 9;
  o.peer_dns = "peers";
  o.dns_refresh_ms = 1;
  o.resolver = &r;
  auto m = Membership::Create(o);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->ring()->size(), 1u);
  r.Set("peers", {"10.0.0.1", "10.0.0.2"});
  (*m)->Start();
  ASSERT_TRUE(r.AwaitResolves(3));  // the initial one + at least two refreshes
  EXPECT_EQ((*m)->ring()->size(), 2u);
}

TEST(PeerHealthTest, UnhealthyAfterConsecutiveFailuresProbedThenRecovers) {
  FakeClock clock;
  PeerHealth h(&clock, 3, 1000);
  EXPECT_TRUE(h.IsHealthy("p"));
  EXPECT_EQ(h.LastSeenMsAgo("p"), -1);
  h.RecordSuccess("p");
  clock.AdvanceMs(5);
  EXPECT_EQ(h.LastSeenMsAgo("p"), 5);
  h.RecordFailure("p");
  h.RecordFailure("p");
  EXPECT_TRUE(h.IsHealthy("p"));
  EXPECT_TRUE(h.ShouldCall("p"));
  h.RecordFailure("p");
  EXPECT_FALSE(h.IsHealthy("p"));
  EXPECT_FALSE(h.ShouldCall("p"));  // skipped until the probe is due
  clock.AdvanceMs(1000);
  EXPECT_TRUE(h.ShouldCall("p"));   // one probe
  EXPECT_FALSE(h.ShouldCall("p"));  // others keep skipping
  h.RecordSuccess("p");
  EXPECT_TRUE(h.IsHealthy("p"));
  EXPECT_TRUE(h.ShouldCall("p"));
  h.Retain({Peer{"q", "q", false}});
  EXPECT_EQ(h.LastSeenMsAgo("p"), -1);
}

// A real gRPC KvCache server answering Lookup from an in-memory key -> tier map; can be
// made slow (holds calls until released) or killed.
class LookupServer final : public v1::KvCache::Service {
 public:
  LookupServer() {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(this);
    b.RegisterService(&admin_);
    server_ = b.BuildAndStart();
    admin_.node_id = address();
  }
  ~LookupServer() override {
    Release();
    Stop();
  }

  grpc::Status Lookup(grpc::ServerContext*, const v1::LookupRequest* req,
                      v1::LookupResponse* resp) override {
    {
      absl::MutexLock lock(&mu_);
      ++calls_;
      keys_asked_ += req->keys_size();
      EXPECT_TRUE(req->local_only());
      if (slow_) mu_.Await(absl::Condition(&released_));
      if (req->namespace_() != ns_) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown namespace");
      }
    }
    uint32_t prefix = 0;
    bool contiguous = true;
    for (const std::string& k : req->keys()) {
      absl::MutexLock lock(&mu_);
      auto it = blocks_.find(k);
      const v1::Tier t = it == blocks_.end() ? v1::TIER_NONE : it->second;
      resp->add_blocks()->set_tier(t);
      contiguous &= t != v1::TIER_NONE;
      prefix += contiguous ? 1 : 0;
    }
    resp->set_prefix_blocks(prefix);
    return grpc::Status::OK;
  }

  // Stats answers with node_id = the server's address and one namespace row.
  struct Admin final : public v1::KvCacheAdmin::Service {
    grpc::Status Stats(grpc::ServerContext*, const v1::StatsRequest*,
                       v1::StatsResponse* resp) override {
      resp->set_node_id(node_id);
      v1::NamespaceStats* ns = resp->add_namespaces();
      ns->set_name("ns");
      ns->set_lookup_blocks(100);
      ns->set_lookup_hit_blocks(40);
      return grpc::Status::OK;
    }
    std::string node_id;
  };

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  void Add(const std::string& key, v1::Tier t) {
    absl::MutexLock lock(&mu_);
    blocks_[key] = t;
  }
  void MakeSlow() {
    absl::MutexLock lock(&mu_);
    slow_ = true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    released_ = true;
  }
  void Stop() {
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now());
      server_.reset();
    }
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  int keys_asked() {
    absl::MutexLock lock(&mu_);
    return keys_asked_;
  }

 private:
  int port_ = 0;
  Admin admin_;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::string ns_ = "ns";
  std::map<std::string, v1::Tier> blocks_ ABSL_GUARDED_BY(mu_);
  bool slow_ ABSL_GUARDED_BY(mu_) = false;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  int keys_asked_ ABSL_GUARDED_BY(mu_) = 0;
};

// This node ("self:1", no server needed: it is the caller) plus two real peers.
class FanoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = std::make_unique<LookupServer>();
    b_ = std::make_unique<LookupServer>();
    MembershipOptions o;
    o.self_id = "self:1";
    o.self_port = 1;
    o.static_peers = {"self:1", a_->address(), b_->address()};
    o.resolver = &resolver_;
    auto m = Membership::Create(o);
    ASSERT_TRUE(m.ok()) << m.status();
    membership_ = std::move(*m);
    for (int i = 0; i < 60; ++i) keys_.push_back(absl::StrCat("block-", i));
  }

  LookupServer* ServerFor(const std::string& id) {
    if (id == a_->address()) return a_.get();
    if (id == b_->address()) return b_.get();
    return nullptr;
  }

  // Stores every key on its top-r owners (self's copies go to local_tiers_); odd keys
  // are cold, even keys hot.
  void Place(size_t r) {
    local_tiers_.assign(keys_.size(), v1::TIER_NONE);
    for (size_t i = 0; i < keys_.size(); ++i) {
      const v1::Tier t = i % 2 == 0 ? v1::TIER_HOT : v1::TIER_COLD;
      for (const std::string& id : membership_->ring()->OwnerIds("ns", keys_[i], r)) {
        if (id == "self:1") {
          local_tiers_[i] = t;
        } else {
          ServerFor(id)->Add(keys_[i], t);
        }
      }
    }
  }

  FakeResolver resolver_;
  std::unique_ptr<LookupServer> a_, b_;
  std::unique_ptr<Membership> membership_;
  std::vector<std::string> keys_;
  std::vector<v1::Tier> local_tiers_;
};

TEST_F(FanoutTest, MergesOwnersAnswersIntoTheClusterWidePrefix) {
  Place(1);
  FanoutOptions fo;
  fo.peer_deadline_ms = 5000;
  fo.max_keys_per_call = 8;
  PeerFanout fanout(membership_.get(), fo);
  const v1::LookupResponse r = fanout.Lookup("ns", keys_, local_tiers_);
  EXPECT_EQ(r.prefix_blocks(), keys_.size());
  ASSERT_EQ(r.blocks_size(), static_cast<int>(keys_.size()));
  int per_owner[3] = {0, 0, 0};
  for (size_t i = 0; i < keys_.size(); ++i) {
    const std::string owner = membership_->ring()->OwnerIds("ns", keys_[i], 1)[0];
    EXPECT_EQ(r.blocks(static_cast<int>(i)).owner(), owner) << i;
    EXPECT_EQ(r.blocks(static_cast<int>(i)).tier(), i % 2 == 0 ? v1::TIER_HOT : v1::TIER_COLD);
    per_owner[owner == "self:1" ? 0 : owner == a_->address() ? 1 : 2]++;
  }
  // Each peer was asked only about its own keys, in batches of at most 8.
  EXPECT_EQ(a_->keys_asked(), per_owner[1]);
  EXPECT_EQ(b_->keys_asked(), per_owner[2]);
  EXPECT_EQ(a_->calls(), (per_owner[1] + 7) / 8);
  EXPECT_EQ(b_->calls(), (per_owner[2] + 7) / 8);
  EXPECT_GT(per_owner[0], 0);

  // Same answer from the blocking and the async form; a miss reports its primary owner.
  local_tiers_[5] = v1::TIER_NONE;
  std::vector<std::string> with_gap = keys_;
  with_gap[5] = "never-stored";
  absl::Notification done;
  v1::LookupResponse async_r;
  fanout.LookupAsync("ns", with_gap, local_tiers_, [&](v1::LookupResponse resp) {
    async_r = std::move(resp);
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(async_r.prefix_blocks(), 5u);
  EXPECT_EQ(async_r.blocks(5).tier(), v1::TIER_NONE);
  EXPECT_EQ(async_r.blocks(5).owner(), membership_->ring()->OwnerIds("ns", "never-stored", 1)[0]);
  EXPECT_EQ(async_r.blocks(6).tier(), r.blocks(6).tier());
}

TEST_F(FanoutTest, AllLocalNeedsNoPeerCall) {
  FanoutOptions fo;
  PeerFanout fanout(membership_.get(), fo);
  std::vector<v1::Tier> all_hot(keys_.size(), v1::TIER_HOT);
  const v1::LookupResponse r = fanout.Lookup("ns", keys_, all_hot);
  EXPECT_EQ(r.prefix_blocks(), keys_.size());
  EXPECT_EQ(a_->calls() + b_->calls(), 0);
}

TEST_F(FanoutTest, DeadPeerBlocksAreMissesAndThePeerTurnsUnhealthy) {
  Place(1);
  const std::string dead = a_->address();
  a_->Stop();
  FanoutOptions fo;
  fo.peer_deadline_ms = 2000;
  fo.failures_to_unhealthy = 2;
  fo.unhealthy_retry_ms = 3'600'000;
  PeerFanout fanout(membership_.get(), fo);
  size_t first_dead = keys_.size();
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (membership_->ring()->OwnerIds("ns", keys_[i], 1)[0] == dead) {
      first_dead = std::min(first_dead, i);
    }
  }
  ASSERT_LT(first_dead, keys_.size());
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto start = std::chrono::steady_clock::now();
    const v1::LookupResponse r = fanout.Lookup("ns", keys_, local_tiers_);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2500));
    EXPECT_EQ(r.prefix_blocks(), first_dead);
    for (size_t i = 0; i < keys_.size(); ++i) {
      const std::string owner = membership_->ring()->OwnerIds("ns", keys_[i], 1)[0];
      EXPECT_EQ(r.blocks(static_cast<int>(i)).tier() == v1::TIER_NONE, owner == dead) << i;
    }
  }
  EXPECT_FALSE(fanout.health().IsHealthy(dead));
  EXPECT_TRUE(fanout.health().IsHealthy(b_->address()));
  v1::ClusterStatusResponse status;
  fanout.FillClusterStatus(&status);
  ASSERT_EQ(status.peers_size(), 3);
  for (const auto& p : status.peers()) {
    EXPECT_EQ(p.healthy(), p.node_id() != dead) << p.node_id();
    EXPECT_NEAR(p.ownership_share(), 1.0 / 3, 0.03);
  }
  EXPECT_EQ(status.node_id(), "self:1");
}

TEST_F(FanoutTest, SlowPeerCostsOnlyTheDeadline) {
  Place(1);
  b_->MakeSlow();
  FanoutOptions fo;
  fo.peer_deadline_ms = 150;
  PeerFanout fanout(membership_.get(), fo);
  const auto start = std::chrono::steady_clock::now();
  const v1::LookupResponse r = fanout.Lookup("ns", keys_, local_tiers_);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::milliseconds(1500));
  for (size_t i = 0; i < keys_.size(); ++i) {
    const std::string owner = membership_->ring()->OwnerIds("ns", keys_[i], 1)[0];
    EXPECT_EQ(r.blocks(static_cast<int>(i)).tier() == v1::TIER_NONE, owner == b_->address()) << i;
  }
  b_->Release();
}

TEST_F(FanoutTest, WithTwoReplicasALostPeerLosesNoBlock) {
  Place(2);
  a_->Stop();
  FanoutOptions fo;
  fo.replication_factor = 2;
  fo.peer_deadline_ms = 2000;
  PeerFanout fanout(membership_.get(), fo);
  const v1::LookupResponse r = fanout.Lookup("ns", keys_, local_tiers_);
  EXPECT_EQ(r.prefix_blocks(), keys_.size());
  for (const auto& b : r.blocks()) EXPECT_NE(b.owner(), a_->address());
}

TEST_F(FanoutTest, UnknownNamespaceOnPeerIsAMissNotAnUnhealthyPeer) {
  Place(1);
  FanoutOptions fo;
  fo.peer_deadline_ms = 5000;
  fo.failures_to_unhealthy = 1;
  PeerFanout fanout(membership_.get(), fo);
  const v1::LookupResponse r = fanout.Lookup("other-ns", keys_, {});
  EXPECT_EQ(r.prefix_blocks(), 0u);
  EXPECT_TRUE(fanout.health().IsHealthy(a_->address()));
  EXPECT_TRUE(fanout.health().IsHealthy(b_->address()));
}

TEST_F(FanoutTest, ClusterStatusCarriesEveryMembersStatsAndHealth) {
  FanoutOptions fo;
  fo.peer_deadline_ms = 2000;
  fo.failures_to_unhealthy = 1;
  PeerFanout fanout(membership_.get(), fo);
  const std::string dead = b_->address();
  b_->Stop();
  v1::StatsResponse self_stats;
  self_stats.set_node_id("self:1");
  absl::Notification done;
  v1::ClusterStatusResponse status;
  fanout.ClusterStatusAsync(self_stats, [&](v1::ClusterStatusResponse r) {
    status = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(status.node_id(), "self:1");
  EXPECT_EQ(status.replication_factor(), 1u);
  ASSERT_EQ(status.peers_size(), 3);
  double shares = 0;
  for (const v1::PeerStatus& p : status.peers()) {
    shares += p.ownership_share();
    if (p.node_id() == "self:1") {
      EXPECT_TRUE(p.healthy());
      EXPECT_EQ(p.stats().node_id(), "self:1");
    } else if (p.node_id() == dead) {
      EXPECT_FALSE(p.healthy());
      EXPECT_FALSE(p.has_stats());
    } else {
      EXPECT_TRUE(p.healthy());
      EXPECT_EQ(p.stats().node_id(), a_->address());
      EXPECT_EQ(p.stats().namespaces(0).lookup_hit_blocks(), 40u);
      EXPECT_EQ(p.address(), a_->address());
    }
  }
  EXPECT_NEAR(shares, 1.0, 1e-9);
}

}  // namespace
}  // namespace kvtier::service
