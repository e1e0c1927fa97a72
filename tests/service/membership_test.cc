// Tests service/membership.h: host:port parsing, cluster config validation, static and
// DNS membership (ring identity, joins, leaves, restarts, DNS failures).
#include "service/membership.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtier/v1/kvtier.pb.h"
#include "tests/testing/fake_resolver.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::service {
namespace {

using ::kvtier::testing::FakeResolver;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Ids(const std::vector<Peer>& peers) {
  std::vector<std::string> ids;
  for (const Peer& p : peers) ids.push_back(p.id);
  return ids;
}

TEST(SplitHostPortTest, AcceptsHostPortAndBracketedIpv6) {
  std::string host;
  uint32_t port = 0;
  ASSERT_OK(SplitHostPort("10.0.0.1:50051", "f", &host, &port));
  EXPECT_EQ(host, "10.0.0.1");
  EXPECT_EQ(port, 50051u);
  ASSERT_OK(SplitHostPort("[::1]:7", "f", &host, &port));
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
  EXPECT_OK(ValidateClusterConfig(c));
  c.add_static_peers("a:1");
  c.add_static_peers("b:2");
  EXPECT_OK(ValidateClusterConfig(c));
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
  EXPECT_OK(ValidateClusterConfig(c));
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
  ASSERT_OK(m);
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
  ASSERT_OK(lone);
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
  ASSERT_OK(m);
  EXPECT_THAT(Ids((*m)->peers()),
              ElementsAre("kvtier-0.kvtier-peers.kvtier.svc.cluster.local:50051",
                          "kvtier-1.kvtier-peers.kvtier.svc.cluster.local:50051"));
  EXPECT_EQ((*m)->peers()[0].address, "10.0.0.1:50051");
  EXPECT_TRUE((*m)->peers()[0].self);
  const uint64_t v1 = (*m)->version();

  // A new pod without a PTR record yet joins under its IP.
  r.Set(dns, {"10.0.0.1", "10.0.0.2", "10.0.0.3"});
  ASSERT_OK((*m)->Refresh());
  EXPECT_EQ((*m)->ring()->size(), 3u);
  EXPECT_EQ((*m)->peers().front().id, "10.0.0.3:50051");  // ids sort; digits first
  EXPECT_GT((*m)->version(), v1);

  // Same answer: no change. A DNS failure keeps the list.
  const uint64_t v2 = (*m)->version();
  ASSERT_OK((*m)->Refresh());
  EXPECT_EQ((*m)->version(), v2);
  r.Fail(absl::UnavailableError("dns down"));
  EXPECT_FALSE((*m)->Refresh().ok());
  EXPECT_EQ((*m)->ring()->size(), 3u);
  r.Fail(absl::OkStatus());

  // kvtier-1 is deleted; then it restarts with a new IP but the same name: same id.
  r.Set(dns, {"10.0.0.1", "10.0.0.3"});
  ASSERT_OK((*m)->Refresh());
  EXPECT_EQ((*m)->ring()->size(), 2u);
  r.Set(dns, {"10.0.0.1", "10.0.0.3", "10.0.0.9"});
  r.SetReverse("10.0.0.9", "kvtier-1.kvtier-peers.kvtier.svc.cluster.local");
  ASSERT_OK((*m)->Refresh());
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
  ASSERT_OK(m);
  EXPECT_EQ((*m)->ring()->size(), 1u);
  r.Set("peers", {"10.0.0.1", "10.0.0.2"});
  (*m)->Start();
  ASSERT_TRUE(r.AwaitResolves(3));  // the initial one + at least two refreshes
  EXPECT_EQ((*m)->ring()->size(), 2u);
}

}  // namespace
}  // namespace kvtier::service
