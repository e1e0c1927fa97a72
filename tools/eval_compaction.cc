// `kvtier eval compaction`: token compaction (kv/compaction.h) vs attention fidelity
// and needle retrieval on the synthetic K/V generator (docs/codecs-and-compaction.md). The
// generator is used exactly as tools/synthetic_kv.h builds it; needles are planted with
// its own PlantNeedle (one needle per needle topic, at the generator's topic_logit) and
// asked about with its own MakeQuery.
//
// Methods at each budget B (kept tokens per KV head, a fraction of the sequence):
//   random       B tokens uniformly at random per head (no sinks)
//   window_only  the last B tokens (sink_window with n_sink = 0)
//   sink_window  4 sinks + the last B - 4 (StreamingLLM)
//   h2o          4 sinks + (B - 4) / 2 heavy hitters + the rest recent; scores are the
//                attention accumulated over the prompt's queries, causal, summed over the
//                GQA group (estimated from every 8th prompt position weighted by 8, plus
//                every observation-window position)
//   snapkv       4 sinks, observation window 32, max-pool kernel 7, capacity B
//   oracle       per head the top B tokens by attention from the future queries (the decode
//                queries and the needle questions)
// Settings: query-agnostic = the observation window holds ordinary prompt queries (each
// picks the topic of its own token) and the needle question arrives only after
// compression; query-aware = the last 8 window queries are the needle question (they are
// prompt queries, so h2o's accumulated attention sees them too).
// Needles: two per seed, one per generator needle topic, at random positions in the middle
// of the sequence. Headline ("question-only") needles are ordinary tokens whose topic
// component is moved to a needle topic that never occurs in the text, with the same logit
// for a question about them as the generator's own PlantNeedle gives; the generator's
// PlantNeedle needles (which also take the top salience rank, so every query attends to
// them) are reported as salient_needle_recall_*.
// Metrics: attention-output relative error ||o - o_hat|| / ||o|| for the generator's decode
// queries (query-agnostic selections), mean over (layer, head, query); needle recall = share
// of (needle, layer, kv_head, query_head) cases where the full cache retrieves the needle
// (it has the largest attention weight outside the first 4 tokens) that keep the needle in
// the compacted head.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kv/compaction.h"
#include "tools/attention.h"
#include "tools/eval_commands.h"
#include "tools/eval_common.h"
#include "tools/flags.h"
#include "tools/synthetic_kv.h"

