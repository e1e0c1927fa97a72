// Tests service/peer_fanout.h against two real gRPC peers on 127.0.0.1 port 0: merged
// cluster-wide answers, batching, dead, slow and down peers (on a fake clock for the
// probe schedule), replicas, ClusterStatus.
#include "service/peer_fanout.h"

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.grpc.pb.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_resolver.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::service {
namespace {

using ::kvtier::testing::FakeClock;
using ::kvtier::testing::FakeResolver;

// A real gRPC server for one peer: KvCache/Lookup answered from an in-memory key -> tier
// map, KvCacheAdmin/Stats, and grpc.health.v1.Health/Check (counted). It can be made
// slow (holds Lookups until released), down (Lookup answers UNAVAILABLE and the health
// check NOT_SERVING) or stopped.
class LookupServer final : public v1::KvCache::Service {
 public:
  LookupServer() {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(this);
    b.RegisterService(&admin_);
    b.RegisterCallbackGenericService(&health_);
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
      common::MutexLock lock(&mu_);
      ++calls_;
      keys_asked_ += req->keys_size();
      EXPECT_TRUE(req->local_only());
      if (slow_) mu_.Await(common::Condition(&released_));
      if (health_.down()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
      if (req->namespace_() != ns_) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown namespace");
      }
    }
    uint32_t prefix = 0;
    bool contiguous = true;
    for (const std::string& k : req->keys()) {
      common::MutexLock lock(&mu_);
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

  // grpc.health.v1.Health/Check without the generated health stubs: the request is
  // ignored, the answer is HealthCheckResponse{status: SERVING (1) or NOT_SERVING (2)}.
  class Health final : public grpc::CallbackGenericService {
   public:
    grpc::ServerGenericBidiReactor* CreateReactor(
        grpc::GenericCallbackServerContext* ctx) override {
      if (ctx->method() != "/grpc.health.v1.Health/Check") {
        return grpc::CallbackGenericService::CreateReactor(ctx);  // UNIMPLEMENTED
      }
      common::MutexLock lock(&mu_);
      ++checks_;
      return new Check(down_ ? '\x02' : '\x01');
    }
    bool down() {
      common::MutexLock lock(&mu_);
      return down_;
    }
    void SetDown(bool down) {
      common::MutexLock lock(&mu_);
      down_ = down;
    }
    int checks() {
      common::MutexLock lock(&mu_);
      return checks_;
    }

   private:
    class Check final : public grpc::ServerGenericBidiReactor {
     public:
      explicit Check(char status) {
        const char bytes[2] = {'\x08', status};
        grpc::Slice slice(bytes, sizeof(bytes));
        response_ = grpc::ByteBuffer(&slice, 1);
        StartRead(&request_);
      }
      void OnReadDone(bool) override {
        StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
      }
      void OnDone() override { delete this; }

     private:
      grpc::ByteBuffer request_;
      grpc::ByteBuffer response_;
    };
    common::Mutex mu_;
    bool down_ ABSL_GUARDED_BY(mu_) = false;
    int checks_ ABSL_GUARDED_BY(mu_) = 0;
  };

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  void Add(const std::string& key, v1::Tier t) {
    common::MutexLock lock(&mu_);
    blocks_[key] = t;
  }
  void MakeSlow() {
    common::MutexLock lock(&mu_);
    slow_ = true;
  }
  void Release() {
    common::MutexLock lock(&mu_);
    released_ = true;
  }
  void SetDown(bool down) { health_.SetDown(down); }
  void Stop() {
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now());
      server_.reset();
    }
  }
  int calls() {
    common::MutexLock lock(&mu_);
    return calls_;
  }
  int keys_asked() {
    common::MutexLock lock(&mu_);
    return keys_asked_;
  }
  int health_checks() { return health_.checks(); }

 private:
  int port_ = 0;
  Admin admin_;
  Health health_;
  std::unique_ptr<grpc::Server> server_;
  common::Mutex mu_;
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
    auto m = Membership::Create(o);
    ASSERT_OK(m);
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
  common::Notification done;
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
  common::Notification done;
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

// Issue 16: a down peer must not slow the survivors. Once detected it gets no Lookup at
// all; a probe (a health check, not a user's Lookup) is sent at most once per interval
// of the fake clock, no lookup waits for it, and the first answer brings the peer back.
TEST_F(FanoutTest, DownPeerGetsNoCallsUntilARateLimitedProbeFindsItBack) {
  Place(1);
  FakeClock clock;
  FanoutOptions fo;
  fo.peer_deadline_ms = 60'000;  // a lookup that waited for the down peer would hang
  fo.failures_to_unhealthy = 2;
  fo.unhealthy_retry_ms = 1000;
  PeerFanout fanout(membership_.get(), fo, &clock);
  const std::string down = a_->address();
  auto expect_misses_exactly_on = [&](const v1::LookupResponse& r, bool down_keys_missing) {
    ASSERT_EQ(r.blocks_size(), static_cast<int>(keys_.size()));
    for (size_t i = 0; i < keys_.size(); ++i) {
      const bool owned_by_down = membership_->ring()->OwnerIds("ns", keys_[i], 1)[0] == down;
      EXPECT_EQ(r.blocks(static_cast<int>(i)).tier() == v1::TIER_NONE,
                owned_by_down && down_keys_missing)
          << i;
    }
  };

  a_->SetDown(true);
  for (int i = 0; i < 2; ++i)
    expect_misses_exactly_on(fanout.Lookup("ns", keys_, local_tiers_), true);
  EXPECT_EQ(a_->calls(), 2);
  ASSERT_FALSE(fanout.health().IsHealthy(down));

  // Known down: no call and no probe before the interval, however many lookups.
  for (int i = 0; i < 5; ++i)
    expect_misses_exactly_on(fanout.Lookup("ns", keys_, local_tiers_), true);
  fanout.AwaitIdle();
  EXPECT_EQ(a_->calls(), 2);
  EXPECT_EQ(a_->health_checks(), 0);
  EXPECT_GT(b_->calls(), 5);  // the survivor is still asked

  // Due: the next lookup sends one probe (NOT_SERVING: still down), without waiting.
  clock.AdvanceMillis(1000);
  expect_misses_exactly_on(fanout.Lookup("ns", keys_, local_tiers_), true);
  fanout.AwaitIdle();
  EXPECT_EQ(a_->health_checks(), 1);
  EXPECT_FALSE(fanout.health().IsHealthy(down));
  clock.AdvanceMillis(999);
  for (int i = 0; i < 3; ++i)
    expect_misses_exactly_on(fanout.Lookup("ns", keys_, local_tiers_), true);
  fanout.AwaitIdle();
  EXPECT_EQ(a_->health_checks(), 1);  // at most one per interval

  // Back up: the next due probe finds it serving, and lookups ask it again.
  a_->SetDown(false);
  clock.AdvanceMillis(1);
  expect_misses_exactly_on(fanout.Lookup("ns", keys_, local_tiers_), true);  // did not wait
  fanout.AwaitIdle();
  EXPECT_EQ(a_->health_checks(), 2);
  EXPECT_TRUE(fanout.health().IsHealthy(down));
  const v1::LookupResponse r = fanout.Lookup("ns", keys_, local_tiers_);
  expect_misses_exactly_on(r, false);
  EXPECT_EQ(r.prefix_blocks(), keys_.size());
  EXPECT_EQ(a_->calls(), 3);
  EXPECT_EQ(a_->health_checks(), 2);
}

// A hung peer (accepts, never answers) costs the lookup that detects it one peer
// deadline; after that it is not called, so lookups do not wait for it.
TEST_F(FanoutTest, HungPeerCostsOneDeadlineThenNoCall) {
  Place(1);
  b_->MakeSlow();
  FakeClock clock;  // never advanced: no probe
  FanoutOptions fo;
  fo.peer_deadline_ms = 200;
  fo.failures_to_unhealthy = 1;
  PeerFanout fanout(membership_.get(), fo, &clock);
  fanout.Lookup("ns", keys_, local_tiers_);
  EXPECT_EQ(b_->calls(), 1);
  ASSERT_FALSE(fanout.health().IsHealthy(b_->address()));
  for (int i = 0; i < 5; ++i) {
    const v1::LookupResponse r = fanout.Lookup("ns", keys_, local_tiers_);
    for (size_t k = 0; k < keys_.size(); ++k) {
      const std::string owner = membership_->ring()->OwnerIds("ns", keys_[k], 1)[0];
      EXPECT_EQ(r.blocks(static_cast<int>(k)).tier() == v1::TIER_NONE, owner == b_->address()) << k;
    }
  }
  EXPECT_EQ(b_->calls(), 1);
  EXPECT_EQ(a_->calls(), 6);
  EXPECT_EQ(b_->health_checks(), 0);
  b_->Release();
}

TEST_F(FanoutTest, StubsAreCachedPerAddressAndOwnedByTheCaller) {
  FanoutOptions fo;
  PeerFanout fanout(membership_.get(), fo);
  std::shared_ptr<PeerStubs> s = fanout.StubsFor(a_->address());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(fanout.StubsFor(a_->address()), s);
  EXPECT_NE(fanout.StubsFor(b_->address()), s);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::LookupRequest req;
  req.set_namespace_("ns");
  req.set_local_only(true);
  req.add_keys("k");
  v1::LookupResponse resp;
  EXPECT_OK(s->kv->Lookup(&ctx, req, &resp));
  EXPECT_EQ(resp.blocks_size(), 1);
}

// The review's hazard: stubs taken before a membership change must stay usable after the
// change drops the peer's cached channel.
TEST(PeerFanoutStubsTest, StubsHeldAcrossAMembershipChangeStayUsable) {
  LookupServer peer;
  peer.Add("k", v1::TIER_HOT);
  FakeResolver resolver;
  resolver.Set("peers", {"127.0.0.1"});
  MembershipOptions o;
  o.self_id = "self:1";
  o.self_port = 1;
  o.peer_dns = "peers";
  o.peer_port =
      static_cast<uint32_t>(std::stoi(peer.address().substr(peer.address().rfind(':') + 1)));
  o.resolver = &resolver;
  auto m = Membership::Create(o);
  ASSERT_OK(m);
  ASSERT_EQ((*m)->peers().size(), 2u);
  PeerFanout fanout(m->get(), FanoutOptions());
  const std::vector<std::string> keys = {"k"};
  fanout.Lookup("ns", keys, {});
  std::shared_ptr<PeerStubs> held = fanout.StubsFor(peer.address());

  resolver.Set("peers", {});  // the peer leaves
  ASSERT_OK((*m)->Refresh());
  ASSERT_EQ((*m)->peers().size(), 1u);
  const v1::LookupResponse after = fanout.Lookup("ns", keys, {});  // sees the change
  EXPECT_EQ(after.blocks(0).tier(), v1::TIER_NONE);
  EXPECT_NE(fanout.StubsFor(peer.address()), held);  // the cached channel was dropped

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::LookupRequest req;
  req.set_namespace_("ns");
  req.set_local_only(true);
  req.add_keys("k");
  v1::LookupResponse resp;
  ASSERT_OK(held->kv->Lookup(&ctx, req, &resp));
  EXPECT_EQ(resp.blocks(0).tier(), v1::TIER_HOT);
}

}  // namespace
}  // namespace kvtier::service
