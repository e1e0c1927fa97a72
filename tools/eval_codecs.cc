// `kvtier eval codecs`: codec size vs attention fidelity on synthetic K/V
// (docs/codecs-and-compaction.md). Every codec runs through the real kv::Encode / kv::Decode on the blocks of
// the layout; the baseline "pertoken2" (per-token 2-bit for both K and V, groups of 32
// channels, fp16 scale and min: the same bits as kivi2) is simulated here, with the same
// sink protection as the codecs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "kv/codec.h"
#include "kv/half.h"
#include "tools/attention.h"
#include "tools/eval_commands.h"
#include "tools/eval_common.h"
#include "tools/flags.h"
#include "tools/synthetic_kv.h"

namespace kvtier::tools {
namespace {

constexpr char kUsage[] =
    "usage: kvtier eval codecs [--json] [--seed N] [--seeds K] [--layers L]\n"
    "                          [--seq-len N] [--queries Q] [--outlier-ratio R]\n"
    "                          [--query-outlier-scale S]\n"
    "  Builds synthetic Llama-3-8B-like K/V (8 KV heads, head_dim 128, GQA 4 query heads\n"
    "  per KV head, 32-token blocks, block 0 holding the sinks) and reports, per codec and\n"
    "  for the pertoken2 baseline: bits per element (all metadata and the blob header),\n"
    "  ratio vs fp16, K/V reconstruction error, attention-output error (mean, p99), KL of\n"
    "  attention weights and top-8 key recall, as mean +- std over seeds.\n"
    "  --seed N           first seed (default 1); seeds N..N+K-1 are used\n"
    "  --seeds K          number of seeds (default 3)\n"
    "  --layers L         layers generated (default 2; Llama-3-8B has 32)\n"
    "  --seq-len N        tokens (default 1024)\n"
    "  --queries Q        decode queries per query head (default 8)\n"
    "  --outlier-ratio R  key outlier channel magnitude / typical (default 7)\n"
    "  --query-outlier-scale S  query magnitude in the key outlier channels (default 3)\n"
    "  --json             one JSON object on stdout instead of tables\n";

constexpr uint32_t kTopK = 8;
constexpr uint32_t kGroup = 32;

struct Options {
  uint64_t seed = 1;
  uint32_t seeds = 3;
  uint32_t layers = 2;
  uint32_t seq_len = 1024;
  uint32_t queries = 8;
  double outlier_ratio = SyntheticParams().outlier_ratio;
  double query_outlier_scale = 3.0;
  bool json = false;
};

// A codec under test: a real codec or the simulated pertoken2 baseline.
struct Variant {
  std::string name;
  bool pertoken2 = false;
  kv::CodecId codec = kv::CodecId::kFp16;
  bool keep_sinks = true;
  // Quantize keys before RoPE (KVQuant) and apply RoPE after decoding.
  bool pre_rope = false;
};

// One seed's measurements of one variant.
struct Sample {
  double bits = 0;         // blocks other than block 0, including headers
  double bits_block0 = 0;  // block 0 alone
  double bits_all = 0;     // whole sequence
  double bits_l32 = 0;     // a full 32-layer block other than block 0 (EncodedSize)
  double key_rel_err = 0, value_rel_err = 0;
  double attn_mean = 0, attn_p99 = 0, attn_k_only_mean = 0, kl = 0, top8 = 0;
  bool sinks_exact = true;
  uint32_t protected_tokens = 0;
};

// Reference attention (exact K/V) for every decode query of one generated sequence.
struct Reference {
  std::vector<double> weights;  // [layer][head][query][token]
  std::vector<double> outputs;  // [layer][head][query][dim]
};

Reference ComputeReference(const SyntheticKv& g) {
  const auto& p = g.params();
  const uint32_t d = p.layout.head_dim, n = p.seq_len, nq = g.num_queries_per_kv_head();
  Reference ref;
  ref.weights.resize(size_t{p.layout.num_layers} * p.layout.num_kv_heads * nq * n);
  ref.outputs.resize(size_t{p.layout.num_layers} * p.layout.num_kv_heads * nq * d);
  size_t row = 0;
  for (uint32_t l = 0; l < p.layout.num_layers; ++l) {
    for (uint32_t h = 0; h < p.layout.num_kv_heads; ++h) {
      auto queries = g.Queries(l, h);
      for (uint32_t i = 0; i < nq; ++i, ++row) {
        std::span<double> w(ref.weights.data() + row * n, n);
        AttentionWeights(queries.subspan(size_t{i} * d, d), g.kv().Keys(l, h), d, w);
        AttentionOutput(w, g.kv().Values(l, h), d,
                            std::span<double>(ref.outputs.data() + row * d, d));
      }
    }
  }
  return ref;
}

// Payload bytes of pertoken2 for `num_tokens` tokens of which `protected_tokens` are raw.
uint64_t PerToken2Bytes(const kv::Layout& layout, uint32_t num_tokens,
                        uint32_t protected_tokens) {
  const uint64_t d = layout.head_dim, rows = 2ull * layout.num_layers * layout.num_kv_heads;
  const uint64_t groups = (d + kGroup - 1) / kGroup;
  return rows * (uint64_t{protected_tokens} * d * 2 +
                 uint64_t{num_tokens - protected_tokens} * ((d * 2 + 7) / 8 + groups * 4));
}

// pertoken2: every (layer, k|v, head, token) row split into 32-channel groups, each
// quantized to 2 bits asymmetric min-max with fp16 scale and min (KIVI's quantizer, but
// per token for keys too). The first `protected_tokens` tokens are copied raw. Returns
// the decoded raw block and the encoded payload size in bytes (no header).
std::pair<std::string, uint64_t> PerToken2(const std::string& raw, const kv::Layout& layout,
                                           uint32_t num_tokens, uint32_t protected_tokens) {
  std::string out = raw;
  const uint32_t d = layout.head_dim;
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    for (uint32_t which = 0; which < 2; ++which) {
      for (uint32_t h = 0; h < layout.num_kv_heads; ++h) {
        for (uint32_t t = 0; t < num_tokens; ++t) {
          const size_t base = layout.Index(l, which, h, t, 0, num_tokens);
          if (t < protected_tokens) continue;
          for (uint32_t g0 = 0; g0 < d; g0 += kGroup) {
            const uint32_t g1 = std::min(d, g0 + kGroup);
            float x[kGroup];
            for (uint32_t c = g0; c < g1; ++c) {
              uint16_t bits;
              std::memcpy(&bits, out.data() + 2 * (base + c), 2);
              x[c - g0] = kv::DtypeToFloat(layout.dtype, bits);
            }
            float mn = x[0], mx = x[0];
            for (uint32_t i = 1; i < g1 - g0; ++i) {
              mn = std::min(mn, x[i]);
              mx = std::max(mx, x[i]);
            }
            const float scale = kv::HalfToFloat(kv::FloatToHalf((mx - mn) / 3.0f));
            const float min16 = kv::HalfToFloat(kv::FloatToHalf(mn));
            for (uint32_t i = 0; i < g1 - g0; ++i) {
              const float q =
                  scale > 0 ? std::clamp(std::nearbyint((x[i] - min16) / scale), 0.0f, 3.0f)
                            : 0.0f;
              const uint16_t bits = kv::FloatToDtype(layout.dtype, q * scale + min16);
              std::memcpy(out.data() + 2 * (base + g0 + i), &bits, 2);
            }
          }
        }
      }
    }
  }
  return {std::move(out), PerToken2Bytes(layout, num_tokens, protected_tokens)};
}

// Encodes and decodes every block of `g` with `variant`, then measures reconstruction
// and attention fidelity against the exact (fp32) K/V.
absl::StatusOr<Sample> Evaluate(const SyntheticKv& g, const Reference& ref,
                                const Variant& variant) {
  const auto& p = g.params();
  kv::Layout layout = g.layout();
  layout.dtype = (!variant.pertoken2 && variant.codec == kv::CodecId::kBf16)
                     ? kv::Dtype::kBf16
                     : kv::Dtype::kFp16;
  const uint32_t d = layout.head_dim, n = p.seq_len, tpb = layout.tokens_per_block;
  KvTensors recon =
      KvTensors::Zeros(layout.num_layers, layout.num_kv_heads, d, n);
  kv::CodecOptions opts;
  opts.keep_sinks = variant.keep_sinks;
  Sample s;
  uint64_t bytes_rest = 0, elems_rest = 0, bytes0 = 0, elems0 = 0;
  const KvTensors& source = variant.pre_rope ? g.kv_pre_rope() : g.kv();
  for (uint32_t b = 0; b < g.num_blocks(); ++b) {
    const uint32_t tokens = std::min(tpb, n - b * tpb);
    const std::string raw = PackRaw(source, b * tpb, tokens, layout.dtype);
    const uint32_t prot = kv::ProtectedTokens(layout, b, tokens, opts);
    std::string decoded;
    uint64_t bytes = 0;
    if (variant.pertoken2) {
      auto [dec, sz] = PerToken2(raw, layout, tokens, prot);
      decoded = std::move(dec);
      bytes = sz;
    } else {
      ASSIGN_OR_RETURN(std::string blob,
                       kv::Encode(variant.codec, layout, b, kv::AsBytes(raw), opts));
      // EncodedSize is exact for every codec but lossless, whose size depends on the data
      // and for which it is an upper bound.
      const uint64_t expect = kv::EncodedSize(variant.codec, layout, tokens, prot);
      const bool exact = variant.codec != kv::CodecId::kLossless;
      if (exact ? blob.size() != expect : blob.size() > expect) {
        return absl::InternalError(absl::StrCat(variant.name, " block ", b, ": blob is ",
                                                blob.size(), " bytes, EncodedSize says ",
                                                expect));
      }
      bytes = blob.size();
      ASSIGN_OR_RETURN(decoded, kv::DecodeToString(kv::AsBytes(blob)));
    }
    if (decoded.size() != raw.size()) {
      return absl::InternalError(absl::StrCat(variant.name, ": decoded size mismatch"));
    }
    if (b == 0) {
      s.protected_tokens = prot;
      // Sink protection: the protected tokens must decode bit-exactly.
      for (uint32_t l = 0; l < layout.num_layers; ++l) {
        for (uint32_t which = 0; which < 2; ++which) {
          for (uint32_t h = 0; h < layout.num_kv_heads; ++h) {
            const size_t off = 2 * layout.Index(l, which, h, 0, 0, tokens);
            if (std::memcmp(raw.data() + off, decoded.data() + off, size_t{prot} * d * 2) !=
                0) {
              s.sinks_exact = false;
            }
          }
        }
      }
      bytes0 += bytes;
      elems0 += uint64_t{tokens} * layout.ElementsPerToken();
    } else {
      bytes_rest += bytes;
      elems_rest += uint64_t{tokens} * layout.ElementsPerToken();
    }
    RETURN_IF_ERROR(
        UnpackRaw(kv::AsBytes(decoded), layout.dtype, b * tpb, tokens, &recon));
  }
  if (variant.pre_rope) {
    for (uint32_t l = 0; l < layout.num_layers; ++l) {
      for (uint32_t h = 0; h < layout.num_kv_heads; ++h) {
        auto keys = recon.Keys(l, h);
        for (uint32_t t = 0; t < n; ++t) {
          ApplyRope(keys.subspan(size_t{t} * d, d), t, p.rope_theta);
        }
      }
    }
  }
  s.bits = elems_rest ? 8.0 * static_cast<double>(bytes_rest) / static_cast<double>(elems_rest)
                      : 0;
  s.bits_block0 = 8.0 * static_cast<double>(bytes0) / static_cast<double>(elems0);
  {
    kv::Layout full = layout;
    full.num_layers = 32;
    const double elems = static_cast<double>(full.ElementsPerBlock());
    // Lossless has no size formula: its bits per element are those measured above.
    s.bits_l32 = variant.pertoken2
                     ? 8.0 * static_cast<double>(PerToken2Bytes(full, tpb, 0)) / elems
                 : variant.codec == kv::CodecId::kLossless
                     ? s.bits
                     : 8.0 * static_cast<double>(
                                 kv::EncodedSize(variant.codec, full, tpb, 0)) / elems;
  }
  s.bits_all = 8.0 * static_cast<double>(bytes0 + bytes_rest) /
               static_cast<double>(elems0 + elems_rest);
  s.key_rel_err = RelativeL2Error(g.kv().k, recon.k);
  s.value_rel_err = RelativeL2Error(g.kv().v, recon.v);

  const uint32_t nq = g.num_queries_per_kv_head();
  std::vector<double> errs, errs_k;
  std::vector<double> w(n), o(d), o_k(d);
  double kl = 0, top = 0;
  size_t row = 0;
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    for (uint32_t h = 0; h < layout.num_kv_heads; ++h) {
      auto queries = g.Queries(l, h);
      for (uint32_t i = 0; i < nq; ++i, ++row) {
        std::span<const double> w_ref(ref.weights.data() + row * n, n);
        std::span<const double> o_ref(ref.outputs.data() + row * d, d);
        AttentionWeights(queries.subspan(size_t{i} * d, d), recon.Keys(l, h), d, w);
        AttentionOutput(w, recon.Values(l, h), d, o);
        AttentionOutput(w, g.kv().Values(l, h), d, o_k);
        errs.push_back(RelativeL2Error(o_ref, o));
        errs_k.push_back(RelativeL2Error(o_ref, o_k));
        kl += KlDivergence(w_ref, w);
        top += TopKRecall(w_ref, w, kTopK);
      }
    }
  }
  const double rows = static_cast<double>(row);
  s.attn_mean = ComputeMeanStd(errs).mean;
  s.attn_p99 = Percentile(errs, 99);
  s.attn_k_only_mean = ComputeMeanStd(errs_k).mean;
  s.kl = kl / rows;
  s.top8 = top / rows;
  return s;
}

