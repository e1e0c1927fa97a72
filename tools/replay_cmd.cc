// `kvtier replay`: replays a Mooncake trace (tools/trace.h) against the real TieredStore
// in-process and reports hot-tier hit rates next to infinite capacity and Belady's offline
// optimum (tools/replay.h, tools/cache_sim.h).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/cli/flags.h"
#include "common/strings.h"
#include "storage/eviction_policy_reuse.h"
#include "storage/kv/codec.h"
#include "storage/kv/layout.h"
#include "tools/cache_sim.h"
#include "tools/commands.h"
#include "tools/replay.h"
#include "tools/trace.h"

namespace kvtier::tools {
namespace {

namespace st = ::kvtier::storage;

constexpr uint32_t kTraceBlockTokens = 512;  // Mooncake hash_ids cover 512 tokens each

constexpr char kReplayUsage[] =
    "usage: kvtier replay --trace FILE --capacity-blocks N [--policy P] [flags]\n"
    "       kvtier replay --trace FILE --capacity-bytes SIZE [--codec C] [--layout L] ...\n"
    "       kvtier replay --trace FILE --sweep [--capacities N,N,...] [--policies P,P,...]\n"
    "       kvtier replay --trace FILE --sweep-codecs [--capacity-bytes SIZE] [--layout L]\n"
    "\n"
    "Replays the trace through an in-process TieredStore (RocksDB in a temp dir). A block\n"
    "hits when it is resident in the HOT tier (the cache being sized) at lookup:\n"
    "  hit_rate            blocks hit / blocks requested\n"
    "  prefix_hit_rate     leading run of hit blocks / blocks requested (saved prefill)\n"
    "  infinite_hit_rate   same trace, unbounded capacity\n"
    "  belady_hit_rate     offline optimum (Belady/MIN over block references); an upper\n"
    "                      bound on any policy's (prefix) hit rate; x_belady = prefix/belady\n"
    "Policies: the store's (lru, prefix_lru, lfu, heavy_hitter, ...) run in the store;\n"
    "s3fifo runs in the simulator (engine column). --sim runs everything in the simulator.\n"
    "Flags:\n"
    "  --sweep            every policy at several capacities, plus each trace half\n"
    "                     ([0,n/2) and [n/2,n), warm cache) for hold-out evaluation\n"
    "  --trace-stats      only print the trace's reuse statistics (what reuse_lru bets on)\n"
    "  --sweep-codecs     hit rate per codec at equal bytes (--capacity-bytes, default the\n"
    "                     fp16 size of 5859 trace blocks)\n"
    "  --capacity-bytes   hot bytes; blocks = SIZE / encoded bytes of one 512-token trace\n"
    "                     block in --codec (fp16) and --layout (LxHxDxT, 32x8x128x16)\n"
    "  --history X        cold tier = X x hot size: how the store remembers keys evicted\n"
    "                     from hot (reuse_lru needs it); the simulator uses the same\n"
    "                     window. Default 8\n"
    "  --sink-blocks N    namespace sink_blocks (default 1)\n"
    "  --json, --data-dir DIR\n"
    "Replay payloads use a tiny layout (fp16 1x1x16x4) so the replay is fast; --codec and\n"
    "--layout only size the capacity (kv::EncodedSize).\n";

struct Row {
  std::string policy;
  std::string engine;  // "store" or "sim"
  std::string codec;   // --sweep-codecs / --capacity-bytes only
  uint64_t trace_block_bytes = 0;
  uint64_t capacity_blocks = 0;
  size_t point = 0;  // index of the capacity point (and its Refs) this row belongs to
  SimResult all;
  SimResult halves[2];
};

struct Settings {
  double history = 8.0;
  uint32_t sink_blocks = 1;
  std::string data_dir;
  bool sim = false;
  bool tty = false;
};

void Progress(const std::string& label, size_t done, size_t total) {
  if (total == 0) return;
  const int width = 30;
  const int filled = static_cast<int>(width * done / total);
  std::fprintf(stderr, "\r%-28s [%s%s] %3zu%%", label.c_str(),
               std::string(filled, '=').c_str(), std::string(width - filled, ' ').c_str(),
               done * 100 / total);
  if (done == total) std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
}

absl::StatusOr<Row> RunSim(const Trace& trace, SimPolicy policy, uint64_t capacity,
                           const Settings& s) {
  Row row;
  row.policy = SimPolicyName(policy);
  row.engine = "sim";
  row.capacity_blocks = capacity;
  SimOptions o;
  o.capacity_blocks = capacity;
  o.reuse_history_capacities = s.history;
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

absl::StatusOr<Row> RunStore(const Trace& trace, st::EvictionPolicyKind policy,
                             uint64_t capacity_blocks, const Settings& s) {
  ReplayOptions o;
  o.capacity_blocks = capacity_blocks;
  o.policy = policy;
  o.history_capacities = s.history;
  o.sink_blocks = s.sink_blocks;
  o.data_dir = s.data_dir;
  const std::string label =
      absl::StrCat(st::EvictionPolicyName(policy), " @ ", capacity_blocks, " blocks");
  if (s.tty) o.progress = [label](size_t d, size_t t) { Progress(label, d, t); };
  absl::StatusOr<ReplayResult> r = ReplayTrace(trace, o);
  if (!r.ok()) return r.status();
  Row row;
  row.policy = r->policy;
  row.engine = "store";
  row.capacity_blocks = r->capacity_blocks;
  row.all = r->store;
  row.halves[0] = r->halves[0];
  row.halves[1] = r->halves[1];
  return row;
}

// Runs `name` in the store when the store knows it (and not --sim), else the simulator.
absl::StatusOr<Row> RunPolicy(const Trace& trace, const std::string& name,
                              uint64_t capacity, const Settings& s) {
  absl::StatusOr<st::EvictionPolicyKind> kind = st::ParseEvictionPolicy(name);
  if (!s.sim && kind.ok()) return RunStore(trace, *kind, capacity, s);
  absl::StatusOr<SimPolicy> sp = ParseSimPolicy(name);
  if (!sp.ok()) return absl::InvalidArgumentError(absl::StrCat("--policy: ", sp.status().message()));
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

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

struct Refs {
  uint64_t capacity_blocks = 0;
  Row belady;
  Row infinite;
};

void PrintJson(const std::string& path, const Trace& trace, const std::vector<Row>& rows,
               const std::vector<Refs>& refs, const Settings& s) {
  std::printf(
      "{\n  \"trace\": \"%s\",\n  \"requests\": %zu,\n  \"block_refs\": %llu,\n"
      "  \"unique_blocks\": %llu,\n  \"hit_definition\": \"resident in the hot tier\",\n"
      "  \"history_capacities\": %g,\n  \"sink_blocks\": %u,\n  \"results\": [\n",
      path.c_str(), trace.requests.size(), static_cast<unsigned long long>(trace.total_blocks),
      static_cast<unsigned long long>(trace.unique_blocks), s.history, s.sink_blocks);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const Refs* ref = &refs[r.point];
    std::string codec;
    if (!r.codec.empty()) {
      codec = absl::StrCat("\"codec\": \"", r.codec, "\", \"trace_block_bytes\": ",
                           r.trace_block_bytes, ", ");
    }
    std::printf(
        "    {%s\"capacity_blocks\": %llu, \"policy\": \"%s\", \"engine\": \"%s\", "
        "\"hit_rate\": %.6f, \"prefix_hit_rate\": %.6f, \"infinite_hit_rate\": %.6f, "
        "\"belady_hit_rate\": %.6f, \"prefix_vs_belady\": %.4f, "
        "\"first_half_prefix_hit_rate\": %.6f, \"second_half_prefix_hit_rate\": %.6f, "
        "\"first_half_belady_hit_rate\": %.6f, \"second_half_belady_hit_rate\": %.6f}%s\n",
        codec.c_str(), static_cast<unsigned long long>(r.capacity_blocks), r.policy.c_str(),
        r.engine.c_str(), r.all.HitRate(), r.all.PrefixHitRate(), ref->infinite.all.HitRate(),
        ref->belady.all.HitRate(), Ratio(r.all.PrefixHitRate(), ref->belady.all.HitRate()),
        r.halves[0].PrefixHitRate(), r.halves[1].PrefixHitRate(),
        ref->belady.halves[0].HitRate(), ref->belady.halves[1].HitRate(),
        i + 1 == rows.size() ? "" : ",");
  }
  std::printf("  ]\n}\n");
}

void PrintTableRow(const Row& r, const Row& belady, bool with_halves) {
  std::string codec = r.codec.empty() ? "" : absl::StrCat(r.codec, " ");
  std::printf("%-9s%9llu  %-12s %-5s %7.4f %7.4f %8.3f", codec.c_str(),
              static_cast<unsigned long long>(r.capacity_blocks), r.policy.c_str(),
              r.engine.c_str(), r.all.HitRate(), r.all.PrefixHitRate(),
              Ratio(r.all.PrefixHitRate(), belady.all.HitRate()));
  if (with_halves) {
    std::printf(" | %7.4f %6.3f %7.4f %6.3f", r.halves[0].PrefixHitRate(),
                Ratio(r.halves[0].PrefixHitRate(), belady.halves[0].HitRate()),
                r.halves[1].PrefixHitRate(),
                Ratio(r.halves[1].PrefixHitRate(), belady.halves[1].HitRate()));
  }
  std::printf("\n");
}

}  // namespace

int RunReplay(int argc, char** argv) {
  cli::Flags flags = cli::Flags::Parse(argc, argv, 1,
                             {"json", "sweep", "sweep-codecs", "sim", "trace-stats", "help"});
  if (flags.Has("help")) {
    std::fputs(kReplayUsage, stdout);
    return 0;
  }
  auto usage_error = [](const std::string& msg) {
    std::fprintf(stderr, "kvtier replay: %s\n%s", msg.c_str(), kReplayUsage);
    return 2;
  };
  if (absl::Status s = flags.CheckKnown(
          {"trace", "capacity-blocks", "capacity-bytes", "codec", "layout", "policy",
           "policies", "json", "sweep", "sweep-codecs", "sim", "history", "sink-blocks",
           "data-dir", "capacities", "trace-stats", "help"});
      !s.ok()) {
    return usage_error(std::string(s.message()));
  }
  const std::string path = flags.GetString("trace", "");
  if (path.empty()) return usage_error("--trace is required");
  const bool json = flags.Has("json");
  if (flags.Has("trace-stats")) {
    absl::StatusOr<Trace> trace = ReadTrace(path);
    if (!trace.ok()) {
      std::fprintf(stderr, "kvtier replay: %s\n", std::string(trace.status().message()).c_str());
      return 1;
    }
    const ReuseStats r = ComputeReuseStats(*trace);
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
  const bool sweep = flags.Has("sweep");
  const bool sweep_codecs = flags.Has("sweep-codecs");
  if (sweep && sweep_codecs) return usage_error("--sweep and --sweep-codecs are exclusive");

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
  settings.history = *history;
  settings.sink_blocks = static_cast<uint32_t>(*sink_blocks);

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
    std::string list = flags.GetString("capacities", "1465,2930,5859,11718,23436");
    for (absl::string_view part : absl::StrSplit(list, ',')) {
      uint64_t v = 0;
      if (!absl::SimpleAtoi(part, &v) || v == 0) {
        return usage_error(absl::StrCat("--capacities: bad value '", part, "'"));
      }
      points.push_back({"", 0, v});
    }
  } else if (*cap_blocks > 0) {
    points.push_back({"", 0, static_cast<uint64_t>(*cap_blocks)});
  } else if (*cap_bytes > 0) {
    uint64_t bb = TraceBlockBytes(*codec, *layout);
    points.push_back({kv::CodecName(*codec), bb, *cap_bytes / bb});
  } else {
    return usage_error("--capacity-blocks, --capacity-bytes, --sweep or --sweep-codecs is required");
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
    policies = {"lru", "prefix_lru", "lfu", "s3fifo", st::kReusePolicyName};
  } else if (sweep_codecs) {
    policies = {"prefix_lru", st::kReusePolicyName};
  } else {
    policies = {flags.GetString("policy", "prefix_lru")};
  }
  if (policies.empty()) return usage_error("--policies: empty");

  absl::StatusOr<Trace> trace = ReadTrace(path);
  if (!trace.ok()) {
    std::fprintf(stderr, "kvtier replay: %s\n", std::string(trace.status().message()).c_str());
    return 1;
  }

  std::vector<Row> rows;
  std::vector<Refs> refs;
  for (const Point& p : points) {
    Refs ref;
    ref.capacity_blocks = p.capacity_blocks;
    absl::StatusOr<Row> belady = RunSim(*trace, SimPolicy::kBelady, p.capacity_blocks, settings);
    absl::StatusOr<Row> inf = RunSim(*trace, SimPolicy::kInfinite, p.capacity_blocks, settings);
    if (!belady.ok() || !inf.ok()) {
      std::fprintf(stderr, "kvtier replay: %s\n",
                   std::string((belady.ok() ? inf : belady).status().message()).c_str());
      return 1;
    }
    ref.belady = *belady;
    ref.infinite = *inf;
    for (Row* r : {&ref.belady, &ref.infinite}) {
      r->codec = p.codec;
      r->trace_block_bytes = p.block_bytes;
    }
    ref.belady.point = ref.infinite.point = refs.size();
    refs.push_back(ref);
    for (const std::string& name : policies) {
      absl::StatusOr<Row> row = RunPolicy(*trace, name, p.capacity_blocks, settings);
      if (!row.ok()) {
        std::fprintf(stderr, "kvtier replay: %s\n", std::string(row.status().message()).c_str());
        return absl::IsInvalidArgument(row.status()) ? 2 : 1;
      }
      row->codec = p.codec;
      row->trace_block_bytes = p.block_bytes;
      row->point = refs.size() - 1;
      rows.push_back(*row);
    }
    if (sweep || sweep_codecs) {
      rows.push_back(ref.belady);
      rows.push_back(ref.infinite);
    }
  }

  if (json) {
    PrintJson(path, *trace, rows, refs, settings);
    return 0;
  }
  std::printf("trace: %s (%zu requests, %llu block refs, %llu unique blocks)\n", path.c_str(),
              trace->requests.size(), static_cast<unsigned long long>(trace->total_blocks),
              static_cast<unsigned long long>(trace->unique_blocks));
  std::printf("hit = resident in the HOT tier at lookup; cold tier = %g x hot; sink_blocks %u\n",
              settings.history, settings.sink_blocks);
  if (!sweep && !sweep_codecs) {
    const Row& r = rows[0];
    const Refs& ref = refs[0];
    if (!r.codec.empty()) {
      std::printf("codec: %s (%llu bytes per 512-token block)\n", r.codec.c_str(),
                  static_cast<unsigned long long>(r.trace_block_bytes));
    }
    std::printf("policy: %s (%s)\ncapacity_blocks: %llu\n", r.policy.c_str(), r.engine.c_str(),
                static_cast<unsigned long long>(r.capacity_blocks));
    std::printf("hit_rate: %.4f\nprefix_hit_rate: %.4f\ninfinite_hit_rate: %.4f\n"
                "belady_hit_rate: %.4f\nprefix_vs_belady: %.3f\n",
                r.all.HitRate(), r.all.PrefixHitRate(), ref.infinite.all.HitRate(),
                ref.belady.all.HitRate(), Ratio(r.all.PrefixHitRate(), ref.belady.all.HitRate()));
    return 0;
  }
  if (sweep_codecs) {
    std::printf("equal bytes: %llu per codec; layout %ux%ux%ux%u\n",
                static_cast<unsigned long long>(points[0].capacity_blocks *
                                                points[0].block_bytes),
                layout->num_layers, layout->num_kv_heads, layout->head_dim,
                layout->tokens_per_block);
  }
  std::printf("%-9s%9s  %-12s %-5s %7s %7s %8s", sweep_codecs ? "codec" : "", "capacity",
              "policy", "engine", "hit", "prefix", "x_belady");
  if (sweep) std::printf(" | %7s %6s %7s %6s", "half1", "x_bel", "half2", "x_bel");
  std::printf("\n");
  bool prefix_ge_lru = true;
  bool have_both = false;
  for (size_t i = 0; i < refs.size(); ++i) {
    const Refs& ref = refs[i];
    double lru = -1, plru = -1;
    for (const Row& r : rows) {
      if (r.point != i) continue;
      if (r.policy == "lru") lru = r.all.PrefixHitRate();
      if (r.policy == "prefix_lru") plru = r.all.PrefixHitRate();
      PrintTableRow(r, ref.belady, sweep);
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
  return 0;
}

}  // namespace kvtier::tools
