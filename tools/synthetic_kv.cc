#include "tools/synthetic_kv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kv/half.h"
#include "tools/attention.h"

namespace kvtier::tools {
namespace {

// Magnitudes of the query's latent components, in units of the per-channel std of key
// noise (1). Key components are scaled from the requested logits through them, so the
// logit targets hold whatever these are; they only set how large keys vs queries are.
constexpr double kQueryGain = 4.0;
constexpr double kQueryPrivateGain = 2.0;
constexpr double kQueryNoiseStd = 1.0;
constexpr double kOutlierJitter = 0.1;  // per-token relative jitter of outlier channels
constexpr uint32_t kRecentWindow = 32;

// Small deterministic generator (SplitMix64) with Box-Muller normals, so sequences are
// identical on every platform and standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1).
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  double Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = Uniform(), u2 = Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2 * M_PI * u2);
  }
  uint32_t Below(uint32_t n) { return static_cast<uint32_t>(Next() % n); }

 private:
  uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0;
};

uint64_t StreamSeed(uint64_t seed, uint64_t tag, uint64_t a, uint64_t b) {
  Rng r(seed ^ (tag * 0x632be59bd9b4e019ull));
  r.Next();
  Rng r2(r.Next() ^ (a * 0x8cb92ba72f3d8dd7ull) ^ (b * 0xd6e8feb86659fd93ull));
  r2.Next();
  return r2.Next();
}

// Channel bands of the half-split RoPE convention: pair i = channels (i, i + d/2) with
// frequency theta^(-2i/d), so larger i = lower frequency.
struct Bands {
  std::vector<uint32_t> content;   // lowest-frequency 3/8 of the pairs
  std::vector<uint32_t> local;     // highest-frequency 1/4 of the pairs
  std::vector<uint32_t> outlier_low;   // lowest-frequency 1/8 of the pairs
  std::vector<uint32_t> outlier_high;  // highest-frequency 1/8 of the pairs
};

Bands MakeBands(uint32_t head_dim) {
  const uint32_t pairs = head_dim / 2;
  auto band = [&](uint32_t first_pair, uint32_t end_pair) {
    std::vector<uint32_t> ch;
    for (uint32_t i = first_pair; i < end_pair; ++i) {
      ch.push_back(i);
      ch.push_back(i + pairs);
    }
    return ch;
  };
  const uint32_t content_pairs = std::max<uint32_t>(1, pairs * 3 / 8);
  const uint32_t local_pairs = std::max<uint32_t>(1, pairs / 4);
  const uint32_t outlier_pairs = std::max<uint32_t>(1, pairs / 8);
  return Bands{band(pairs - content_pairs, pairs), band(0, local_pairs),
               band(pairs - outlier_pairs, pairs), band(0, outlier_pairs)};
}

// Random unit vectors supported on `channels`, Gram-Schmidt orthogonalized in order.
std::vector<std::vector<float>> OrthonormalDirs(Rng& rng, uint32_t count, uint32_t head_dim,
                                                const std::vector<uint32_t>& channels) {
  std::vector<std::vector<double>> dirs;
  for (uint32_t n = 0; n < count; ++n) {
    std::vector<double> v(head_dim, 0.0);
    for (uint32_t c : channels) v[c] = rng.Normal();
    for (const auto& u : dirs) {
      double dot = 0;
      for (uint32_t c = 0; c < head_dim; ++c) dot += v[c] * u[c];
      for (uint32_t c = 0; c < head_dim; ++c) v[c] -= dot * u[c];
    }
    double norm = 0;
    for (double x : v) norm += x * x;
    norm = std::sqrt(norm);
    for (double& x : v) x /= norm;
    dirs.push_back(std::move(v));
  }
  std::vector<std::vector<float>> out;
  for (const auto& d : dirs) out.emplace_back(d.begin(), d.end());
  return out;
}

void AddScaled(std::span<float> dst, const std::vector<float>& dir, double scale) {
  for (size_t c = 0; c < dst.size(); ++c) dst[c] += static_cast<float>(scale * dir[c]);
}

}  // namespace

