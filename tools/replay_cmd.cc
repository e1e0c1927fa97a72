// `kvtier replay`: replays Mooncake traces (tools/trace.h, or synthetic families from
// tools/trace_synth.h) against the real TieredStore in-process and reports hit rates per
// tier next to infinite capacity and Belady's offline optimum (tools/replay.h,
// tools/cache_sim.h); tools/replay_report.h prints the table, JSON and SVG plot.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/strings.h"
#include "kv/codec.h"
#include "kv/layout.h"
#include "storage/eviction_policy_adaptive.h"
#include "storage/eviction_policy_reuse.h"
#include "tools/cache_sim.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/replay.h"
#include "tools/replay_report.h"
#include "tools/trace.h"
#include "tools/trace_synth.h"

namespace kvtier::tools {
namespace {

namespace st = ::kvtier::storage;

constexpr char kReplayUsage[] =
    "usage: kvtier replay (--trace FILE[,FILE] | --synth FAMILY[,FAMILY|all]) [flags]\n"
    "         --capacity-blocks N [--policy P]      one policy at one capacity\n"
    "         --capacity-bytes SIZE [--codec C] [--layout L]\n"
    "         --sweep [--capacities N,..] [--policies P,..] [--cold-capacities X,..]\n"
    "                 [--plot FILE.svg]\n"
    "         --sweep-codecs [--capacity-bytes SIZE] [--layout L]\n"
    "       kvtier replay --synth FAMILY --synth-out FILE   write the trace as JSONL\n"
    "\n"
    "Replays the trace through an in-process TieredStore (RocksDB in a temp dir). A block\n"
    "hits when it is resident in the HOT tier (the cache being sized) at lookup:\n"
    "  hit_rate            blocks hit / blocks requested\n"
    "  prefix_hit_rate     leading run of hot blocks / blocks requested\n"
    "  cold, tiered        the leading run resident in either tier: blocks from cold, and\n"
    "                      all of it / blocks requested; saved = its prefill tokens per\n"
    "                      request (512 per block)\n"
    "  infinite_hit_rate   same trace, unbounded capacity\n"
    "  belady_hit_rate     offline optimum (Belady/MIN over block references); an upper\n"
    "                      bound on any policy's (prefix) hit rate; x_belady = prefix/belady\n"
    "Policies: the store's (adaptive (default), lru, prefix_lru, lfu, reuse_lru, ...) run in\n"
    "the store; s3fifo runs in the simulator (engine column). --sim runs the store policies\n"
    "in the store model (tools/store_model.h: same policy objects, same counts).\n"
    "Traces: --synth chat|sysprompt|rag|agent|scan|conversation|all\n"
    "(tools/trace_synth.h), with --synth-requests N (4000; conversation 12031) and --seed\n"
    "S (1). Several traces: one table (and one plot panel) each.\n"
    "Flags:\n"
    "  --sweep            every policy at several capacities, plus each trace half\n"
    "                     ([0,n/2) and [n/2,n), warm cache) for hold-out evaluation\n"
    "  --cold-capacities  cold tier sizes to sweep, in multiples of the hot tier (blocks);\n"
    "                     default: --history\n"
    "  --plot FILE.svg    with --sweep: draw prefix hit rate vs capacity per trace\n"
    "  --trace-stats      only print the trace's reuse statistics (what reuse_lru bets on)\n"
    "  --sweep-codecs     hit rate per codec at equal bytes (--capacity-bytes, default the\n"
    "                     fp16 size of 5859 trace blocks)\n"
    "  --capacity-bytes   hot bytes; blocks = SIZE / encoded bytes of one 512-token trace\n"
    "                     block in --codec (fp16) and --layout (LxHxDxT, 32x8x128x16)\n"
    "  --history X        cold tier = X x hot blocks (the store remembers keys, and their\n"
    "                     hits, through it). Default 8\n"
    "  --sink-blocks N    namespace sink_blocks (default 1)\n"
    "  --prefetch-delays MS,..  prefetch on Lookup in time (docs/prefetch.md): per delay\n"
    "                     between a request's Lookup (trace timestamp) and its Gets, the\n"
    "                     share of tiered-hit blocks served hot without and with prefetch,\n"
    "                     and the wasted share (store model; store policies; capacity as\n"
    "                     above, default 5859 blocks)\n"
    "  --prefetch-gbps X  prefetch read rate in GB/s, blocks of --codec/--layout size\n"
    "                     (default 0 = unbounded: all of the cold run by the Gets)\n"
    "  --json, --data-dir DIR\n"
    "Replay payloads use a tiny layout (fp16 1x1x16x4) so the replay is fast; --codec and\n"
    "--layout only size the capacity (kv::EncodedSize).\n";

struct Settings {
  double cold = 8.0;  // cold tier, x hot
  uint32_t sink_blocks = 1;
  std::string data_dir;
  bool sim = false;
  bool tty = false;
};

void Progress(const std::string& label, size_t done, size_t total) {
  if (total == 0) return;
  const int width = 30;
  const int filled = static_cast<int>(width * done / total);
  std::fprintf(stderr, "\r%-36s [%s%s] %3zu%%", label.c_str(),
               std::string(filled, '=').c_str(), std::string(width - filled, ' ').c_str(),
               done * 100 / total);
  if (done == total) std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
}

absl::StatusOr<ReplayRow> RunSim(const Trace& trace, SimPolicy policy, uint64_t capacity,
                                 const Settings& s) {
  ReplayRow row;
  row.policy = SimPolicyName(policy);
  row.engine = "sim";
  row.capacity_blocks = capacity;
  SimOptions o;
  o.capacity_blocks = capacity;
  o.cold_capacities = s.cold;
  o.sink_blocks = s.sink_blocks;
  if (StorePolicyOf(policy).ok()) row.cold_capacities = s.cold;
  absl::StatusOr<SimResult> r = Simulate(trace, policy, o);
  if (!r.ok()) return r.status();
  row.all = *r;
  const size_t half = trace.requests.size() / 2;
  for (int h = 0; h < 2; ++h) {
    o.measure_begin = h == 0 ? 0 : half;
    o.measure_end = h == 0 ? half : 0;
    r = Simulate(trace, policy, o);
    if (!r.ok()) return r.status();
    row.halves[h] = *r;
  }
  return row;
}

absl::StatusOr<ReplayRow> RunStore(const Trace& trace, st::EvictionPolicyKind policy,
                                   uint64_t capacity_blocks, const Settings& s) {
  ReplayOptions o;
  o.capacity_blocks = capacity_blocks;
  o.policy = policy;
  o.cold_capacities = s.cold;
  o.sink_blocks = s.sink_blocks;
  o.data_dir = s.data_dir;
  const std::string label = absl::StrCat(st::EvictionPolicyName(policy), " @ ",
                                         capacity_blocks, " blocks, cold ", s.cold, "x");
  if (s.tty) o.progress = [label](size_t d, size_t t) { Progress(label, d, t); };
  absl::StatusOr<ReplayResult> r = ReplayTrace(trace, o);
  if (!r.ok()) return r.status();
  ReplayRow row;
  row.policy = r->policy;
  row.engine = "store";
  row.capacity_blocks = r->capacity_blocks;
  row.cold_capacities = s.cold;
  row.all = r->store;
  row.halves[0] = r->halves[0];
  row.halves[1] = r->halves[1];
  return row;
}

// Runs `name` in the store when the store knows it (and not --sim), else the simulator.
absl::StatusOr<ReplayRow> RunPolicy(const Trace& trace, const std::string& name,
                                    uint64_t capacity, const Settings& s) {
  absl::StatusOr<st::EvictionPolicyKind> kind = st::ParseEvictionPolicy(name);
  if (!s.sim && kind.ok()) return RunStore(trace, *kind, capacity, s);
  absl::StatusOr<SimPolicy> sp = ParseSimPolicy(name);
  if (!sp.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--policy: ", sp.status().message()));
  }
  return RunSim(trace, *sp, capacity, s);
}

absl::StatusOr<kv::Layout> ParseLayoutFlag(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, 'x');
  if (parts.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--layout expects LAYERSxKV_HEADSxHEAD_DIMxTOKENS, got '", text, "'"));
  }
  uint32_t dims[4];
  for (int i = 0; i < 4; ++i) {
    if (!absl::SimpleAtoi(parts[i], &dims[i])) {
      return absl::InvalidArgumentError(absl::StrCat("--layout: '", parts[i], "' is not a number"));
    }
  }
  kv::Layout layout;
  layout.num_layers = dims[0];
  layout.num_kv_heads = dims[1];
  layout.head_dim = dims[2];
  layout.tokens_per_block = dims[3];
  layout.sink_tokens = std::min<uint32_t>(layout.sink_tokens, layout.tokens_per_block);
  if (absl::Status v = layout.Validate(); !v.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--layout: ", v.message()));
  }
  return layout;
}

// Encoded bytes of one 512-token trace block: ceil(512 / T) store blocks of T tokens
// (non-sink blocks: no raw tokens).
uint64_t TraceBlockBytes(kv::CodecId codec, const kv::Layout& layout) {
  const uint64_t per_trace_block =
      (kTraceBlockTokens + layout.tokens_per_block - 1) / layout.tokens_per_block;
  return per_trace_block * kv::EncodedSize(codec, layout, layout.tokens_per_block, 0);
}

absl::StatusOr<std::vector<double>> ParseList(const std::string& flag, const std::string& text,
                                              bool positive) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v) || v < 0 || (positive && v <= 0)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": bad value '", part, "'"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": empty"));
  return out;
}