// Mean and std over seeds of each metric of a variant.
struct Summary {
  std::string name;
  std::map<std::string, MeanStd> m;
  bool sinks_exact = true;
  uint32_t protected_tokens = 0;
};

Summary Summarize(const std::string& name, const std::vector<Sample>& samples) {
  Summary out;
  out.name = name;
  auto add = [&](const char* key, double Sample::*field) {
    out.m[key] = MeanStdOf(samples, field);
  };
  add("bits_per_element", &Sample::bits);
  add("bits_per_element_block0", &Sample::bits_block0);
  add("bits_per_element_all_blocks", &Sample::bits_all);
  add("bits_per_element_32_layers", &Sample::bits_l32);
  add("key_rel_err", &Sample::key_rel_err);
  add("value_rel_err", &Sample::value_rel_err);
  add("attn_rel_err_mean", &Sample::attn_mean);
  add("attn_rel_err_p99", &Sample::attn_p99);
  add("attn_rel_err_k_only_mean", &Sample::attn_k_only_mean);
  add("kl", &Sample::kl);
  add("top8_recall", &Sample::top8);
  out.m["ratio_vs_fp16"] = {16.0 / out.m["bits_per_element"].mean, 0.0};
  for (const Sample& s : samples) out.sinks_exact = out.sinks_exact && s.sinks_exact;
  if (!samples.empty()) out.protected_tokens = samples[0].protected_tokens;
  return out;
}

