#include "tools/replay_report.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/svg_plot.h"

namespace kvtier::tools {
namespace {

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

double SavedTokensPerRequest(const SimResult& r) {
  return r.requests ? static_cast<double>((r.leading_hot_blocks + r.leading_cold_blocks) *
                                          kTraceBlockTokens) /
                          static_cast<double>(r.requests)
                    : 0;
}

std::string Human(double v, const char* const* units, double step) {
  int u = 0;
  while (v >= step * 0.9999 && units[u + 1] != nullptr) {
    v /= step;
    ++u;
  }
  return absl::StrFormat(v < 10 ? "%.1f%s" : "%.0f%s", v, units[u]);
}

void PrintRow(const ReplayRow& r, const ReplayRow& belady, bool with_halves) {
  std::string codec = r.codec.empty() ? "" : absl::StrCat(r.codec, " ");
  std::string cold = r.cold_capacities > 0 ? absl::StrFormat("%gx", r.cold_capacities) : "-";
  std::printf("%-9s%9llu %5s  %-11s %-5s %7.4f %7.4f %8.3f %7.4f %7.4f %8.0f", codec.c_str(),
              static_cast<unsigned long long>(r.capacity_blocks), cold.c_str(),
              r.policy.c_str(), r.engine.c_str(), r.all.HitRate(), r.all.PrefixHitRate(),
              Ratio(r.all.PrefixHitRate(), belady.all.HitRate()),
              Ratio(static_cast<double>(r.all.leading_cold_blocks),
                    static_cast<double>(r.all.requested_blocks)),
              r.all.TieredPrefixHitRate(), SavedTokensPerRequest(r.all));
  if (with_halves) {
    std::printf(" | %7.4f %6.3f %7.4f %6.3f", r.halves[0].PrefixHitRate(),
                Ratio(r.halves[0].PrefixHitRate(), belady.halves[0].HitRate()),
                r.halves[1].PrefixHitRate(),
                Ratio(r.halves[1].PrefixHitRate(), belady.halves[1].HitRate()));
  }
  std::printf("\n");
}

uint64_t g_bytes_per_token = 0;  // for the plot's tick labels (a plain function pointer)

std::pair<std::string, std::string> CapacityTick(double tokens) {
  static const char* const kTok[] = {"", "K", "M", "G", nullptr};
  static const char* const kBytes[] = {" B", " KiB", " MiB", " GiB", " TiB", nullptr};
  std::string bytes =
      g_bytes_per_token ? Human(tokens * static_cast<double>(g_bytes_per_token), kBytes, 1024)
                        : "";
  return {Human(tokens, kTok, 1000) + " tok", bytes};
}

}  // namespace

void PrintReplayTable(const ReplayTraceReport& report, const ReplayPrintOptions& options) {
  std::printf("trace: %s (%llu requests, %llu block refs, %llu unique blocks)\n",
              report.name.c_str(), static_cast<unsigned long long>(report.requests),
              static_cast<unsigned long long>(report.block_refs),
              static_cast<unsigned long long>(report.unique_blocks));
  std::printf(
      "hit/prefix = resident in the HOT tier at lookup; cold = the leading run's blocks "
      "served\nfrom the cold tier; tiered = leading run in either tier; saved = prefill "
      "tokens saved per\nrequest (tiered); sink_blocks %u\n",
      options.sink_blocks);
  if (!options.sweep && !options.sweep_codecs && !report.rows.empty()) {
    const ReplayRow& r = report.rows[0];
    const ReplayRefs& ref = report.refs[0];
    if (!r.codec.empty()) {
      std::printf("codec: %s (%llu bytes per 512-token block)\n", r.codec.c_str(),
                  static_cast<unsigned long long>(r.trace_block_bytes));
    }
    std::printf("policy: %s (%s)\ncapacity_blocks: %llu\ncold tier: %g x hot\n",
                r.policy.c_str(), r.engine.c_str(),
                static_cast<unsigned long long>(r.capacity_blocks), r.cold_capacities);
    std::printf("hit_rate: %.4f\nprefix_hit_rate: %.4f\ninfinite_hit_rate: %.4f\n"
                "belady_hit_rate: %.4f\nprefix_vs_belady: %.3f\n"
                "leading_hot_blocks: %llu\nleading_cold_blocks: %llu\nmissed_blocks: %llu\n"
                "tiered_prefix_hit_rate: %.4f\nprefill_tokens_saved_per_request: %.0f\n",
                r.all.HitRate(), r.all.PrefixHitRate(), ref.infinite.all.HitRate(),
                ref.belady.all.HitRate(), Ratio(r.all.PrefixHitRate(), ref.belady.all.HitRate()),
                static_cast<unsigned long long>(r.all.leading_hot_blocks),
                static_cast<unsigned long long>(r.all.leading_cold_blocks),
                static_cast<unsigned long long>(r.all.requested_blocks -
                                                r.all.leading_hot_blocks -
                                                r.all.leading_cold_blocks),
                r.all.TieredPrefixHitRate(), SavedTokensPerRequest(r.all));
    return;
  }
  std::printf("%-9s%9s %5s  %-11s %-5s %7s %7s %8s %7s %7s %8s",
              options.sweep_codecs ? "codec" : "", "capacity", "cold", "policy", "engine", "hit",
              "prefix", "x_belady", "cold", "tiered", "saved");
  if (options.sweep) std::printf(" | %7s %6s %7s %6s", "half1", "x_bel", "half2", "x_bel");
  std::printf("\n");
  bool prefix_ge_lru = true, have_both = false;
  for (size_t i = 0; i < report.refs.size(); ++i) {
    double lru = -1, plru = -1;
    for (const ReplayRow& r : report.rows) {
      if (r.point != i) continue;
      if (r.policy == "lru" && lru < 0) lru = r.all.PrefixHitRate();
      if (r.policy == "prefix_lru" && plru < 0) plru = r.all.PrefixHitRate();
      PrintRow(r, report.refs[i].belady, options.sweep);
    }
    if (lru >= 0 && plru >= 0) {
      have_both = true;
      if (plru < lru) prefix_ge_lru = false;
    }
  }
  if (have_both) {
    std::printf("prefix_lru prefix_hit_rate >= lru at every capacity: %s\n",
                prefix_ge_lru ? "yes" : "NO");
  }
}

void PrintReplayJson(const std::vector<ReplayTraceReport>& reports,
                     const ReplayPrintOptions& options) {
  std::printf("{\n  \"hit_definition\": \"resident in the hot tier\",\n  \"sink_blocks\": %u,\n"
              "  \"traces\": [\n", options.sink_blocks);
  for (size_t t = 0; t < reports.size(); ++t) {
    const ReplayTraceReport& rep = reports[t];
    std::printf("    {\"trace\": \"%s\", \"requests\": %llu, \"block_refs\": %llu, "
                "\"unique_blocks\": %llu, \"results\": [\n",
                rep.name.c_str(), static_cast<unsigned long long>(rep.requests),
                static_cast<unsigned long long>(rep.block_refs),
                static_cast<unsigned long long>(rep.unique_blocks));
    for (size_t i = 0; i < rep.rows.size(); ++i) {
      const ReplayRow& r = rep.rows[i];
      const ReplayRefs& ref = rep.refs[r.point];
      std::string codec;
      if (!r.codec.empty()) {
        codec = absl::StrCat("\"codec\": \"", r.codec, "\", \"trace_block_bytes\": ",
                             r.trace_block_bytes, ", ");
      }
      std::printf(
          "      {%s\"capacity_blocks\": %llu, \"cold_capacities\": %g, \"policy\": \"%s\", "
          "\"engine\": \"%s\", \"hit_rate\": %.6f, \"prefix_hit_rate\": %.6f, "
          "\"infinite_hit_rate\": %.6f, \"belady_hit_rate\": %.6f, \"prefix_vs_belady\": %.4f, "
          "\"leading_hot_blocks\": %llu, \"leading_cold_blocks\": %llu, "
          "\"missed_blocks\": %llu, \"tiered_prefix_hit_rate\": %.6f, "
          "\"prefill_tokens_saved\": %llu, "
          "\"first_half_prefix_hit_rate\": %.6f, \"second_half_prefix_hit_rate\": %.6f, "
          "\"first_half_belady_hit_rate\": %.6f, \"second_half_belady_hit_rate\": %.6f}%s\n",
          codec.c_str(), static_cast<unsigned long long>(r.capacity_blocks), r.cold_capacities,
          r.policy.c_str(), r.engine.c_str(), r.all.HitRate(), r.all.PrefixHitRate(),
          ref.infinite.all.HitRate(), ref.belady.all.HitRate(),
          Ratio(r.all.PrefixHitRate(), ref.belady.all.HitRate()),
          static_cast<unsigned long long>(r.all.leading_hot_blocks),
          static_cast<unsigned long long>(r.all.leading_cold_blocks),
          static_cast<unsigned long long>(r.all.requested_blocks - r.all.leading_hot_blocks -
                                          r.all.leading_cold_blocks),
          r.all.TieredPrefixHitRate(),
          static_cast<unsigned long long>((r.all.leading_hot_blocks + r.all.leading_cold_blocks) *
                                          kTraceBlockTokens),
          r.halves[0].PrefixHitRate(), r.halves[1].PrefixHitRate(),
          ref.belady.halves[0].HitRate(), ref.belady.halves[1].HitRate(),
          i + 1 == rep.rows.size() ? "" : ",");
    }
    std::printf("    ]}%s\n", t + 1 == reports.size() ? "" : ",");
  }
  std::printf("  ]\n}\n");
}

std::string ReplaySweepSvg(const std::vector<ReplayTraceReport>& reports,
                           const ReplayPrintOptions& options) {
  std::vector<PlotPanel> panels;
  for (const ReplayTraceReport& rep : reports) {
    PlotPanel panel;
    panel.title = rep.name.substr(rep.name.find_last_of('/') + 1);
    auto series = [&](const std::string& name, bool dashed) -> PlotSeries& {
      for (PlotSeries& s : panel.series) {
        if (s.name == name) return s;
      }
      panel.series.push_back(PlotSeries{name, {}, dashed});
      return panel.series.back();
    };
    double first_cold = -1;
    for (const ReplayRow& r : rep.rows) {
      if (r.policy == "belady" || r.policy == "infinite") continue;  // drawn as bounds
      if (r.cold_capacities > 0 && first_cold < 0) first_cold = r.cold_capacities;
      if (r.cold_capacities > 0 && r.cold_capacities != first_cold) continue;
      PlotSeries& line = series(r.policy, false);
      line.bold = r.policy == "adaptive";
      line.points.emplace_back(static_cast<double>(r.capacity_blocks * kTraceBlockTokens),
                               r.all.PrefixHitRate());
    }
    for (const ReplayRefs& ref : rep.refs) {
      const double x = static_cast<double>(ref.capacity_blocks * kTraceBlockTokens);
      series("belady (bound)", true).points.emplace_back(x, ref.belady.all.HitRate());
      series("infinite capacity", true).points.emplace_back(x, ref.infinite.all.HitRate());
    }
    panels.push_back(std::move(panel));
  }
  g_bytes_per_token = options.bytes_per_token;
  PlotAxes axes;
  axes.title = "Prefix hit rate of the hot tier vs its capacity";
  axes.x_label = "hot capacity: tokens / fp16 bytes (32x8x128 layout)";
  axes.y_label = "prefix hit rate";
  axes.x_tick = CapacityTick;
  return RenderSvgPlot(panels, axes);
}

}  // namespace kvtier::tools