struct Input {
  std::string name;
  Trace trace;
};

// --trace paths and --synth families, in that order.
absl::StatusOr<std::vector<Input>> ReadInputs(const tools::Flags& flags) {
  std::vector<Input> inputs;
  for (absl::string_view path :
       absl::StrSplit(flags.GetString("trace", ""), ',', absl::SkipEmpty())) {
    ASSIGN_OR_RETURN(Trace t, ReadTrace(std::string(path)));
    inputs.push_back({std::string(path), std::move(t)});
  }
  ASSIGN_OR_RETURN(int64_t requests, flags.GetInt("synth-requests", 0));
  ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 1));
  if (flags.Has("synth-requests") && requests <= 0) {
    return absl::InvalidArgumentError("--synth-requests must be > 0");
  }
  std::vector<SynthFamily> families;
  for (absl::string_view name :
       absl::StrSplit(flags.GetString("synth", ""), ',', absl::SkipEmpty())) {
    if (name == "all") {
      for (SynthFamily f : AllSynthFamilies()) families.push_back(f);
      continue;
    }
    absl::StatusOr<SynthFamily> f =
        ParseSynthFamily(std::string_view(name.data(), name.size()));
    if (!f.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--synth: ", f.status().message()));
    }
    families.push_back(*f);
  }
  for (SynthFamily f : families) {
    SynthOptions o;
    o.family = f;
    o.seed = static_cast<uint64_t>(seed);
    o.requests = requests > 0 ? static_cast<size_t>(requests) : SynthDefaultRequests(f);
    ASSIGN_OR_RETURN(Trace t, SynthesizeTrace(o));
    inputs.push_back({absl::StrCat("synth:", SynthFamilyName(f)), std::move(t)});
  }
  if (inputs.empty()) return absl::InvalidArgumentError("--trace or --synth is required");
  return inputs;
}