absl::Status SyntheticParams::Validate() const {
  if (absl::Status s = layout.Validate(); !s.ok()) return s;
  if (seq_len == 0) return absl::InvalidArgumentError("seq_len must be > 0");
  if (query_heads_per_kv_head == 0) {
    return absl::InvalidArgumentError("query_heads_per_kv_head must be > 0");
  }
  if (queries_per_head == 0) {
    return absl::InvalidArgumentError("queries_per_head must be > 0");
  }
  if (!(rope_theta > 1)) return absl::InvalidArgumentError("rope_theta must be > 1");
  if (layout.head_dim < 16) {
    return absl::InvalidArgumentError("layout.head_dim must be >= 16 for the generator");
  }
  if (outliers && outlier_channels > 2 * std::max<uint32_t>(1, layout.head_dim / 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("outlier_channels must be <= head_dim / 8, got ", outlier_channels));
  }
  if (!(sink_layer_share >= 0 && sink_layer_share <= 1)) {
    return absl::InvalidArgumentError("sink_layer_share must be in [0, 1]");
  }
  if (value_outlier_channels > layout.head_dim / 8 || !(value_outlier_ratio > 0)) {
    return absl::InvalidArgumentError(
        "value_outlier_channels must be <= head_dim / 8 and value_outlier_ratio > 0");
  }
  if (!(local_head_share >= 0 && local_head_share <= 1)) {
    return absl::InvalidArgumentError("local_head_share must be in [0, 1]");
  }
  if (num_topics == 0) return absl::InvalidArgumentError("num_topics must be > 0");
  if (topic_segment_tokens == 0) {
    return absl::InvalidArgumentError("topic_segment_tokens must be > 0");
  }
  const uint32_t content_dim = 2 * std::max<uint32_t>(1, layout.head_dim / 2 * 3 / 8);
  if (2 + num_topics + needle_topics + query_heads_per_kv_head > content_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_topics + needle_topics + query_heads_per_kv_head must be <= ", content_dim - 2,
        " for head_dim ", layout.head_dim));
  }
  return absl::OkStatus();
}

KvTensors KvTensors::Zeros(uint32_t num_layers, uint32_t num_kv_heads, uint32_t head_dim,
                           uint32_t seq_len) {
  KvTensors t;
  t.num_layers = num_layers;
  t.num_kv_heads = num_kv_heads;
  t.head_dim = head_dim;
  t.seq_len = seq_len;
  const size_t n = size_t{num_layers} * num_kv_heads * seq_len * head_dim;
  t.k.assign(n, 0.0f);
  t.v.assign(n, 0.0f);
  return t;
}

std::string PackRaw(const KvTensors& kv, uint32_t first_token, uint32_t num_tokens,
                    kv::Dtype dtype) {
  const uint32_t d = kv.head_dim;
  std::string out(size_t{kv.num_layers} * 2 * kv.num_kv_heads * num_tokens * d * 2, '\0');
  uint16_t* dst = reinterpret_cast<uint16_t*>(out.data());
  std::vector<uint16_t> tmp(size_t{num_tokens} * d);
  for (uint32_t l = 0; l < kv.num_layers; ++l) {
    for (uint32_t which = 0; which < 2; ++which) {
      for (uint32_t h = 0; h < kv.num_kv_heads; ++h) {
        const float* src = (which == 0 ? kv.k.data() : kv.v.data()) + kv.HeadOffset(l, h) +
                           size_t{first_token} * d;
        kv::FloatToDtypeN(dtype, src, tmp.data(), tmp.size());
        std::memcpy(dst, tmp.data(), tmp.size() * 2);
        dst += tmp.size();
      }
    }
  }
  return out;
}

absl::Status UnpackRaw(std::span<const uint8_t> raw, kv::Dtype dtype, uint32_t first_token,
                       uint32_t num_tokens, KvTensors* kv) {
  const uint32_t d = kv->head_dim;
  const size_t expect = size_t{kv->num_layers} * 2 * kv->num_kv_heads * num_tokens * d * 2;
  if (raw.size() != expect) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw size ", raw.size(), " does not match ", expect));
  }
  if (uint64_t{first_token} + num_tokens > kv->seq_len) {
    return absl::InvalidArgumentError("token range exceeds kv seq_len");
  }
  std::vector<uint16_t> tmp(size_t{num_tokens} * d);
  const uint8_t* src = raw.data();
  for (uint32_t l = 0; l < kv->num_layers; ++l) {
    for (uint32_t which = 0; which < 2; ++which) {
      for (uint32_t h = 0; h < kv->num_kv_heads; ++h) {
        std::memcpy(tmp.data(), src, tmp.size() * 2);
        src += tmp.size() * 2;
        float* dst = (which == 0 ? kv->k.data() : kv->v.data()) + kv->HeadOffset(l, h) +
                     size_t{first_token} * d;
        kv::DtypeToFloatN(dtype, tmp.data(), dst, tmp.size());
      }
    }
  }
  return absl::OkStatus();
}