Summary SummarizeStats(const std::string& name, const std::vector<SyntheticStats>& st) {
  Summary out;
  out.name = name;
  auto add = [&](const char* key, double SyntheticStats::*field) {
    out.m[key] = MeanStdOf(st, field);
  };
  add("first_token_share", &SyntheticStats::first_token_share);
  add("first_token_share_sink_layers", &SyntheticStats::first_token_share_sink_layers);
  add("sparsity_1pct", &SyntheticStats::sparsity_1pct);
  add("key_channel_max_median", &SyntheticStats::key_channel_ratio);
  add("key_channel_max_median_pre_rope", &SyntheticStats::key_channel_ratio_pre_rope);
  add("value_channel_max_median", &SyntheticStats::value_channel_ratio);
  add("zipf_slope", &SyntheticStats::zipf_slope);
  add("top10pct_attention_mass", &SyntheticStats::top10pct_mass);
  add("recent32_share_local_heads", &SyntheticStats::recent_share_local);
  add("recent32_share_other_heads", &SyntheticStats::recent_share_other);
  add("sink_value_norm_ratio", &SyntheticStats::sink_value_norm_ratio);
  return out;
}

// Everything measured for one generator setting.
struct Section {
  Summary generator;
  std::vector<Summary> codecs;
};

absl::StatusOr<Section> RunSection(const Options& opt, const SyntheticParams& base,
                                   const std::vector<Variant>& variants) {
  std::vector<std::vector<Sample>> samples(variants.size());
  std::vector<SyntheticStats> stats;
  for (uint32_t i = 0; i < opt.seeds; ++i) {
    SyntheticParams p = base;
    p.seed = opt.seed + i;
    ASSIGN_OR_RETURN(SyntheticKv g, SyntheticKv::Generate(p));
    stats.push_back(ComputeStats(g));
    const Reference ref = ComputeReference(g);
    for (size_t v = 0; v < variants.size(); ++v) {
      ASSIGN_OR_RETURN(Sample s, Evaluate(g, ref, variants[v]));
      samples[v].push_back(s);
    }
  }
  Section sec;
  sec.generator = SummarizeStats("generator", stats);
  for (size_t v = 0; v < variants.size(); ++v) {
    sec.codecs.push_back(Summarize(variants[v].name, samples[v]));
  }
  return sec;
}