// --prefetch-delays: one line per (trace, policy, capacity, delay).
int PrefetchReport(const std::vector<Input>& inputs, const std::vector<std::string>& policies,
                   const std::vector<uint64_t>& capacities, const std::vector<double>& delays,
                   double blocks_per_ms, const Settings& s, bool json) {
  if (!json) {
    std::printf("%-28s %-10s %8s %6s %9s %9s %9s %9s %10s %9s\n", "trace", "policy", "capacity",
                "delay", "hot_off", "hot_on", "wasted", "hot@look", "prefetched", "hot_on_w");
  }
  for (const Input& in : inputs) {
    for (const std::string& name : policies) {
      absl::StatusOr<SimPolicy> sp = ParseSimPolicy(name);
      if (!sp.ok() || !StorePolicyOf(*sp).ok()) {
        std::fprintf(stderr, "kvtier replay: --prefetch-delays: %s is not a store policy\n",
                     name.c_str());
        return 2;
      }
      for (uint64_t cap : capacities) {
        for (double delay : delays) {
          PrefetchSimOptions o;
          o.sim.capacity_blocks = cap;
          o.sim.cold_capacities = s.cold;
          o.sim.sink_blocks = s.sink_blocks;
          o.delay_ms = delay;
          o.blocks_per_ms = blocks_per_ms;
          absl::StatusOr<PrefetchSimResult> off = SimulatePrefetch(in.trace, *sp, o);
          o.prefetch = true;
          absl::StatusOr<PrefetchSimResult> on = SimulatePrefetch(in.trace, *sp, o);
          // hot_on_w: the Gets also wait for the block being read when they come.
          o.get_waits_for_inflight = true;
          absl::StatusOr<PrefetchSimResult> waits = SimulatePrefetch(in.trace, *sp, o);
          for (const auto* r : {&off, &on, &waits}) {
            if (!r->ok()) {
              std::fprintf(stderr, "kvtier replay: %s\n", r->status().ToString().c_str());
              return 1;
            }
          }
          if (json) {
            std::printf("{\"trace\": \"%s\", \"policy\": \"%s\", \"capacity_blocks\": %llu, "
                        "\"cold_capacities\": %g, \"delay_ms\": %g, \"prefetch_blocks_per_ms\": %g, "
                        "\"tiered_blocks\": %llu, \"served_hot_share_off\": %.4f, "
                        "\"served_hot_share_on\": %.4f, \"wasted_share\": %.4f, "
                        "\"prefetched_blocks\": %llu, \"prefetch_hits\": %llu, "
                        "\"served_hot_share_on_waiting\": %.4f}\n",
                        in.name.c_str(), name.c_str(), static_cast<unsigned long long>(cap),
                        s.cold, delay, blocks_per_ms,
                        static_cast<unsigned long long>(on->tiered_blocks),
                        off->ServedHotShare(), on->ServedHotShare(), on->WastedShare(),
                        static_cast<unsigned long long>(on->prefetched_blocks),
                        static_cast<unsigned long long>(on->prefetch_hits),
                        waits->ServedHotShare());
          } else {
            const double at_lookup =
                on->tiered_blocks ? static_cast<double>(on->hot_at_lookup_blocks) /
                                        static_cast<double>(on->tiered_blocks)
                                  : 0;
            std::printf("%-28s %-10s %8llu %6g %9.4f %9.4f %9.4f %9.4f %10llu %9.4f\n",
                        in.name.c_str(), name.c_str(), static_cast<unsigned long long>(cap),
                        delay, off->ServedHotShare(), on->ServedHotShare(), on->WastedShare(),
                        at_lookup, static_cast<unsigned long long>(on->prefetched_blocks),
                        waits->ServedHotShare());
          }
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}

int TraceStats(const Trace& trace, bool json) {
  const ReuseStats r = ComputeReuseStats(trace);
  std::printf(json ? "{\"unique_blocks\": %llu, \"referenced_once\": %.4f, "
                     "\"reused_after_first\": %.4f, \"reused_after_repeat\": %.4f, "
                     "\"median_first_gap\": %llu, \"median_repeat_gap\": %llu}\n"
                   : "unique blocks %llu; referenced once %.4f\n"
                     "P(referenced again | 1st reference) %.4f, "
                     "P(referenced again | 2nd+ reference) %.4f\n"
                     "median gap in requests: 1st->2nd reference %llu, later references %llu\n",
              static_cast<unsigned long long>(r.unique_blocks), r.referenced_once,
              r.reused_after_first, r.reused_after_repeat,
              static_cast<unsigned long long>(r.median_first_gap),
              static_cast<unsigned long long>(r.median_repeat_gap));
  return 0;
}

}  // namespace

int RunReplay(int argc, char** argv) {
  tools::Flags flags = tools::Flags::Parse(argc, argv, 1,
                             {"json", "sweep", "sweep-codecs", "sim", "trace-stats", "help"});
  if (flags.Has("help")) {
    std::fputs(kReplayUsage, stdout);
    return 0;
  }
  auto usage_error = [](const std::string& msg) {
    std::fprintf(stderr, "kvtier replay: %s\n%s", msg.c_str(), kReplayUsage);
    return 2;
  };
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "kvtier replay: %s\n", std::string(st.message()).c_str());
    return absl::IsInvalidArgument(st) ? 2 : 1;
  };
  if (absl::Status s = flags.CheckKnown(
          {"trace", "synth", "synth-requests", "seed", "synth-out", "capacity-blocks",
           "capacity-bytes", "codec", "layout", "policy", "policies", "json", "sweep",
           "sweep-codecs", "sim", "history", "cold-capacities", "plot", "sink-blocks",
           "data-dir", "capacities", "trace-stats", "prefetch-delays", "prefetch-gbps",
           "help"});
      !s.ok()) {
    return usage_error(std::string(s.message()));
  }
  if (!flags.Has("trace") && !flags.Has("synth")) {
    return usage_error("--trace or --synth is required");
  }
  const bool json = flags.Has("json");
  const bool sweep = flags.Has("sweep");
  const bool sweep_codecs = flags.Has("sweep-codecs");
  if (sweep && sweep_codecs) return usage_error("--sweep and --sweep-codecs are exclusive");
  if (flags.Has("plot") && !sweep) return usage_error("--plot needs --sweep");

  Settings settings;
  settings.sim = flags.Has("sim");
  settings.tty = isatty(2) != 0;
  settings.data_dir = flags.GetString("data-dir", "");
  absl::StatusOr<int64_t> cap_blocks = flags.GetInt("capacity-blocks", 0);
  absl::StatusOr<uint64_t> cap_bytes = flags.GetBytes("capacity-bytes", 0);
  absl::StatusOr<double> history = flags.GetDouble("history", 8.0);
  absl::StatusOr<int64_t> sink_blocks = flags.GetInt("sink-blocks", 1);
  absl::StatusOr<kv::Layout> layout = ParseLayoutFlag(flags.GetString("layout", "32x8x128x16"));
  absl::StatusOr<kv::CodecId> codec = kv::ParseCodecName(flags.GetString("codec", "fp16"));
  for (const absl::Status& s : {cap_blocks.status(), cap_bytes.status(), history.status(),
                                sink_blocks.status(), layout.status(), codec.status()}) {
    if (!s.ok()) return usage_error(std::string(s.message()));
  }
  if (*cap_blocks < 0) return usage_error("--capacity-blocks must be > 0");
  if (*history < 0) return usage_error("--history must be >= 0");
  if (*sink_blocks < 0) return usage_error("--sink-blocks must be >= 0");
  settings.cold = *history;
  settings.sink_blocks = static_cast<uint32_t>(*sink_blocks);
  absl::StatusOr<std::vector<double>> colds =
      ParseList("cold-capacities", flags.GetString("cold-capacities", absl::StrCat(*history)),
                false);
  if (!colds.ok()) return usage_error(std::string(colds.status().message()));

  absl::StatusOr<std::vector<Input>> inputs = ReadInputs(flags);
  if (!inputs.ok()) return fail(inputs.status());
  if (flags.Has("synth-out")) {
    if (inputs->size() != 1) return usage_error("--synth-out writes exactly one trace");
    const std::string out = flags.GetString("synth-out", "");
    std::FILE* f = std::fopen(out.c_str(), "w");
    const std::string text = TraceToJsonl((*inputs)[0].trace);
    if (f == nullptr || std::fwrite(text.data(), 1, text.size(), f) != text.size() ||
        std::fclose(f) != 0) {
      std::fprintf(stderr, "kvtier replay: cannot write %s\n", out.c_str());
      return 1;
    }
    std::printf("wrote %s: %zu requests, %llu block refs, %llu unique blocks\n", out.c_str(),
                (*inputs)[0].trace.requests.size(),
                static_cast<unsigned long long>((*inputs)[0].trace.total_blocks),
                static_cast<unsigned long long>((*inputs)[0].trace.unique_blocks));
    if (!sweep && !sweep_codecs && *cap_blocks == 0 && *cap_bytes == 0) return 0;
  }
  if (flags.Has("trace-stats")) {
    for (const Input& in : *inputs) {
      if (!json) std::printf("trace: %s\n", in.name.c_str());
      TraceStats(in.trace, json);
    }
    return 0;
  }

  if (flags.Has("prefetch-delays")) {
    absl::StatusOr<std::vector<double>> delays =
        ParseList("prefetch-delays", flags.GetString("prefetch-delays", ""), false);
    absl::StatusOr<double> gbps = flags.GetDouble("prefetch-gbps", 0);
    if (!delays.ok()) return usage_error(std::string(delays.status().message()));
    if (!gbps.ok() || *gbps < 0) return usage_error("--prefetch-gbps must be >= 0");
    std::vector<uint64_t> capacities;
    if (*cap_blocks > 0) {
      capacities.push_back(static_cast<uint64_t>(*cap_blocks));
    } else if (*cap_bytes > 0) {
      capacities.push_back(*cap_bytes / TraceBlockBytes(*codec, *layout));
    } else {
      capacities.push_back(5859);
    }
    std::vector<std::string> pols;
    if (flags.Has("policies")) {
      pols = absl::StrSplit(flags.GetString("policies", ""), ',', absl::SkipEmpty());
    } else {
      pols = {flags.GetString("policy", st::kAdaptivePolicyName)};
    }
    // GB/s over bytes per block -> blocks per ms.
    const double blocks_per_ms =
        *gbps * 1e6 / static_cast<double>(TraceBlockBytes(*codec, *layout));
    return PrefetchReport(*inputs, pols, capacities, *delays, blocks_per_ms, settings, json);
  }

  // (codec label, bytes per trace block, capacity in blocks) to run.
  struct Point {
    std::string codec;
    uint64_t block_bytes = 0;
    uint64_t capacity_blocks = 0;
  };
  std::vector<Point> points;
  if (sweep_codecs) {
    uint64_t bytes = *cap_bytes;
    if (bytes == 0) bytes = 5859 * TraceBlockBytes(kv::CodecId::kFp16, *layout);
    for (kv::CodecId c : kv::AllCodecs()) {
      uint64_t bb = TraceBlockBytes(c, *layout);
      points.push_back({kv::CodecName(c), bb, bytes / bb});
    }
  } else if (sweep) {
    absl::StatusOr<std::vector<double>> caps = ParseList(
        "capacities", flags.GetString("capacities", "1465,2930,5859,11718,23436"), true);
    if (!caps.ok()) return usage_error(std::string(caps.status().message()));
    for (double v : *caps) points.push_back({"", 0, static_cast<uint64_t>(v)});
  } else if (*cap_blocks > 0) {
    points.push_back({"", 0, static_cast<uint64_t>(*cap_blocks)});
  } else if (*cap_bytes > 0) {
    uint64_t bb = TraceBlockBytes(*codec, *layout);
    points.push_back({kv::CodecName(*codec), bb, *cap_bytes / bb});
  } else {
    return usage_error(
        "--capacity-blocks, --capacity-bytes, --sweep or --sweep-codecs is required");
  }
  for (const Point& p : points) {
    if (p.capacity_blocks == 0) {
      return usage_error(absl::StrCat("--capacity-bytes is smaller than one ", p.codec,
                                      " trace block (", p.block_bytes, " bytes)"));
    }
  }

  std::vector<std::string> policies;
  if (flags.Has("policies")) {
    policies = absl::StrSplit(flags.GetString("policies", ""), ',', absl::SkipEmpty());
  } else if (sweep) {
    policies = {"lru", "prefix_lru", "lfu", "s3fifo", st::kReusePolicyName,
                st::kAdaptivePolicyName};
  } else if (sweep_codecs) {
    policies = {"prefix_lru", st::kReusePolicyName, st::kAdaptivePolicyName};
  } else {
    policies = {flags.GetString("policy", st::kAdaptivePolicyName)};
  }
  if (policies.empty()) return usage_error("--policies: empty");

  std::vector<ReplayTraceReport> reports;
  for (const Input& in : *inputs) {
    ReplayTraceReport rep;
    rep.name = in.name;
    rep.requests = in.trace.requests.size();
    rep.block_refs = in.trace.total_blocks;
    rep.unique_blocks = in.trace.unique_blocks;
    for (const Point& p : points) {
      ReplayRefs ref;
      ref.capacity_blocks = p.capacity_blocks;
      absl::StatusOr<ReplayRow> belady =
          RunSim(in.trace, SimPolicy::kBelady, p.capacity_blocks, settings);
      if (!belady.ok()) return fail(belady.status());
      absl::StatusOr<ReplayRow> inf =
          RunSim(in.trace, SimPolicy::kInfinite, p.capacity_blocks, settings);
      if (!inf.ok()) return fail(inf.status());
      ref.belady = *belady;
      ref.infinite = *inf;
      for (ReplayRow* r : {&ref.belady, &ref.infinite}) {
        r->codec = p.codec;
        r->trace_block_bytes = p.block_bytes;
        r->point = rep.refs.size();
      }
      rep.refs.push_back(ref);
      for (size_t c = 0; c < colds->size(); ++c) {
        Settings s = settings;
        s.cold = (*colds)[c];
        for (const std::string& name : policies) {
          // Policies without a cold tier (s3fifo) run once per capacity.
          absl::StatusOr<SimPolicy> sp = ParseSimPolicy(name);
          if (c > 0 && sp.ok() && !StorePolicyOf(*sp).ok()) continue;
          absl::StatusOr<ReplayRow> row = RunPolicy(in.trace, name, p.capacity_blocks, s);
          if (!row.ok()) return fail(row.status());
          row->trace = in.name;
          row->codec = p.codec;
          row->trace_block_bytes = p.block_bytes;
          row->point = rep.refs.size() - 1;
          rep.rows.push_back(*row);
        }
      }
      if (sweep || sweep_codecs) {
        rep.rows.push_back(ref.belady);
        rep.rows.push_back(ref.infinite);
      }
    }
    reports.push_back(std::move(rep));
  }

  ReplayPrintOptions po;
  po.sweep = sweep;
  po.sweep_codecs = sweep_codecs;
  po.sink_blocks = settings.sink_blocks;
  po.bytes_per_token = TraceBlockBytes(kv::CodecId::kFp16, *layout) / kTraceBlockTokens;
  if (json) {
    PrintReplayJson(reports, po);
  } else {
    if (sweep_codecs) {
      std::printf("equal bytes: %llu per codec; layout %ux%ux%ux%u\n",
                  static_cast<unsigned long long>(points[0].capacity_blocks *
                                                  points[0].block_bytes),
                  layout->num_layers, layout->num_kv_heads, layout->head_dim,
                  layout->tokens_per_block);
    }
    for (const ReplayTraceReport& rep : reports) PrintReplayTable(rep, po);
  }
  if (flags.Has("plot")) {
    const std::string path = flags.GetString("plot", "");
    const std::string svg = ReplaySweepSvg(reports, po);
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr || std::fwrite(svg.data(), 1, svg.size(), f) != svg.size() ||
        std::fclose(f) != 0) {
      std::fprintf(stderr, "kvtier replay: cannot write %s\n", path.c_str());
      return 1;
    }
    if (!json) std::printf("plot: %s\n", path.c_str());
  }
  return 0;
}

}  // namespace kvtier::tools