void ApplyRope(std::span<float> vec, double position, double theta) {
  const size_t pairs = vec.size() / 2;
  for (size_t i = 0; i < pairs; ++i) {
    const double freq =
        std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(vec.size()));
    const double angle = position * freq;
    const double c = std::cos(angle), s = std::sin(angle);
    const double x0 = vec[i], x1 = vec[i + pairs];
    vec[i] = static_cast<float>(x0 * c - x1 * s);
    vec[i + pairs] = static_cast<float>(x0 * s + x1 * c);
  }
}

absl::StatusOr<SyntheticKv> SyntheticKv::Generate(const SyntheticParams& params) {
  if (absl::Status s = params.Validate(); !s.ok()) return s;
  SyntheticKv g;
  g.params_ = params;
  const kv::Layout& lay = params.layout;
  const uint32_t d = lay.head_dim, n = params.seq_len, L = lay.num_layers,
                 H = lay.num_kv_heads;
  g.kv_ = KvTensors::Zeros(L, H, d, n);
  g.kv_pre_rope_ = KvTensors::Zeros(L, H, d, n);
  g.key_noise_.assign(size_t{L} * H * n * d, 0.0f);
  g.salience_ranks_.assign(size_t{L} * H * n, 0);
  const uint32_t nq = g.num_queries_per_kv_head();
  g.queries_.assign(size_t{L} * H * nq * d, 0.0f);
  g.query_topics_.assign(size_t{L} * H * nq, 0);
  const Bands bands = MakeBands(d);
  const double sqrt_d = std::sqrt(static_cast<double>(d));

  // Topic segments: shared by all heads (it is one text).
  {
    Rng rng(StreamSeed(params.seed, 1, 0, 0));
    g.token_topics_.resize(n);
    uint32_t t = 0;
    while (t < n) {
      const uint32_t len = std::max<uint32_t>(
          1, static_cast<uint32_t>(
                 std::lround(-static_cast<double>(params.topic_segment_tokens) *
                             std::log(rng.Uniform()))));
      const uint32_t topic = rng.Below(params.num_topics);
      for (uint32_t i = 0; i < len && t < n; ++i) g.token_topics_[t++] = topic;
    }
  }

  const double mean_ln_rank = std::lgamma(static_cast<double>(n) + 1) / n;
  g.latents_.resize(size_t{L} * H);
  const uint32_t sink_layers =
      params.sinks ? std::clamp<uint32_t>(static_cast<uint32_t>(std::lround(
                                              params.sink_layer_share * L)),
                                          1, L)
                   : 0;
  for (uint32_t l = 0; l < L; ++l) {
    const bool layer_sink = l >= L - sink_layers;
    // Which heads of this layer are local.
    std::vector<uint32_t> perm(H);
    std::iota(perm.begin(), perm.end(), 0u);
    Rng lrng(StreamSeed(params.seed, 2, l, 0));
    for (uint32_t i = H; i > 1; --i) std::swap(perm[i - 1], perm[lrng.Below(i)]);
    const uint32_t num_local =
        static_cast<uint32_t>(std::lround(params.local_head_share * H));
    for (uint32_t h = 0; h < H; ++h) {
      HeadLatents& lat = g.latents_[size_t{l} * H + h];
      lat.local = std::find(perm.begin(), perm.begin() + num_local, h) !=
                  perm.begin() + num_local;
      lat.sink = layer_sink;
      Rng rng(StreamSeed(params.seed, 3, l, h));
      const uint32_t num_topic_dirs = params.num_topics + params.needle_topics;
      auto dirs = OrthonormalDirs(
          rng, 2 + num_topic_dirs + params.query_heads_per_kv_head, d, bands.content);
      lat.sink_dir = dirs[0];
      lat.salience_dir = dirs[1];
      lat.topic_dirs.assign(dirs.begin() + 2, dirs.begin() + 2 + num_topic_dirs);
      lat.private_dirs.assign(dirs.begin() + 2 + num_topic_dirs, dirs.end());
      lat.local_dir = OrthonormalDirs(rng, 1, d, bands.local)[0];
      if (params.outliers) {
        std::vector<uint32_t> cand =
            params.outliers_high_frequency ? bands.outlier_high : bands.outlier_low;
        for (uint32_t i = static_cast<uint32_t>(cand.size()); i > 1; --i) {
          std::swap(cand[i - 1], cand[rng.Below(i)]);
        }
        lat.outlier_channels.assign(cand.begin(), cand.begin() + params.outlier_channels);
        std::sort(lat.outlier_channels.begin(), lat.outlier_channels.end());
        for (size_t i = 0; i < lat.outlier_channels.size(); ++i) {
          const double sign = rng.Uniform() < 0.5 ? -1.0 : 1.0;
          lat.outlier_values.push_back(
              static_cast<float>(sign * params.outlier_ratio * rng.Uniform(0.7, 1.3)));
        }
      }
      for (uint32_t j = 0; j < params.query_heads_per_kv_head; ++j) {
        lat.sink_gain.push_back(kQueryGain * rng.Uniform(0.75, 1.25));
        lat.salience_gain.push_back(kQueryGain * rng.Uniform(0.75, 1.25));
        lat.topic_gain.push_back(kQueryGain * rng.Uniform(0.75, 1.25));
      }

      // Salience ranks: a random permutation of 1..n.
      uint32_t* ranks = g.salience_ranks_.data() + (size_t{l} * H + h) * n;
      std::iota(ranks, ranks + n, 1u);
      for (uint32_t i = n; i > 1; --i) std::swap(ranks[i - 1], ranks[rng.Below(i)]);

      // Keys: the base (noise, outliers, local vector, sink bias) is kept for needles.
      float* base_all = g.key_noise_.data() + g.kv_.HeadOffset(l, h);
      const double local_amp = std::sqrt(params.local_logit * sqrt_d);
      for (uint32_t t = 0; t < n; ++t) {
        std::span<float> base(base_all + size_t{t} * d, d);
        for (uint32_t c = 0; c < d; ++c) base[c] = static_cast<float>(rng.Normal());
        for (size_t i = 0; i < lat.outlier_channels.size(); ++i) {
          base[lat.outlier_channels[i]] +=
              lat.outlier_values[i] * static_cast<float>(1 + kOutlierJitter * rng.Normal());
        }
        if (lat.local) AddScaled(base, lat.local_dir, local_amp);
        if (lat.sink && t == 0) {
          AddScaled(base, lat.sink_dir, params.sink_logit * sqrt_d / kQueryGain);
        }
        const double salience =
            -params.zipf_exponent * (std::log(static_cast<double>(ranks[t])) - mean_ln_rank);
        g.BuildKey(l, h, t, salience, g.token_topics_[t], params.topic_logit, base.data());
      }
      // Values: a few larger channels; the sink's value is small.
      std::vector<double> channel_std(d, 1.0);
      {
        std::vector<uint32_t> ch(d);
        std::iota(ch.begin(), ch.end(), 0u);
        for (uint32_t i = 0; i < params.value_outlier_channels; ++i) {
          std::swap(ch[i], ch[i + rng.Below(d - i)]);
          channel_std[ch[i]] = params.value_outlier_ratio;
        }
      }
      std::span<float> vals = g.kv_.Values(l, h);
      for (uint32_t t = 0; t < n; ++t) {
        const double scale = lat.sink && t == 0 ? params.sink_value_scale : 1.0;
        for (uint32_t c = 0; c < d; ++c) {
          vals[size_t{t} * d + c] = static_cast<float>(scale * channel_std[c] * rng.Normal());
        }
      }
      std::copy(vals.begin(), vals.end(), g.kv_pre_rope_.Values(l, h).begin());

      // Decode queries.
      Rng qrng(StreamSeed(params.seed, 4, l, h));
      for (uint32_t j = 0; j < params.query_heads_per_kv_head; ++j) {
        for (uint32_t m = 0; m < params.queries_per_head; ++m) {
          const uint32_t idx = j * params.queries_per_head + m;
          const uint32_t topic = qrng.Below(params.num_topics);
          auto q = g.MakeQuery(l, h, j, topic, g.query_position(), qrng.Next());
          std::copy(q->begin(), q->end(),
                    g.queries_.begin() + ((size_t{l} * H + h) * nq + idx) * d);
          g.query_topics_[(size_t{l} * H + h) * nq + idx] = topic;
        }
      }
    }
  }
  return g;
}