namespace kvtier::tools {
namespace {

constexpr char kUsage[] =
    "usage: kvtier eval compaction [--json] [--seed N] [--seeds K] [--layers L] [--seq-len N]\n"
    "  Token compaction on synthetic Llama-3-8B-like K/V (8 KV heads, head_dim 128, GQA 4\n"
    "  query heads per KV head): attention-output relative error and needle recall\n"
    "  (query-aware and query-agnostic) for random, window_only, sink_window, h2o, snapkv\n"
    "  and an oracle at budgets of 10%, 20% and 50% of the tokens, with the generator's\n"
    "  sinks on and off; mean over seeds.\n"
    "  --seed N     first seed (default 1); seeds N..N+K-1 are used\n"
    "  --seeds K    number of seeds (default 3)\n"
    "  --layers L   layers generated (default 2)\n"
    "  --seq-len N  tokens (default 1024)\n"
    "  --json       one JSON object on stdout instead of tables\n";

constexpr uint32_t kSinks = 4;
constexpr uint32_t kObsWindow = 32;
constexpr uint32_t kPoolKernel = 7;
constexpr uint32_t kQuestionTokens = 8;   // window queries that ask about the needle
constexpr uint32_t kH2oQueryStride = 8;   // prompt positions whose queries feed H2O
constexpr double kBudgets[] = {0.10, 0.20, 0.50};
const char* const kMethods[] = {"random", "window_only", "sink_window", "h2o", "snapkv",
                                "oracle"};

struct Options {
  uint64_t seed = 1;
  uint32_t seeds = 3;
  uint32_t layers = 2;
  uint32_t seq_len = 1024;
  bool json = false;
};

// Measurements of one (method, budget) on one seed.
struct Sample {
  double attn_err = 0;
  double recall_aware = 0;
  double recall_agnostic = 0;
  double salient_aware = 0;     // generator PlantNeedle needles (globally salient)
  double salient_agnostic = 0;
};

// Mean and std over seeds of one (method, budget).
struct Row {
  std::string method;
  double budget = 0;
  uint32_t budget_tokens = 0;
  MeanStd attn_err, recall_aware, recall_agnostic, salient_aware, salient_agnostic;
};

struct NeedleCase {
  uint32_t layer, kv_head, query_head, needle;
};

// Everything one seed needs.
struct World {
  const SyntheticKv* g = nullptr;
  kv::KvSequence seq;                       // post-RoPE K/V in compaction order
  uint32_t L = 0, H = 0, D = 0, T = 0, G = 0;
  std::vector<uint32_t> needle_pos;         // per needle
  std::vector<uint32_t> needle_topic;
  std::vector<float> needle_queries;        // [needle][layer][head][qh][d], position T
  std::vector<NeedleCase> cases;            // needles the full cache retrieves
  std::vector<double> ref_out;              // [layer][head][query][d] full attention
};

kv::KvSequence ToSequence(const KvTensors& t) {
  kv::KvSequence s = kv::KvSequence::Zeros(t.num_layers, t.num_kv_heads, t.head_dim, t.seq_len);
  for (uint32_t l = 0; l < t.num_layers; ++l) {
    for (uint32_t h = 0; h < t.num_kv_heads; ++h) {
      std::copy(t.Keys(l, h).begin(), t.Keys(l, h).end(), s.Key(l, h, 0));
      std::copy(t.Values(l, h).begin(), t.Values(l, h).end(), s.Value(l, h, 0));
    }
  }
  return s;
}

// Keys / values of one head of a KvSequence as [tokens][d].
std::span<const float> HeadKeys(const kv::KvSequence& s, uint32_t l, uint32_t h) {
  return {s.Key(l, h, 0), size_t{s.num_tokens} * s.head_dim};
}
std::span<const float> HeadValues(const kv::KvSequence& s, uint32_t l, uint32_t h) {
  return {s.Value(l, h, 0), size_t{s.num_tokens} * s.head_dim};
}

uint64_t QuerySeed(uint64_t seed, uint32_t kind, uint32_t a, uint32_t b) {
  return seed * 1000003ull + kind * 7919ull * 65536ull + a * 65536ull + b;
}

// Observation-window queries [layer][query_head][obs][d] (query_head = kv_head * G + qh).
absl::StatusOr<std::vector<float>> WindowQueries(const World& w, uint64_t seed, bool aware) {
  const SyntheticKv& g = *w.g;
  std::vector<float> q(size_t{w.L} * w.H * w.G * kObsWindow * w.D);
  for (uint32_t l = 0; l < w.L; ++l) {
    for (uint32_t h = 0; h < w.H; ++h) {
      for (uint32_t qh = 0; qh < w.G; ++qh) {
        for (uint32_t j = 0; j < kObsWindow; ++j) {
          const uint32_t pos = w.T - kObsWindow + j;
          uint32_t topic = g.token_topics()[pos];
          if (aware && j >= kObsWindow - kQuestionTokens) {
            topic = w.needle_topic[j % w.needle_topic.size()];
          }
          ASSIGN_OR_RETURN(std::vector<float> v,
                           g.MakeQuery(l, h, qh, topic, pos, QuerySeed(seed, 1, pos, qh)));
          std::copy(v.begin(), v.end(),
                    q.begin() + ((((size_t{l} * w.H + h) * w.G + qh) * kObsWindow) + j) * w.D);
        }
      }
    }
  }
  return q;
}

// H2O accumulated attention [layer][kv_head][token] over every prompt query, causal, summed
// over the group. Estimated: every kH2oQueryStride-th prompt position's query, weighted by
// the stride (an unbiased estimate of the sum over all prompt positions), plus every
// observation-window query with weight 1.
absl::StatusOr<std::vector<float>> H2oScores(const World& w, uint64_t seed,
                                             const std::vector<float>& window_q) {
  const SyntheticKv& g = *w.g;
  std::vector<float> scores(size_t{w.L} * w.H * w.T, 0.0f);
  std::vector<double> weights(w.T);
  for (uint32_t l = 0; l < w.L; ++l) {
    for (uint32_t h = 0; h < w.H; ++h) {
      float* acc = &scores[(size_t{l} * w.H + h) * w.T];
      auto keys = HeadKeys(w.seq, l, h);
      auto add = [&](std::span<const float> q, uint32_t pos, double weight) {
        std::span<double> wt(weights.data(), pos + 1);
        AttentionWeights(q, keys, w.D, wt);
        for (uint32_t t = 0; t <= pos; ++t) acc[t] += static_cast<float>(weight * wt[t]);
      };
      for (uint32_t qh = 0; qh < w.G; ++qh) {
        for (uint32_t pos = kH2oQueryStride - 1; pos < w.T - kObsWindow; pos += kH2oQueryStride) {
          ASSIGN_OR_RETURN(std::vector<float> q,
                           g.MakeQuery(l, h, qh, g.token_topics()[pos], pos,
                                       QuerySeed(seed, 2, pos, qh)));
          add(q, pos, kH2oQueryStride);  // stands for the stride's skipped queries too
        }
        for (uint32_t j = 0; j < kObsWindow; ++j) {
          add(std::span<const float>(window_q).subspan(
                  ((((size_t{l} * w.H + h) * w.G + qh) * kObsWindow) + j) * w.D, w.D),
              w.T - kObsWindow + j, 1.0);
        }
      }
    }
  }
  return scores;
}

// Oracle scores: attention from the future queries (decode queries + needle questions).
std::vector<float> OracleScores(const World& w) {
  std::vector<float> scores(size_t{w.L} * w.H * w.T, 0.0f);
  std::vector<double> weights(w.T);
  const uint32_t nq = w.g->num_queries_per_kv_head();
  for (uint32_t l = 0; l < w.L; ++l) {
    for (uint32_t h = 0; h < w.H; ++h) {
      float* acc = &scores[(size_t{l} * w.H + h) * w.T];
      auto keys = HeadKeys(w.seq, l, h);
      auto add = [&](std::span<const float> q) {
        AttentionWeights(q, keys, w.D, weights);
        for (uint32_t t = 0; t < w.T; ++t) acc[t] += static_cast<float>(weights[t]);
      };
      auto queries = w.g->Queries(l, h);
      for (uint32_t i = 0; i < nq; ++i) add(queries.subspan(size_t{i} * w.D, w.D));
      for (size_t n = 0; n < w.needle_pos.size(); ++n) {
        for (uint32_t qh = 0; qh < w.G; ++qh) {
          add(std::span<const float>(w.needle_queries)
                  .subspan(((((n * w.L + l) * w.H + h) * w.G) + qh) * w.D, w.D));
        }
      }
    }
  }
  return scores;
}

kv::Selection RandomSelection(const World& w, uint32_t budget, uint64_t seed) {
  std::mt19937_64 rng(seed);
  kv::Selection sel;
  sel.num_layers = w.L;
  sel.num_kv_heads = w.H;
  sel.source_tokens = w.T;
  sel.kept = std::min(budget, w.T);
  std::vector<uint32_t> all(w.T);
  for (uint32_t head = 0; head < w.L * w.H; ++head) {
    for (uint32_t t = 0; t < w.T; ++t) all[t] = t;
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<uint32_t> pick(all.begin(), all.begin() + sel.kept);
    std::sort(pick.begin(), pick.end());
    sel.positions.insert(sel.positions.end(), pick.begin(), pick.end());
  }
  return sel;
}

double AttnError(const World& w, const kv::Selection& sel) {
  absl::StatusOr<kv::KvSequence> kept = kv::Gather(w.seq, sel);
  KVTIER_CHECK(kept.ok()) << kept.status().ToString();
  const uint32_t nq = w.g->num_queries_per_kv_head();
  std::vector<double> weights(sel.kept), out(w.D);
  double sum = 0;
  size_t rows = 0;
  for (uint32_t l = 0; l < w.L; ++l) {
    for (uint32_t h = 0; h < w.H; ++h) {
      auto queries = w.g->Queries(l, h);
      for (uint32_t i = 0; i < nq; ++i, ++rows) {
        AttentionWeights(queries.subspan(size_t{i} * w.D, w.D), HeadKeys(*kept, l, h), w.D,
                             weights);
        AttentionOutput(weights, HeadValues(*kept, l, h), w.D, out);
        sum += RelativeL2Error(
            std::span<const double>(w.ref_out).subspan(rows * w.D, w.D), out);
      }
    }
  }
  return sum / static_cast<double>(rows);
}

double NeedleRecall(const World& w, const kv::Selection& sel) {
  if (w.cases.empty()) return NAN;
  size_t kept = 0;
  for (const NeedleCase& c : w.cases) {
    std::span<const uint32_t> pos = sel.Head(c.layer, c.kv_head);
    if (std::binary_search(pos.begin(), pos.end(), w.needle_pos[c.needle])) ++kept;
  }
  return static_cast<double>(kept) / static_cast<double>(w.cases.size());
}

// Needle kinds. kQuestionOnly (the headline numbers): an ordinary token of the sequence
// whose topic component is moved to a needle topic that never occurs in the text, with the
// retrievability of the generator's own needle (logit top-salience + topic_logit for a
// question about it) but only for that question; its salience and noise are untouched, so
// no other query is drawn to it. kSalient: the generator's PlantNeedle, which also gives the
// needle the top salience rank, so every query attends to it (a heavy hitter by
// construction; reported for transparency).
enum class NeedleKind { kQuestionOnly, kSalient };

struct SeedResult {
  std::map<std::pair<std::string, double>, Sample> samples;
  size_t needle_cases = 0, needle_candidates = 0;
  size_t salient_cases = 0;
  double rope_check_err = 0;  // max |RopeRotate(k, -p) - k_pre_rope|
};

std::vector<uint32_t> NeedlePositions(const SyntheticParams& p, uint64_t seed) {
  std::mt19937_64 rng(seed * 7777 + 1);
  const uint32_t lo = 64, hi = p.seq_len - 2 * kObsWindow - 64;
  std::vector<uint32_t> out;
  for (uint32_t n = 0; n < p.needle_topics; ++n) {
    uint32_t pos;
    bool ok;
    do {
      pos = lo + static_cast<uint32_t>(rng() % (hi - lo));
      ok = true;
      for (uint32_t other : out) ok = ok && (pos > other + 16 || other > pos + 16);
    } while (!ok);
    out.push_back(pos);
  }
  return out;
}

// Moves token `pos`'s topic component (pre-RoPE) to `needle_topic` with `logit` worth of
// magnitude, in every head of w.seq.
void PlantQuestionOnlyNeedle(World& w, uint32_t pos, uint32_t needle_topic, double logit) {
  const SyntheticKv& g = *w.g;
  const SyntheticParams& p = g.params();
  const uint32_t old_topic = g.token_topics()[pos];
  for (uint32_t l = 0; l < w.L; ++l) {
    for (uint32_t h = 0; h < w.H; ++h) {
      const HeadLatents& lat = g.latents(l, h);
      auto pre_all = g.kv_pre_rope().Keys(l, h);
      // Key magnitude per unit of logit along a topic direction, measured from the
      // generator's own tokens (mean projection of each token on its topic, noise averages
      // out).
      double proj = 0;
      uint32_t count = 0;
      for (uint32_t t = 1; t < w.T; ++t) {
        const auto& dir = lat.topic_dirs[g.token_topics()[t]];
        double dot = 0;
        for (uint32_t c = 0; c < w.D; ++c) dot += pre_all[size_t{t} * w.D + c] * dir[c];
        proj += dot;
        ++count;
      }
      const double per_logit = proj / count / p.topic_logit;
      std::vector<float> k(pre_all.begin() + size_t{pos} * w.D,
                           pre_all.begin() + size_t{pos + 1} * w.D);
      const auto& old_dir = lat.topic_dirs[old_topic];
      const auto& new_dir = lat.topic_dirs[needle_topic];
      double dot = 0;
      for (uint32_t c = 0; c < w.D; ++c) dot += k[c] * old_dir[c];
      for (uint32_t c = 0; c < w.D; ++c) {
        k[c] += static_cast<float>(-dot * old_dir[c] + logit * per_logit * new_dir[c]);
      }
      kv::RopeRotate(k.data(), w.D, pos, static_cast<float>(p.rope_theta));
      std::copy(k.begin(), k.end(), w.seq.Key(l, h, pos));
    }
  }
}

// Builds the world for one needle kind. `g` must outlive the world.
absl::StatusOr<World> BuildWorld(const SyntheticKv& g, const std::vector<uint32_t>& needles,
                                 NeedleKind kind, uint64_t seed) {
  const SyntheticParams& p = g.params();
  World w;
  w.g = &g;
  w.L = p.layout.num_layers;
  w.H = p.layout.num_kv_heads;
  w.D = p.layout.head_dim;
  w.T = p.seq_len;
  w.G = p.query_heads_per_kv_head;
  w.seq = ToSequence(g.kv());
  w.needle_pos = needles;
  for (uint32_t n = 0; n < needles.size(); ++n) w.needle_topic.push_back(p.num_topics + n);
  if (kind == NeedleKind::kQuestionOnly) {
    const double top_salience =
        p.zipf_exponent * (std::lgamma(static_cast<double>(w.T) + 1) / w.T);
    for (uint32_t n = 0; n < needles.size(); ++n) {
      PlantQuestionOnlyNeedle(w, needles[n], w.needle_topic[n], top_salience + p.topic_logit);
    }
  }
  // Needle questions after compression (position T), and which cases the full cache
  // retrieves.
  w.needle_queries.resize(needles.size() * w.L * w.H * w.G * w.D);
  std::vector<double> weights(w.T);
  for (uint32_t n = 0; n < needles.size(); ++n) {
    for (uint32_t l = 0; l < w.L; ++l) {
      for (uint32_t h = 0; h < w.H; ++h) {
        for (uint32_t qh = 0; qh < w.G; ++qh) {
          ASSIGN_OR_RETURN(std::vector<float> q,
                           g.MakeQuery(l, h, qh, w.needle_topic[n], w.T,
                                       QuerySeed(seed, 3, n, qh)));
          std::copy(q.begin(), q.end(),
                    w.needle_queries.begin() +
                        ((((size_t{n} * w.L + l) * w.H + h) * w.G) + qh) * w.D);
          AttentionWeights(q, HeadKeys(w.seq, l, h), w.D, weights);
          const auto best = std::max_element(weights.begin() + kSinks, weights.end());
          if (static_cast<uint32_t>(best - weights.begin()) == needles[n]) {
            w.cases.push_back({l, h, qh, n});
          }
        }
      }
    }
  }
  // Reference outputs of the decode queries.
  const uint32_t nq = g.num_queries_per_kv_head();
  w.ref_out.resize(size_t{w.L} * w.H * nq * w.D);
  for (uint32_t l = 0; l < w.L; ++l) {
    for (uint32_t h = 0; h < w.H; ++h) {
      auto queries = g.Queries(l, h);
      for (uint32_t i = 0; i < nq; ++i) {
        AttentionWeights(queries.subspan(size_t{i} * w.D, w.D), HeadKeys(w.seq, l, h), w.D,
                             weights);
        AttentionOutput(
            weights, HeadValues(w.seq, l, h), w.D,
            std::span<double>(w.ref_out).subspan(((size_t{l} * w.H + h) * nq + i) * w.D, w.D));
      }
    }
  }
  return w;
}

// Runs every method and budget on one world. Fills attn_err and the recalls of `kind`.
absl::Status EvaluateWorld(const World& w, uint64_t seed, NeedleKind kind,
                           std::map<std::pair<std::string, double>, Sample>* samples) {
  ASSIGN_OR_RETURN(std::vector<float> q_agnostic, WindowQueries(w, seed, false));
  ASSIGN_OR_RETURN(std::vector<float> q_aware, WindowQueries(w, seed, true));
  ASSIGN_OR_RETURN(std::vector<float> h2o_agnostic, H2oScores(w, seed, q_agnostic));
  ASSIGN_OR_RETURN(std::vector<float> h2o_aware, H2oScores(w, seed, q_aware));
  const std::vector<float> oracle = OracleScores(w);

  for (double frac : kBudgets) {
    const uint32_t budget = static_cast<uint32_t>(std::floor(frac * w.T));
    const uint32_t heavy = (budget - kSinks) / 2;
    const uint32_t recent = budget - kSinks - heavy;
    const kv::SnapKvParams snap{.n_sink = kSinks, .obs_window = kObsWindow,
                                .pool_kernel = kPoolKernel, .capacity = budget,
                                .num_query_heads = w.H * w.G};
    for (const char* method : kMethods) {
      const std::string m = method;
      absl::StatusOr<kv::Selection> agnostic, aware;
      if (m == "random") {
        agnostic = RandomSelection(w, budget, seed * 31 + budget);
        aware = agnostic;
      } else if (m == "window_only") {
        agnostic = kv::SelectSinkWindow(w.L, w.H, w.T, {.n_sink = 0, .window = budget});
        aware = agnostic;
      } else if (m == "sink_window") {
        agnostic =
            kv::SelectSinkWindow(w.L, w.H, w.T, {.n_sink = kSinks, .window = budget - kSinks});
        aware = agnostic;
      } else if (m == "h2o") {
        const kv::H2oParams hp{.n_sink = kSinks, .heavy = heavy, .recent = recent};
        agnostic = kv::SelectH2o(w.L, w.H, w.T, hp, h2o_agnostic);
        aware = kv::SelectH2o(w.L, w.H, w.T, hp, h2o_aware);
      } else if (m == "snapkv") {
        agnostic = kv::SelectSnapKv(w.seq, snap, q_agnostic);
        aware = kv::SelectSnapKv(w.seq, snap, q_aware);
      } else {
        agnostic = kv::SelectTopK(w.L, w.H, w.T, 0, budget, 0, oracle);
        aware = agnostic;
      }
      if (!agnostic.ok()) return agnostic.status();
      if (!aware.ok()) return aware.status();
      Sample& s = (*samples)[{m, frac}];
      if (kind == NeedleKind::kQuestionOnly) {
        s.attn_err = AttnError(w, *agnostic);
        s.recall_agnostic = NeedleRecall(w, *agnostic);
        s.recall_aware = NeedleRecall(w, *aware);
      } else {
        s.salient_agnostic = NeedleRecall(w, *agnostic);
        s.salient_aware = NeedleRecall(w, *aware);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SeedResult> RunSeed(const SyntheticParams& base, uint64_t seed,
                                   SyntheticStats* stats) {
  SyntheticParams p = base;
  p.seed = seed;
  ASSIGN_OR_RETURN(SyntheticKv g, SyntheticKv::Generate(p));
  *stats = ComputeStats(g);  // the generator as built, before any needle
  SeedResult result;
  const std::vector<uint32_t> needles = NeedlePositions(p, seed);

  // RoPE convention check: compaction's re-rotation undoes the generator's RoPE.
  const uint32_t d = p.layout.head_dim;
  for (uint32_t t = 1; t < p.seq_len; t += 97) {
    auto post = g.kv().Keys(0, 0).subspan(size_t{t} * d, d);
    std::vector<float> k(post.begin(), post.end());
    kv::RopeRotate(k.data(), d, -static_cast<double>(t), static_cast<float>(p.rope_theta));
    auto pre = g.kv_pre_rope().Keys(0, 0).subspan(size_t{t} * d, d);
    for (uint32_t c = 0; c < d; ++c) {
      result.rope_check_err =
          std::max(result.rope_check_err, static_cast<double>(std::fabs(k[c] - pre[c])));
    }
  }

  {
    ASSIGN_OR_RETURN(World w, BuildWorld(g, needles, NeedleKind::kQuestionOnly, seed));
    result.needle_cases = w.cases.size();
    result.needle_candidates = needles.size() * w.L * w.H * w.G;
    RETURN_IF_ERROR(EvaluateWorld(w, seed, NeedleKind::kQuestionOnly, &result.samples));
  }
  {
    SyntheticKv planted = g;
    for (uint32_t n = 0; n < needles.size(); ++n) {
      RETURN_IF_ERROR(planted.PlantNeedle(needles[n], p.num_topics + n, p.topic_logit));
    }
    ASSIGN_OR_RETURN(World w, BuildWorld(planted, needles, NeedleKind::kSalient, seed));
    result.salient_cases = w.cases.size();
    RETURN_IF_ERROR(EvaluateWorld(w, seed, NeedleKind::kSalient, &result.samples));
  }
  return result;
}

struct Section {
  std::string name;
  std::vector<Row> rows;
  std::vector<SyntheticStats> stats;
  size_t needle_cases = 0, needle_candidates = 0, salient_cases = 0;
  double rope_check_err = 0;
};

absl::StatusOr<Section> RunSection(const Options& opt, const std::string& name,
                                   const SyntheticParams& base) {
  Section sec;
  sec.name = name;
  std::map<std::pair<std::string, double>, std::vector<Sample>> all;
  for (uint32_t i = 0; i < opt.seeds; ++i) {
    SyntheticStats st;
    ASSIGN_OR_RETURN(SeedResult r, RunSeed(base, opt.seed + i, &st));
    sec.stats.push_back(st);
    sec.needle_cases += r.needle_cases;
    sec.salient_cases += r.salient_cases;
    sec.needle_candidates += r.needle_candidates;
    sec.rope_check_err = std::max(sec.rope_check_err, r.rope_check_err);
    for (const auto& [key, s] : r.samples) all[key].push_back(s);
  }
  for (double frac : kBudgets) {
    for (const char* method : kMethods) {
      const auto& v = all[{method, frac}];
      std::vector<double> e, a, g, sa, sg;
      for (const Sample& s : v) {
        e.push_back(s.attn_err);
        if (std::isfinite(s.recall_aware)) a.push_back(s.recall_aware);
        if (std::isfinite(s.recall_agnostic)) g.push_back(s.recall_agnostic);
        if (std::isfinite(s.salient_aware)) sa.push_back(s.salient_aware);
        if (std::isfinite(s.salient_agnostic)) sg.push_back(s.salient_agnostic);
      }
      Row row;
      row.method = method;
      row.budget = frac;
      row.budget_tokens = static_cast<uint32_t>(std::floor(frac * base.seq_len));
      row.attn_err = ComputeMeanStd(e);
      row.recall_aware = ComputeMeanStd(a);
      row.recall_agnostic = ComputeMeanStd(g);
      row.salient_aware = ComputeMeanStd(sa);
      row.salient_agnostic = ComputeMeanStd(sg);
      if (a.empty()) row.recall_aware.mean = NAN;
      if (g.empty()) row.recall_agnostic.mean = NAN;
      if (sa.empty()) row.salient_aware.mean = NAN;
      if (sg.empty()) row.salient_agnostic.mean = NAN;
      sec.rows.push_back(row);
    }
  }
  return sec;
}

std::string Num(double v) { return JsonNumber(v, 4); }

double MeanOf(const std::vector<SyntheticStats>& s, double SyntheticStats::*f) {
  return MeanStdOf(s, f).mean;
}

std::string StatsJson(const Section& sec) {
  const auto& s = sec.stats;
  return absl::StrCat(
      "{\"first_token_share\": ", Num(MeanOf(s, &SyntheticStats::first_token_share)),
      ", \"sparsity_1pct\": ", Num(MeanOf(s, &SyntheticStats::sparsity_1pct)),
      ", \"zipf_slope\": ", Num(MeanOf(s, &SyntheticStats::zipf_slope)),
      ", \"top10pct_attention_mass\": ", Num(MeanOf(s, &SyntheticStats::top10pct_mass)),
      ", \"recent32_share_local_heads\": ",
      Num(MeanOf(s, &SyntheticStats::recent_share_local)),
      ", \"recent32_share_other_heads\": ",
      Num(MeanOf(s, &SyntheticStats::recent_share_other)),
      ", \"key_channel_max_median\": ", Num(MeanOf(s, &SyntheticStats::key_channel_ratio)),
      ", \"needle_cases\": ", sec.needle_cases, ", \"salient_needle_cases\": ",
      sec.salient_cases, ", \"needle_candidates\": ", sec.needle_candidates, ", \"rope_convention_max_abs_err\": ", Num(sec.rope_check_err),
      "}");
}

void PrintSection(const Section& sec) {
  const auto& s = sec.stats;
  std::printf(
      "Generator (%s): first-token attention share %.3f, sparsity(<1%% of max) %.3f, zipf "
      "slope %.2f,\n  top-10%% tokens hold %.3f of attention, recent-32 share local/other "
      "heads %.3f/%.3f,\n  key channel max/median %.1f; the full cache retrieves question-only "
      "needles in %zu and salient needles in %zu of %zu (needle, layer, kv_head, query_head) "
      "cases\n",
      sec.name.c_str(), MeanOf(s, &SyntheticStats::first_token_share),
      MeanOf(s, &SyntheticStats::sparsity_1pct), MeanOf(s, &SyntheticStats::zipf_slope),
      MeanOf(s, &SyntheticStats::top10pct_mass),
      MeanOf(s, &SyntheticStats::recent_share_local),
      MeanOf(s, &SyntheticStats::recent_share_other),
      MeanOf(s, &SyntheticStats::key_channel_ratio), sec.needle_cases, sec.salient_cases,
      sec.needle_candidates);
  std::printf("  %-12s %-7s %-7s %-18s %-15s %-15s %-15s %s\n", "method", "budget%", "tokens",
              "attn_rel_err_mean", "needle_aware", "needle_agnostic", "salient_aware",
              "salient_agnostic");
  for (const Row& r : sec.rows) {
    std::printf("  %-12s %-7.0f %-7u %-18s %-15s %-15s %-15.3f %.3f\n", r.method.c_str(),
                r.budget * 100, r.budget_tokens,
                absl::StrFormat("%.4f±%.4f", r.attn_err.mean, r.attn_err.std).c_str(),
                absl::StrFormat("%.3f±%.3f", r.recall_aware.mean, r.recall_aware.std).c_str(),
                absl::StrFormat("%.3f±%.3f", r.recall_agnostic.mean, r.recall_agnostic.std)
                    .c_str(),
                r.salient_aware.mean, r.salient_agnostic.mean);
  }
}

const Row* FindRow(const Section& s, const std::string& method, double budget) {
  for (const Row& r : s.rows) {
    if (r.method == method && r.budget == budget) return &r;
  }
  return nullptr;
}

int Run(const Options& opt) {
  SyntheticParams base;
  base.layout.num_layers = opt.layers;
  base.seq_len = opt.seq_len;
  SyntheticParams no_sinks = base;
  no_sinks.sinks = false;
  auto on = RunSection(opt, "sinks on", base);
  auto off = on.ok() ? RunSection(opt, "sinks off", no_sinks) : on;
  if (!on.ok() || !off.ok()) {
    std::fprintf(stderr, "kvtier eval compaction: %s\n",
                 (on.ok() ? off.status() : on.status()).ToString().c_str());
    return 1;
  }
  if (opt.json) {
    std::string out = "{\n";
    absl::StrAppend(&out, "  \"config\": {\"layout\": \"", base.layout.DebugString(),
                    "\", \"seq_len\": ", base.seq_len, ", \"query_heads_per_kv_head\": ",
                    base.query_heads_per_kv_head, ", \"seeds\": [");
    for (uint32_t i = 0; i < opt.seeds; ++i) absl::StrAppend(&out, i ? ", " : "", opt.seed + i);
    absl::StrAppend(&out, "], \"n_sink\": ", kSinks, ", \"obs_window\": ", kObsWindow,
                    ", \"pool_kernel\": ", kPoolKernel, ", \"question_tokens\": ",
                    kQuestionTokens, ", \"needles_per_seed\": ", base.needle_topics,
                    ", \"needle_topic_logit\": ", Num(base.topic_logit), "},\n");
    for (const Section* sec : {&*on, &*off}) {
      const bool last = sec == &*off;
      absl::StrAppend(&out, "  \"", sec == &*on ? "sinks_on" : "sinks_off",
                      "\": {\"generator\": ", StatsJson(*sec), ",\n    \"results\": [\n");
      for (size_t i = 0; i < sec->rows.size(); ++i) {
        const Row& r = sec->rows[i];
        absl::StrAppend(&out, "      {\"method\": \"", r.method, "\", \"budget\": ", Num(r.budget),
                        ", \"budget_tokens\": ", r.budget_tokens,
                        ", \"attn_rel_err_mean\": ", Num(r.attn_err.mean),
                        ", \"attn_rel_err_mean_std\": ", Num(r.attn_err.std),
                        ", \"needle_recall_query_aware\": ", Num(r.recall_aware.mean),
                        ", \"needle_recall_query_aware_std\": ", Num(r.recall_aware.std),
                        ", \"needle_recall_agnostic\": ", Num(r.recall_agnostic.mean),
                        ", \"needle_recall_agnostic_std\": ", Num(r.recall_agnostic.std),
                        ", \"salient_needle_recall_query_aware\": ", Num(r.salient_aware.mean),
                        ", \"salient_needle_recall_agnostic\": ", Num(r.salient_agnostic.mean),
                        "}",
                        i + 1 < sec->rows.size() ? ",\n" : "\n");
      }
      absl::StrAppend(&out, "    ]}", last ? "\n" : ",\n");
    }
    out += "}\n";
    std::fputs(out.c_str(), stdout);
    return 0;
  }
  std::printf(
      "kvtier eval compaction: synthetic K/V, layout %s, %u tokens, GQA %u query heads per KV\n"
      "head, seeds %llu..%llu (mean ± std over seeds). Budgets are kept tokens per KV head.\n"
      "n_sink %u; snapkv window %u, max-pool %u; h2o heavy = recent = (budget - 4) / 2;\n"
      "needles: %u per seed. needle_* = question-only needles (an ordinary token moved to a\n"
      "needle topic, logit top-salience + topic_logit %g for its question only); salient_* =\n"
      "the generator's PlantNeedle (also top salience rank). Query-aware = the last %u\n"
      "observation-window queries ask about the needles. RoPE convention check (compaction\n"
      "re-rotation vs generator): max |err| %.2g.\n\n",
      base.layout.DebugString().c_str(), base.seq_len, base.query_heads_per_kv_head,
      static_cast<unsigned long long>(opt.seed),
      static_cast<unsigned long long>(opt.seed + opt.seeds - 1), kSinks, kObsWindow,
      kPoolKernel, base.needle_topics, base.topic_logit, kQuestionTokens, on->rope_check_err);
  PrintSection(*on);
  std::printf("\n");
  PrintSection(*off);
  std::printf("\nSummary at 20%%:\n");
  for (const Section* sec : {&*on, &*off}) {
    const Row* sw = FindRow(*sec, "sink_window", 0.2);
    const Row* wo = FindRow(*sec, "window_only", 0.2);
    std::printf("  %s: sink_window attn err %.4f vs window_only %.4f\n", sec->name.c_str(),
                sw->attn_err.mean, wo->attn_err.mean);
  }
  for (const char* m : {"snapkv", "h2o", "sink_window"}) {
    const Row* r = FindRow(*on, m, 0.2);
    std::printf("  %-11s needle recall query-aware %.3f, query-agnostic %.3f\n", m,
                r->recall_aware.mean, r->recall_agnostic.mean);
  }
  return 0;
}

}  // namespace

int RunEvalCompaction(int argc, char** argv) {
  const tools::Flags flags = tools::Flags::Parse(argc, argv, 1, {"json", "help"});
  if (std::optional<int> rc = CheckEvalArgs(
          flags, "compaction", {"json", "help", "seed", "seeds", "layers", "seq-len"}, kUsage)) {
    return *rc;
  }
  const std::optional<EvalSizes> sizes =
      ParseEvalSizes(flags, "compaction", 64, 1024, 512, 1 << 16);
  if (!sizes) return 2;
  Options opt;
  opt.json = flags.Has("json");
  opt.seed = sizes->seed;
  opt.seeds = sizes->seeds;
  opt.layers = sizes->layers;
  opt.seq_len = sizes->seq_len;
  return Run(opt);
}

}  // namespace kvtier::tools