std::string Num(double v) { return JsonNumber(v, 6); }

std::string JsonObject(const Summary& s, bool with_name) {
  std::string out = "{";
  if (with_name) absl::StrAppend(&out, "\"name\": \"", s.name, "\", ");
  bool first = true;
  for (const auto& [key, ms] : s.m) {
    if (!first) out += ", ";
    first = false;
    absl::StrAppend(&out, "\"", key, "\": ", Num(ms.mean), ", \"", key, "_std\": ",
                    Num(ms.std));
  }
  if (with_name) {
    absl::StrAppend(&out, ", \"sinks_exact\": ", s.sinks_exact ? "true" : "false",
                    ", \"protected_tokens\": ", s.protected_tokens);
  }
  return out + "}";
}

std::string JsonCodecs(const std::vector<Summary>& codecs) {
  std::string out = "[";
  for (size_t i = 0; i < codecs.size(); ++i) {
    absl::StrAppend(&out, i ? ",\n    " : "\n    ", JsonObject(codecs[i], true));
  }
  return out + "\n  ]";
}

// Pads `s` with spaces to `width` display columns (UTF-8 aware: "±" is one column).
std::string PadTo(const std::string& s, size_t width) {
  size_t cols = 0;
  for (unsigned char c : s) cols += (c & 0xC0) != 0x80 ? 1 : 0;
  return cols >= width ? s + " " : s + std::string(width - cols, ' ');
}