void SyntheticKv::BuildKey(uint32_t layer, uint32_t head, uint32_t token,
                           double salience_logit, uint32_t topic, double topic_logit,
                           float* base) {
  const uint32_t d = params_.layout.head_dim;
  const double sqrt_d = std::sqrt(static_cast<double>(d));
  const HeadLatents& lat = latents(layer, head);
  std::span<float> pre(kv_pre_rope_.Keys(layer, head).data() + size_t{token} * d, d);
  std::copy(base, base + d, pre.begin());
  AddScaled(pre, lat.salience_dir, salience_logit * sqrt_d / kQueryGain);
  AddScaled(pre, lat.topic_dirs[topic], topic_logit * sqrt_d / kQueryGain);
  std::span<float> post(kv_.Keys(layer, head).data() + size_t{token} * d, d);
  std::copy(pre.begin(), pre.end(), post.begin());
  ApplyRope(post, token, params_.rope_theta);
}

std::span<const float> SyntheticKv::Queries(uint32_t layer, uint32_t kv_head) const {
  const size_t nq = num_queries_per_kv_head(), d = params_.layout.head_dim;
  return {queries_.data() + (size_t{layer} * params_.layout.num_kv_heads + kv_head) * nq * d,
          nq * d};
}

std::span<const uint32_t> SyntheticKv::QueryTopics(uint32_t layer, uint32_t kv_head) const {
  const size_t nq = num_queries_per_kv_head();
  return {query_topics_.data() + (size_t{layer} * params_.layout.num_kv_heads + kv_head) * nq,
          nq};
}

