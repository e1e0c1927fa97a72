// Tests for the trace synthesizer (tools/trace_synth.h) and the SVG sweep plot
// (tools/svg_plot.h).
#include "tests/testing/status_matchers.h"
#include "tools/trace_synth.h"

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tools/svg_plot.h"
#include "tools/trace.h"

namespace kvtier::tools {
namespace {

TEST(TraceSynthTest, EveryFamilyIsDeterministicPrefixChainedAndRoundTrips) {
  for (SynthFamily f : AllSynthFamilies()) {
    SCOPED_TRACE(SynthFamilyName(f));
    EXPECT_EQ(*ParseSynthFamily(SynthFamilyName(f)), f);
    SynthOptions o;
    o.family = f;
    o.requests = 300;
    absl::StatusOr<Trace> a = SynthesizeTrace(o);
    absl::StatusOr<Trace> b = SynthesizeTrace(o);
    ASSERT_OK(a);
    ASSERT_OK(b);
    EXPECT_EQ(a->requests.size(), 300u);
    const std::string text = TraceToJsonl(*a);
    EXPECT_EQ(text, TraceToJsonl(*b));
    // ParseTrace rejects ids under two parents and repeated ids in a request.
    absl::StatusOr<Trace> parsed = ParseTrace(text);
    ASSERT_OK(parsed);
    EXPECT_EQ(parsed->total_blocks, a->total_blocks);
    EXPECT_EQ(parsed->unique_blocks, a->unique_blocks);
    uint64_t last = 0;
    for (const TraceRequest& r : a->requests) {
      EXPECT_GE(r.timestamp_ms, last);
      last = r.timestamp_ms;
      EXPECT_EQ(r.input_length, r.hash_ids.size() * 512);
    }
    EXPECT_LT(a->unique_blocks, a->total_blocks);  // something is reused
    o.seed = 2;
    EXPECT_NE(TraceToJsonl(*SynthesizeTrace(o)), text);
  }
  EXPECT_FALSE(ParseSynthFamily("video").ok());
  SynthOptions none;
  none.requests = 0;
  EXPECT_FALSE(SynthesizeTrace(none).ok());
}

TEST(TraceSynthTest, FamiliesHaveTheirShape) {
  auto make = [](SynthFamily f) {
    SynthOptions o;
    o.family = f;
    o.requests = 2000;
    return *SynthesizeTrace(o);
  };
  // chat and agent re-read their history: most references are to blocks seen before.
  for (SynthFamily f : {SynthFamily::kChat, SynthFamily::kAgent}) {
    Trace t = make(f);
    EXPECT_GT(1.0 - static_cast<double>(t.unique_blocks) / t.total_blocks, 0.6)
        << SynthFamilyName(f);
  }
  // scan: about 30% of requests are long one-off documents.
  Trace scan = make(SynthFamily::kScan);
  absl::flat_hash_map<uint64_t, int> refs;
  for (const TraceRequest& r : scan.requests) {
    for (uint64_t id : r.hash_ids) refs[id]++;
  }
  int one_off = 0;
  for (const TraceRequest& r : scan.requests) {
    if (r.hash_ids.size() >= 16 && refs[r.hash_ids[0]] == 1) ++one_off;
  }
  EXPECT_NEAR(one_off / 2000.0, 0.3, 0.05);
  // conversation: at its default size, most references are first ones (the real trace it
  // is shaped after: 63%), about 29 blocks per request.
  SynthOptions o;
  o.family = SynthFamily::kConversation;
  o.requests = SynthDefaultRequests(o.family);
  Trace conv = *SynthesizeTrace(o);
  EXPECT_EQ(conv.requests.size(), 12031u);
  EXPECT_NEAR(static_cast<double>(conv.unique_blocks) / conv.total_blocks, 0.57, 0.05);
  EXPECT_NEAR(static_cast<double>(conv.total_blocks) / conv.requests.size(), 29, 4);
}

std::pair<std::string, std::string> Tick(double x) {
  return {absl::StrCat(static_cast<int>(x), " tok"), "bytes"};
}

TEST(SvgPlotTest, DrawsOnePanelPerTraceWithLegendAndBounds) {
  PlotPanel a{"trace <a>", {{"lru", {{1, 0.1}, {2, 0.3}}, false},
                           {"belady", {{1, 0.5}, {2, 0.9}}, true}}};
  PlotPanel b{"trace b", {{"lru", {{4, 0.2}, {8, 0.4}}, false}}};
  const PlotAxes axes{"hit rate vs capacity", "capacity", "prefix hit rate", Tick};
  const std::string svg = RenderSvgPlot({a, b}, axes);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("trace &lt;a&gt;"), std::string::npos);  // escaped
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);  // the bound is dashed
  size_t polylines = 0;
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1)) {
    ++polylines;
  }
  EXPECT_EQ(polylines, 3u);
}

}  // namespace
}  // namespace kvtier::tools