// Formats "mean ± std" with `digits` significant digits.
std::string MeanPm(const MeanStd& ms, int digits = 3) {
  return absl::StrFormat("%.*g ± %.1g", digits, ms.mean, ms.std);
}

void PrintGenerator(const Summary& g, const Summary& g_nosink) {
  auto row = [&](const char* label, const char* key, const std::string& target) {
    std::printf("  %s%s%s\n", PadTo(label, 38).c_str(), PadTo(MeanPm(g.m.at(key)), 20).c_str(),
                target.c_str());
  };
  // Targets: SmolLM2-135M's real K/V (docs/kivi2.md), the literature where it has none.
  row("first-token attention share", "first_token_share",
      absl::StrCat("SmolLM2-135M 0.26 (none in layers 0-11); sinks off: ",
                   MeanPm(g_nosink.m.at("first_token_share"), 2)));
  row("  same, sink layers only", "first_token_share_sink_layers",
      "SmolLM2-135M 0.43 (0.25-0.58), layers 12-29");
  row("share of weights < 1% of row max", "sparsity_1pct", "> 0.95 (H2O 3.1, OPT)");
  row("key channel max/median mean|k|", "key_channel_max_median",
      "SmolLM2-135M 9.5; >> value ratio (KIVI 3)");
  row("  same, pre-RoPE", "key_channel_max_median_pre_rope", "SmolLM2-135M 10.5");
  row("value channel max/median mean|v|", "value_channel_max_median", "SmolLM2-135M 2.9");
  row("zipf slope of accumulated attention", "zipf_slope",
      "power law (H2O 3.2); fit over ranks 2..n/4");
  row("top-10% tokens' share of attention", "top10pct_attention_mass", "heavy hitters");
  row("last-32-token share, local heads", "recent32_share_local_heads", "locality");
  row("last-32-token share, other heads", "recent32_share_other_heads", "");
  row("||v_0|| / median ||v_t||", "sink_value_norm_ratio",
      "SmolLM2-135M 0.22 in sink layers");
}