std::span<const uint32_t> SyntheticKv::SalienceRanks(uint32_t layer, uint32_t kv_head) const {
  const size_t n = params_.seq_len;
  return {salience_ranks_.data() + (size_t{layer} * params_.layout.num_kv_heads + kv_head) * n,
          n};
}

absl::StatusOr<std::vector<float>> SyntheticKv::MakeQuery(uint32_t layer, uint32_t kv_head,
                                                          uint32_t query_head, uint32_t topic,
                                                          uint32_t position,
                                                          uint64_t seed) const {
  const kv::Layout& lay = params_.layout;
  if (layer >= lay.num_layers) return absl::InvalidArgumentError("layer out of range");
  if (kv_head >= lay.num_kv_heads) return absl::InvalidArgumentError("kv_head out of range");
  if (query_head >= params_.query_heads_per_kv_head) {
    return absl::InvalidArgumentError("query_head out of range");
  }
  if (topic >= params_.num_topics + params_.needle_topics) {
    return absl::InvalidArgumentError("topic out of range");
  }
  const uint32_t d = lay.head_dim;
  const HeadLatents& lat = latents(layer, kv_head);
  Rng rng(StreamSeed(seed, 5, layer, kv_head));
  std::vector<float> q(d);
  for (float& x : q) x = static_cast<float>(kQueryNoiseStd * rng.Normal());
  if (lat.sink) AddScaled(q, lat.sink_dir, lat.sink_gain[query_head]);
  AddScaled(q, lat.salience_dir, lat.salience_gain[query_head]);
  AddScaled(q, lat.topic_dirs[topic], lat.topic_gain[query_head]);
  AddScaled(q, lat.private_dirs[query_head], kQueryPrivateGain);
  if (lat.local) {
    AddScaled(q, lat.local_dir, std::sqrt(params_.local_logit * std::sqrt(static_cast<double>(d))));
  }
  for (size_t i = 0; i < lat.outlier_channels.size(); ++i) {
    q[lat.outlier_channels[i]] +=
        static_cast<float>(std::copysign(params_.query_outlier_scale, lat.outlier_values[i]));
  }
  ApplyRope(q, position, params_.rope_theta);
  return q;
}

absl::Status SyntheticKv::PlantNeedle(uint32_t position, uint32_t topic, double topic_logit) {
  if (position >= params_.seq_len) return absl::InvalidArgumentError("position out of range");
  if (params_.sinks && position == 0) {
    return absl::InvalidArgumentError("position 0 is the sink token");
  }
  if (topic >= params_.num_topics + params_.needle_topics) {
    return absl::InvalidArgumentError("topic out of range");
  }
  const uint32_t n = params_.seq_len, d = params_.layout.head_dim;
  const double top_salience =
      params_.zipf_exponent * (std::lgamma(static_cast<double>(n) + 1) / n);
  token_topics_[position] = topic;
  for (uint32_t l = 0; l < params_.layout.num_layers; ++l) {
    for (uint32_t h = 0; h < params_.layout.num_kv_heads; ++h) {
      float* base = key_noise_.data() + kv_.HeadOffset(l, h) + size_t{position} * d;
      BuildKey(l, h, position, top_salience, topic, topic_logit, base);
    }
  }
  return absl::OkStatus();
}

