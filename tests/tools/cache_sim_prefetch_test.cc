// SimulatePrefetch (tools/cache_sim.h): the replay's model of prefetch on Lookup in time.
// Without time (delay 0) or without prefetch it serves what the Lookup found hot; with an
// unbounded read rate the whole cold run is hot by the Gets; a rate bounds what is done;
// nothing prefetched is wasted when the Gets read it right after.
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tools/cache_sim.h"
#include "tools/trace.h"
#include "tools/trace_synth.h"

namespace kvtier::tools {
namespace {

Trace Synth(SynthFamily family, size_t requests) {
  SynthOptions o;
  o.family = family;
  o.seed = 3;
  o.requests = requests;
  absl::StatusOr<Trace> t = SynthesizeTrace(o);
  EXPECT_OK(t);
  return t.ok() ? *t : Trace{};
}

PrefetchSimOptions Options(double delay_ms, bool prefetch, double blocks_per_ms = 0) {
  PrefetchSimOptions o;
  o.sim.capacity_blocks = 200;
  o.sim.cold_capacities = 8;
  o.delay_ms = delay_ms;
  o.prefetch = prefetch;
  o.blocks_per_ms = blocks_per_ms;
  return o;
}

TEST(SimulatePrefetchTest, WithoutPrefetchOrTimeTheGetsFindWhatTheLookupFound) {
  const Trace t = Synth(SynthFamily::kConversation, 600);
  auto off = SimulatePrefetch(t, SimPolicy::kAdaptive, Options(0, false));
  auto on_no_time = SimulatePrefetch(t, SimPolicy::kAdaptive, Options(0, true));
  ASSERT_OK(off);
  ASSERT_OK(on_no_time);
  EXPECT_GT(off->tiered_blocks, 0u);
  EXPECT_EQ(off->served_hot_blocks, off->hot_at_lookup_blocks);
  EXPECT_LT(off->ServedHotShare(), 0.9);  // there is something to prefetch
  EXPECT_EQ(on_no_time->served_hot_blocks, off->served_hot_blocks);
  EXPECT_EQ(on_no_time->prefetched_blocks, 0u);
  // The same as the plain simulator's split of the leading run.
  SimOptions so = Options(0, false).sim;
  auto plain = Simulate(t, SimPolicy::kAdaptive, so);
  ASSERT_OK(plain);
  EXPECT_EQ(off->tiered_blocks, plain->leading_hot_blocks + plain->leading_cold_blocks);
  EXPECT_EQ(off->hot_at_lookup_blocks, plain->leading_hot_blocks);
}

TEST(SimulatePrefetchTest, UnboundedPrefetchServesTheColdRunHot) {
  const Trace t = Synth(SynthFamily::kConversation, 600);
  auto off = SimulatePrefetch(t, SimPolicy::kAdaptive, Options(5, false));
  auto on = SimulatePrefetch(t, SimPolicy::kAdaptive, Options(5, true));
  // No share bound: what is left cold is only what the tier could not make room for.
  PrefetchSimOptions whole = Options(5, true);
  whole.max_hot_fraction = 1.0;
  auto unbounded = SimulatePrefetch(t, SimPolicy::kAdaptive, whole);
  ASSERT_OK(off);
  ASSERT_OK(on);
  ASSERT_OK(unbounded);
  EXPECT_GT(on->prefetched_blocks, 0u);
  EXPECT_GT(on->ServedHotShare(), off->ServedHotShare() + 0.1);
  EXPECT_GE(unbounded->ServedHotShare(), on->ServedHotShare());
  EXPECT_GE(unbounded->ServedHotShare(), 0.9);
  EXPECT_EQ(on->prefetch_wasted + on->prefetch_hits, on->prefetched_blocks);
}

TEST(SimulatePrefetchTest, TheReadRateBoundsWhatIsPrefetched) {
  const Trace t = Synth(SynthFamily::kConversation, 600);
  auto fast = SimulatePrefetch(t, SimPolicy::kAdaptive, Options(5, true));
  auto slow = SimulatePrefetch(t, SimPolicy::kAdaptive, Options(5, true, /*blocks_per_ms=*/0.2));
  auto none = SimulatePrefetch(t, SimPolicy::kAdaptive, Options(5, true, /*blocks_per_ms=*/0.1));
  ASSERT_OK(fast);
  ASSERT_OK(slow);
  ASSERT_OK(none);
  EXPECT_LE(slow->prefetched_blocks, slow->requests);  // at most 1 per request (5 x 0.2)
  EXPECT_GT(slow->prefetched_blocks, 0u);
  EXPECT_LT(slow->prefetched_blocks, fast->prefetched_blocks);
  EXPECT_EQ(none->prefetched_blocks, 0u);  // 5 x 0.1 < 1 block
}

// A Get that waits for the block being read when it comes: one more block per request
// at most (5 x 0.1 rounds up to 1), and never fewer served hot.
TEST(SimulatePrefetchTest, AGetWaitingForTheBlockInFlightCountsItOnce) {
  const Trace t = Synth(SynthFamily::kConversation, 600);
  PrefetchSimOptions o = Options(5, true, /*blocks_per_ms=*/0.1);
  auto plain = SimulatePrefetch(t, SimPolicy::kAdaptive, o);
  o.get_waits_for_inflight = true;
  auto waits = SimulatePrefetch(t, SimPolicy::kAdaptive, o);
  ASSERT_OK(plain);
  ASSERT_OK(waits);
  EXPECT_EQ(plain->prefetched_blocks, 0u);
  EXPECT_GT(waits->prefetched_blocks, 0u);
  EXPECT_LE(waits->prefetched_blocks, waits->requests);
  EXPECT_GT(waits->served_hot_blocks, plain->served_hot_blocks);
  // Unbounded: nothing is in flight, the same answer.
  PrefetchSimOptions u = Options(5, true);
  auto u_plain = SimulatePrefetch(t, SimPolicy::kAdaptive, u);
  u.get_waits_for_inflight = true;
  auto u_waits = SimulatePrefetch(t, SimPolicy::kAdaptive, u);
  ASSERT_OK(u_plain);
  ASSERT_OK(u_waits);
  EXPECT_EQ(u_plain->served_hot_blocks, u_waits->served_hot_blocks);
}

TEST(SimulatePrefetchTest, RejectsWhatIsNotAStorePolicyAndBadOptions) {
  const Trace t = Synth(SynthFamily::kChat, 50);
  EXPECT_FALSE(SimulatePrefetch(t, SimPolicy::kBelady, Options(5, true)).ok());
  PrefetchSimOptions bad = Options(5, true);
  bad.max_hot_fraction = 0;
  EXPECT_FALSE(SimulatePrefetch(t, SimPolicy::kAdaptive, bad).ok());
  EXPECT_FALSE(SimulatePrefetch(t, SimPolicy::kAdaptive, Options(-1, true)).ok());
}

}  // namespace
}  // namespace kvtier::tools