void PrintCodecTable(const std::vector<Summary>& codecs) {
  const std::vector<std::pair<const char*, const char*>> cols = {
      {"K rel err", "key_rel_err"},
      {"V rel err", "value_rel_err"},
      {"attn err mean", "attn_rel_err_mean"},
      {"attn err p99", "attn_rel_err_p99"},
      {"attn err K-only", "attn_rel_err_k_only_mean"},
      {"KL", "kl"},
      {"top-8 recall", "top8_recall"}};
  std::string header = absl::StrCat("  ", PadTo("codec", 15), PadTo("bits", 8), PadTo("ratio", 7));
  for (const auto& [label, key] : cols) header += PadTo(label, 19);
  std::printf("%s\n", header.c_str());
  for (const Summary& s : codecs) {
    std::string line = absl::StrCat(
        "  ", PadTo(s.name, 15),
        PadTo(absl::StrFormat("%.3f", s.m.at("bits_per_element").mean), 8),
        PadTo(absl::StrFormat("%.2f", s.m.at("ratio_vs_fp16").mean), 7));
    for (const auto& [label, key] : cols) line += PadTo(MeanPm(s.m.at(key)), 19);
    std::printf("%s\n", line.c_str());
  }
}

const Summary* Find(const std::vector<Summary>& v, const std::string& name) {
  for (const Summary& s : v) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

int Run(const Options& opt) {
  SyntheticParams base;
  base.layout.num_layers = opt.layers;
  base.seq_len = opt.seq_len;
  base.queries_per_head = opt.queries;
  base.outlier_ratio = opt.outlier_ratio;
  base.query_outlier_scale = opt.query_outlier_scale;
  if (absl::Status s = base.Validate(); !s.ok()) {
    std::fprintf(stderr, "kvtier eval codecs: %s\n", s.ToString().c_str());
    return 2;
  }

  std::vector<Variant> main_variants;
  for (kv::CodecId c : kv::AllCodecs()) main_variants.push_back({kv::CodecName(c), false, c});
  main_variants.push_back({"pertoken2", true});
  auto section = RunSection(opt, base, main_variants);
  if (!section.ok()) {
    std::fprintf(stderr, "kvtier eval codecs: %s\n", section.status().ToString().c_str());
    return 1;
  }
  // Sink protection off (tokens 0..3 of block 0 quantized like the rest).
  const std::vector<Variant> nosink_variants = {
      {"kivi2", false, kv::CodecId::kKivi2, false},
      {"pertoken2", true, kv::CodecId::kFp16, false},
      {"kivi4", false, kv::CodecId::kKivi4, false},
      {"int8", false, kv::CodecId::kInt8, false}};
  auto unprotected = RunSection(opt, base, nosink_variants);
  // Outlier channels off: KIVI's advantage should mostly disappear.
  SyntheticParams no_out = base;
  no_out.outliers = false;
  const std::vector<Variant> pair_variants = {
      {"kivi2", false, kv::CodecId::kKivi2},
      {"pertoken2", true},
      {"kivi4", false, kv::CodecId::kKivi4},
      {"int4", false, kv::CodecId::kInt4}};
  auto no_outliers = RunSection(opt, no_out, pair_variants);
  // Adversarial: outliers in high-frequency RoPE pairs oscillate after RoPE, which hurts
  // per-channel key groups post-RoPE; quantizing keys before RoPE (KVQuant) avoids it.
  SyntheticParams high_freq = base;
  high_freq.outliers_high_frequency = true;
  const std::vector<Variant> rope_variants = {
      {"kivi2", false, kv::CodecId::kKivi2},
      {"kivi2_prerope", false, kv::CodecId::kKivi2, true, true},
      {"pertoken2", true}};
  auto low_freq_rope = RunSection(opt, base, {rope_variants[1]});
  auto adversarial = RunSection(opt, high_freq, rope_variants);
  // Generator statistics with sinks off (stats only).
  SyntheticParams no_sink = base;
  no_sink.sinks = false;
  auto sinks_off = RunSection(opt, no_sink, {});
  for (const auto* s :
       {&unprotected, &no_outliers, &sinks_off, &low_freq_rope, &adversarial}) {
    if (!s->ok()) {
      std::fprintf(stderr, "kvtier eval codecs: %s\n", s->status().ToString().c_str());
      return 1;
    }
  }

  const kv::Layout& lay = base.layout;
  if (opt.json) {
    std::string out = "{\n";
    absl::StrAppend(&out, "  \"config\": {\"layout\": \"", lay.DebugString(),
                    "\", \"seq_len\": ", opt.seq_len, ", \"query_heads_per_kv_head\": ",
                    base.query_heads_per_kv_head, ", \"queries_per_head\": ", opt.queries,
                    ", \"seeds\": [");
    for (uint32_t i = 0; i < opt.seeds; ++i) {
      absl::StrAppend(&out, i ? ", " : "", opt.seed + i);
    }
    absl::StrAppend(&out, "], \"rope_theta\": ", Num(base.rope_theta),
                    ", \"outlier_channels\": ", base.outlier_channels,
                    ", \"outlier_ratio\": ", Num(base.outlier_ratio),
                    ", \"query_outlier_scale\": ", Num(base.query_outlier_scale),
                    ", \"sink_logit\": ", Num(base.sink_logit),
                    ", \"zipf_exponent\": ", Num(base.zipf_exponent),
                    ", \"num_topics\": ", base.num_topics,
                    ", \"local_head_share\": ", Num(base.local_head_share), "},\n");
    absl::StrAppend(&out, "  \"generator\": ", JsonObject(section->generator, false), ",\n");
    absl::StrAppend(&out, "  \"generator_sinks_off\": ",
                    JsonObject(sinks_off->generator, false), ",\n");
    absl::StrAppend(&out, "  \"codecs\": ", JsonCodecs(section->codecs), ",\n");
    absl::StrAppend(&out, "  \"no_sink_protection\": {\"codecs\": ",
                    JsonCodecs(unprotected->codecs), "},\n");
    absl::StrAppend(&out, "  \"no_outliers\": {\"generator\": ",
                    JsonObject(no_outliers->generator, false),
                    ",\n  \"codecs\": ", JsonCodecs(no_outliers->codecs), "},\n");
    absl::StrAppend(&out, "  \"pre_rope_low_frequency_outliers\": {\"codecs\": ",
                    JsonCodecs(low_freq_rope->codecs), "},\n");
    absl::StrAppend(&out, "  \"high_frequency_outliers\": {\"generator\": ",
                    JsonObject(adversarial->generator, false),
                    ",\n  \"codecs\": ", JsonCodecs(adversarial->codecs), "}\n}\n");
    std::fputs(out.c_str(), stdout);
    return 0;
  }

  std::printf(
      "kvtier eval codecs: synthetic Llama-3-8B-like K/V, layout %s, %u tokens (%u blocks),\n"
      "GQA %u query heads per KV head x %u decode queries, RoPE theta %g, seeds %llu..%llu\n"
      "(mean ± std over %u seeds; errors vs the exact fp32 K/V)\n\n",
      lay.DebugString().c_str(), opt.seq_len,
      (opt.seq_len + lay.tokens_per_block - 1) / lay.tokens_per_block,
      base.query_heads_per_kv_head, opt.queries, base.rope_theta,
      static_cast<unsigned long long>(opt.seed),
      static_cast<unsigned long long>(opt.seed + opt.seeds - 1), opt.seeds);
  std::printf(
      "Generator (notes 7.1, calibrated to SmolLM2-135M (docs/kivi2.md): %u key outlier\n"
      "channels/head at %gx in the lowest-frequency RoPE pairs, sink logit %g in the last\n"
      "%g of layers, %u value channels at %gx, zipf exponent %g, %u topics, %g local heads):\n",
      base.outlier_channels, base.outlier_ratio, base.sink_logit, base.sink_layer_share,
      base.value_outlier_channels, base.value_outlier_ratio, base.zipf_exponent,
      base.num_topics, base.local_head_share);
  PrintGenerator(section->generator, sinks_off->generator);

  std::printf(
      "\nCodecs (bits = encoded bytes incl. scales, mins and blob header per element, blocks "
      "1..n;\nattn err = ||o - o_hat|| / ||o|| per (head, query); K-only = decoded K, exact "
      "V):\n");
  PrintCodecTable(section->codecs);

  std::printf("\nBlock 0 (sink protection keeps the first %u tokens raw):\n",
              section->codecs.empty() ? 0 : section->codecs[0].protected_tokens);
  std::printf("  %-15s%-14s%-14s%-14s%-16s%s\n", "codec", "bits blk 1+", "bits blk 0",
              "bits all", "bits L32 blk", "sinks bit-exact");
  for (const Summary& s : section->codecs) {
    std::printf("  %-15s%-14.4f%-14.4f%-14.4f%-16.5f%s\n", s.name.c_str(),
                s.m.at("bits_per_element").mean, s.m.at("bits_per_element_block0").mean,
                s.m.at("bits_per_element_all_blocks").mean,
                s.m.at("bits_per_element_32_layers").mean, s.sinks_exact ? "yes" : "NO");
  }
  std::printf(
      "  (bits L32 blk: one full 32-layer, 32-token block other than block 0, from "
      "kv::EncodedSize;\n   the blob header is the only thing above the b + 32/G payload "
      "bits)\n");

  std::printf("\nSink protection off (first tokens of block 0 quantized too):\n");
  PrintCodecTable(unprotected->codecs);
  for (const char* name : {"kivi2", "pertoken2"}) {
    const Summary* on = Find(section->codecs, name);
    const Summary* off = Find(unprotected->codecs, name);
    if (on && off) {
      std::printf("  %s: attn err mean %.4g with protection vs %.4g without; KL %.4g vs %.4g\n",
                  name, on->m.at("attn_rel_err_mean").mean,
                  off->m.at("attn_rel_err_mean").mean, on->m.at("kl").mean,
                  off->m.at("kl").mean);
    }
  }

  std::printf("\nKey outlier channels off (same seeds; key channel max/median %s):\n",
              MeanPm(no_outliers->generator.m.at("key_channel_max_median")).c_str());
  PrintCodecTable(no_outliers->codecs);

  auto ratio_line = [](const char* label, const std::vector<Summary>& v) {
    const Summary* k = Find(v, "kivi2");
    const Summary* p = Find(v, "pertoken2");
    if (!k || !p) return;
    std::printf("  %-22s pertoken2/kivi2: key err x%.2f, KL x%.2f, attn err x%.2f\n", label,
                p->m.at("key_rel_err").mean / k->m.at("key_rel_err").mean,
                p->m.at("kl").mean / k->m.at("kl").mean,
                p->m.at("attn_rel_err_mean").mean / k->m.at("attn_rel_err_mean").mean);
  };
  std::printf("\nKIVI vs per-token at equal bits:\n");
  ratio_line("outlier channels on:", section->codecs);
  ratio_line("outlier channels off:", no_outliers->codecs);

  std::printf(
      "\nKeys quantized before RoPE (KVQuant), then rotated; default low-frequency outliers:\n");
  PrintCodecTable(low_freq_rope->codecs);
  std::printf(
      "\nAdversarial: outlier channels in the highest-frequency RoPE pairs (they oscillate\n"
      "after RoPE, so post-RoPE per-channel groups lose; key channel max/median %s):\n",
      MeanPm(adversarial->generator.m.at("key_channel_max_median")).c_str());
  PrintCodecTable(adversarial->codecs);
  return 0;
}

}  // namespace

