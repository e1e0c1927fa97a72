// Tests service/peer_health.h on a fake clock: when a peer goes down, that a down peer is
// never called, and that probes are rate-limited and bring it back.
#include "service/peer_health.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace kvtier::service {
namespace {

using ::kvtier::testing::FakeClock;

TEST(PeerHealthTest, DownAfterConsecutiveFailuresAndUpAgainOnAnyAnswer) {
  FakeClock clock;
  PeerHealth h(&clock, 3, 1000);
  EXPECT_TRUE(h.IsHealthy("p"));  // unknown peers are up
  EXPECT_EQ(h.LastSeenMsAgo("p"), -1);
  h.RecordSuccess("p");
  clock.AdvanceMillis(5);
  EXPECT_EQ(h.LastSeenMsAgo("p"), 5);
  h.RecordFailure("p");
  h.RecordFailure("p");
  EXPECT_TRUE(h.IsHealthy("p"));
  EXPECT_TRUE(h.ShouldCall("p"));
  h.RecordSuccess("p");  // an answer resets the count
  h.RecordFailure("p");
  h.RecordFailure("p");
  EXPECT_TRUE(h.ShouldCall("p"));
  h.RecordFailure("p");
  EXPECT_FALSE(h.IsHealthy("p"));
  EXPECT_FALSE(h.ShouldCall("p"));
  h.RecordSuccess("p");  // e.g. a ClusterStatus Stats call got through
  EXPECT_TRUE(h.ShouldCall("p"));
  EXPECT_EQ(h.LastSeenMsAgo("p"), 0);
}

TEST(PeerHealthTest, DownPeerIsNeverCalledAndProbedAtMostOncePerInterval) {
  FakeClock clock;
  PeerHealth h(&clock, 1, 1000);
  EXPECT_FALSE(h.TakeProbe("p"));  // up peers are not probed
  h.RecordFailure("p");
  ASSERT_FALSE(h.ShouldCall("p"));
  EXPECT_FALSE(h.TakeProbe("p"));  // just detected: the first probe is 1000 ms away
  clock.AdvanceMillis(999);
  EXPECT_FALSE(h.TakeProbe("p"));
  clock.AdvanceMillis(1);
  EXPECT_FALSE(h.ShouldCall("p"));  // requests still skip it, however long it has been
  EXPECT_TRUE(h.TakeProbe("p"));
  EXPECT_FALSE(h.TakeProbe("p"));  // one probe in flight at a time
  clock.AdvanceMillis(5000);
  EXPECT_FALSE(h.TakeProbe("p"));  // ...even when the interval has passed

  h.FinishProbe("p", /*answered=*/false);
  EXPECT_FALSE(h.ShouldCall("p"));
  EXPECT_FALSE(h.TakeProbe("p"));  // the next one is an interval after the failed probe
  clock.AdvanceMillis(1000);
  ASSERT_TRUE(h.TakeProbe("p"));
  h.FinishProbe("p", /*answered=*/true);
  EXPECT_TRUE(h.IsHealthy("p"));
  EXPECT_TRUE(h.ShouldCall("p"));
  EXPECT_EQ(h.LastSeenMsAgo("p"), 0);
  EXPECT_FALSE(h.TakeProbe("p"));
}

TEST(PeerHealthTest, RetainForgetsDepartedPeersAndTheirProbes) {
  FakeClock clock;
  PeerHealth h(&clock, 1, 1000);
  h.RecordSuccess("p");
  h.RecordFailure("q");
  clock.AdvanceMillis(1000);
  ASSERT_TRUE(h.TakeProbe("q"));
  h.Retain({Peer{"p", "p", false}});
  EXPECT_EQ(h.LastSeenMsAgo("p"), 1000);
  EXPECT_TRUE(h.IsHealthy("q"));           // unknown again
  h.FinishProbe("q", /*answered=*/false);  // a probe that outlived its peer: no-op
  EXPECT_TRUE(h.IsHealthy("q"));
  EXPECT_FALSE(h.TakeProbe("q"));
}

}  // namespace
}  // namespace kvtier::service