uint32_t SyntheticKv::num_blocks() const {
  const uint32_t tpb = params_.layout.tokens_per_block;
  return (params_.seq_len + tpb - 1) / tpb;
}

std::string SyntheticKv::RawBlock(uint32_t block_index, kv::Dtype dtype) const {
  const uint32_t tpb = params_.layout.tokens_per_block;
  const uint32_t first = block_index * tpb;
  return PackRaw(kv_, first, std::min(tpb, params_.seq_len - first), dtype);
}

SyntheticStats ComputeStats(const SyntheticKv& g) {
  const SyntheticParams& p = g.params();
  const uint32_t d = p.layout.head_dim, n = p.seq_len;
  const uint32_t nq = g.num_queries_per_kv_head();
  SyntheticStats s;
  double recent_local = 0, recent_other = 0;
  uint64_t n_local = 0, n_other = 0, n_rows = 0, n_heads = 0, n_sink_rows = 0, n_sink_heads = 0;
  std::vector<double> w(n), acc(n);
  std::vector<double> norms(n);
  for (uint32_t l = 0; l < p.layout.num_layers; ++l) {
    for (uint32_t h = 0; h < p.layout.num_kv_heads; ++h) {
      const bool local = g.latents(l, h).local;
      const bool sink = g.latents(l, h).sink;
      auto keys = g.kv().Keys(l, h);
      auto queries = g.Queries(l, h);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (uint32_t i = 0; i < nq; ++i) {
        AttentionWeights(queries.subspan(size_t{i} * d, d), keys, d, w);
        s.first_token_share += w[0];
        if (sink) {
          s.first_token_share_sink_layers += w[0];
          ++n_sink_rows;
        }
        s.sparsity_1pct += SparsityBelow(w, 0.01);
        double recent = 0;
        for (uint32_t t = n > kRecentWindow ? n - kRecentWindow : 0; t < n; ++t) recent += w[t];
        (local ? recent_local : recent_other) += recent;
        (local ? n_local : n_other) += 1;
        for (uint32_t t = 0; t < n; ++t) acc[t] += w[t];
        ++n_rows;
      }
      s.zipf_slope += ZipfSlope(acc, 2, std::max<uint32_t>(3, n / 4));
      std::vector<double> sorted = acc;
      std::sort(sorted.begin(), sorted.end(), std::greater<double>());
      const uint32_t top = std::max<uint32_t>(1, n / 10);
      s.top10pct_mass += std::accumulate(sorted.begin(), sorted.begin() + top, 0.0) /
                         std::accumulate(sorted.begin(), sorted.end(), 0.0);
      s.key_channel_ratio += ChannelMaxMedianRatio(keys, n, d);
      s.key_channel_ratio_pre_rope += ChannelMaxMedianRatio(g.kv_pre_rope().Keys(l, h), n, d);
      auto vals = g.kv().Values(l, h);
      s.value_channel_ratio += ChannelMaxMedianRatio(vals, n, d);
      for (uint32_t t = 0; t < n; ++t) {
        double ss = 0;
        for (uint32_t c = 0; c < d; ++c) ss += double{vals[size_t{t} * d + c]} * vals[size_t{t} * d + c];
        norms[t] = std::sqrt(ss);
      }
      if (sink) {
        s.sink_value_norm_ratio += norms[0] / Percentile(norms, 50);
        ++n_sink_heads;
      }
      ++n_heads;
    }
  }
  s.first_token_share /= static_cast<double>(n_rows);
  s.sparsity_1pct /= static_cast<double>(n_rows);
  const double heads = static_cast<double>(n_heads);
  s.zipf_slope /= heads;
  s.top10pct_mass /= heads;
  s.key_channel_ratio /= heads;
  s.key_channel_ratio_pre_rope /= heads;
  s.value_channel_ratio /= heads;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  s.first_token_share_sink_layers =
      n_sink_rows ? s.first_token_share_sink_layers / static_cast<double>(n_sink_rows) : nan;
  s.sink_value_norm_ratio =
      n_sink_heads ? s.sink_value_norm_ratio / static_cast<double>(n_sink_heads) : nan;
  s.recent_share_local = n_local ? recent_local / static_cast<double>(n_local)
                                 : std::numeric_limits<double>::quiet_NaN();
  s.recent_share_other = n_other ? recent_other / static_cast<double>(n_other)
                                 : std::numeric_limits<double>::quiet_NaN();
  return s;
}

}  // namespace kvtier::tools