int RunEvalCodecs(int argc, char** argv) {
  const tools::Flags flags = tools::Flags::Parse(argc, argv, 1, {"json", "help"});
  if (std::optional<int> rc = CheckEvalArgs(flags, "codecs",
                                             {"json", "help", "seed", "seeds", "layers",
                                              "seq-len", "queries", "outlier-ratio",
                                              "query-outlier-scale"},
                                             kUsage)) {
    return *rc;
  }
  const std::optional<EvalSizes> sizes = ParseEvalSizes(flags, "codecs", 128, 1024, 1, 1 << 20);
  if (!sizes) return 2;
  auto queries = flags.GetInt("queries", 8);
  auto ratio = flags.GetDouble("outlier-ratio", SyntheticParams().outlier_ratio);
  auto q_scale = flags.GetDouble("query-outlier-scale", 3.0);
  if (!EvalFlagsParsed("codecs", {queries.status(), ratio.status(), q_scale.status()})) {
    return 2;
  }
  if (*queries < 1 || *queries > 4096) {
    std::fprintf(stderr, "kvtier eval codecs: --queries must be 1..4096\n");
    return 2;
  }
  Options opt;
  opt.json = flags.Has("json");
  opt.seed = sizes->seed;
  opt.seeds = sizes->seeds;
  opt.layers = sizes->layers;
  opt.seq_len = sizes->seq_len;
  opt.queries = static_cast<uint32_t>(*queries);
  opt.outlier_ratio = *ratio;
  opt.query_outlier_scale = *q_scale;
  return Run(opt);
}

}  // namespace kvtier::tools
