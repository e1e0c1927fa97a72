// Synthetic K/V generator for judging codecs and token compaction without a real model
// (`kvtier eval`; offline only, see docs/design.md §1 Layout and dependency rules). It
// reproduces the documented statistics of real K/V, with parameters fixed from those
// statistics and never tuned to a method's result. Sink layers, sink strength, the sink's
// value norm and the key / value channel ratios are calibrated to SmolLM2-135M's real K/V
// (docs/kivi2.md, "Synthetic generator calibration"):
//   - a few fixed key outlier channels, in the lowest-frequency RoPE pairs, large and
//     consistent across tokens (KIVI section 3); queries share them (QServe/SmoothQuant);
//   - real RoPE (half-split "rotate_half" convention of HF Llama, theta 5e5 for Llama-3)
//     applied to keys and queries; semantic directions live in the low-frequency pairs,
//     positional ("local") directions in the high-frequency pairs (Barbero et al. 2024);
//   - values with milder channel structure than keys (a few channels value_outlier_ratio
//     times larger);
//   - an attention sink in the later layers only: there every query carries a shared
//     bias direction and token 0's key is aligned with it; token 0's value is small
//     (StreamingLLM, Bondarenko et al.);
//   - Zipf token salience, so accumulated attention follows a power law (H2O);
//   - latent topics: tokens come in topic segments and each query picks a topic, so which
//     tokens matter depends on the query (SnapKV, Quest);
//   - a share of local heads attending to recent tokens through high-frequency RoPE pairs;
//   - GQA: several query heads per KV head, each with its own query distribution.
//
// Everything is deterministic for a given SyntheticParams (including seed).
#ifndef KVTIER_TOOLS_SYNTHETIC_KV_H_
#define KVTIER_TOOLS_SYNTHETIC_KV_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/layout.h"

namespace kvtier::tools {

// Generator parameters. Defaults describe a Llama-3-8B-like layout reduced to 2 layers,
// with 32-token blocks (so KIVI key groups span one block), 1024 tokens and the
// documented statistics. Thread-compatible value type.
struct SyntheticParams {
  // num_kv_heads, head_dim, tokens_per_block and sink_tokens are used as given;
  // layout.dtype is the dtype of RawBlock's default. Default: L2 H8 D128 T32 fp16 sinks4.
  kv::Layout layout = {.num_layers = 2, .tokens_per_block = 32};
  uint32_t seq_len = 1024;                 // tokens in the sequence (positions 0..seq_len-1)
  uint32_t query_heads_per_kv_head = 4;    // GQA group size (Llama-3-8B: 32 / 8)
  uint32_t queries_per_head = 16;          // decode queries per query head
  double rope_theta = 5e5;                 // Llama-3: 5e5; Llama-2: 1e4

  // Key outlier channels: `outlier_channels` fixed channels per KV head whose key values
  // are sign * outlier_ratio * (typical channel std) with 10% per-token jitter, chosen
  // among the lowest-frequency RoPE pairs (or the highest with
  // outliers_high_frequency, an adversarial setting for per-channel quantization after
  // RoPE). Queries carry sign * query_outlier_scale in the same channels.
  bool outliers = true;
  uint32_t outlier_channels = 4;
  // The literature: 3x-30x. 7x gives SmolLM2-135M's per-head max / median of the
  // per-channel mean |k| (9.5 after RoPE, 10.5 before).
  double outlier_ratio = 7.0;

  // Value channels: value_outlier_channels channels per KV head (random) with std
  // value_outlier_ratio instead of 1. SmolLM2-135M: per head, max / median of the
  // per-channel mean |v| is 2.9 on average (keys: 9.5).
  uint32_t value_outlier_channels = 2;
  double value_outlier_ratio = 2.9;
  double query_outlier_scale = 3.0;
  bool outliers_high_frequency = false;

  // Attention sink on token 0, in the last round(sink_layer_share * num_layers) layers
  // (at least one while sinks is on): its logit is `sink_logit` above a token of average
  // salience; its value is scaled by sink_value_scale. SmolLM2-135M (1,024-4,096 tokens of
  // a licence text): no sink in layers 0-11, the first token takes 25-58% (mean 43%) of
  // late queries' attention in layers 12-29, ||v_0|| / median ||v_t|| = 0.22 there.
  bool sinks = true;
  double sink_layer_share = 0.6;
  double sink_logit = 7.5;
  double sink_value_scale = 0.22;

  // Token salience: token of salience rank r (1 = most salient, a random permutation)
  // gets logit -zipf_exponent * (ln r - mean ln r), so attention mass ~ r^-exponent.
  double zipf_exponent = 1.0;

  // Topics: tokens come in segments (mean length topic_segment_tokens) of one topic each;
  // each query picks one of num_topics topics; tokens of that topic get +topic_logit.
  // needle_topics extra topics never appear in the sequence (PlantNeedle uses them).
  uint32_t num_topics = 8;
  uint32_t needle_topics = 2;
  double topic_logit = 3.0;
  uint32_t topic_segment_tokens = 32;

  // Share of KV heads (per layer, rounded) that are local: a shared vector in the
  // high-frequency RoPE pairs of keys and queries gives +local_logit at distance 0,
  // decaying with distance.
  double local_head_share = 0.25;
  double local_logit = 6.0;

  uint64_t seed = 1;

  // INVALID_ARGUMENT naming the field: layout invalid, seq_len 0, zero query heads or
  // queries, rope_theta <= 1, outlier_channels > head_dim / 8 (the candidate band),
  // local_head_share outside [0, 1], num_topics 0, or more latent directions than the
  // low-frequency band holds.
  absl::Status Validate() const;
};

// K and V of every (layer, kv_head) of one sequence as floats, [layer][head][token][dim].
// Thread-compatible value type.
struct KvTensors {
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t seq_len = 0;
  std::vector<float> k;
  std::vector<float> v;

  // Allocates zeroed tensors of the given shape.
  static KvTensors Zeros(uint32_t num_layers, uint32_t num_kv_heads, uint32_t head_dim,
                         uint32_t seq_len);
  size_t HeadOffset(uint32_t layer, uint32_t head) const {
    return (size_t{layer} * num_kv_heads + head) * seq_len * head_dim;
  }
  // [seq_len][head_dim] views of one head.
  std::span<float> Keys(uint32_t layer, uint32_t head) {
    return {k.data() + HeadOffset(layer, head), size_t{seq_len} * head_dim};
  }
  std::span<const float> Keys(uint32_t layer, uint32_t head) const {
    return {k.data() + HeadOffset(layer, head), size_t{seq_len} * head_dim};
  }
  std::span<float> Values(uint32_t layer, uint32_t head) {
    return {v.data() + HeadOffset(layer, head), size_t{seq_len} * head_dim};
  }
  std::span<const float> Values(uint32_t layer, uint32_t head) const {
    return {v.data() + HeadOffset(layer, head), size_t{seq_len} * head_dim};
  }
};

// Serializes tokens [first_token, first_token + num_tokens) of `kv` into a raw payload
// (layout.h order [layer][k|v][kv_head][token][head_dim]) in `dtype`, rounding to nearest
// even. REQUIRES: the range lies inside kv.seq_len.
std::string PackRaw(const KvTensors& kv, uint32_t first_token, uint32_t num_tokens,
                    kv::Dtype dtype);

// Reads a raw payload of `num_tokens` tokens in `dtype` into tokens
// [first_token, first_token + num_tokens) of `kv`. INVALID_ARGUMENT if the size does not
// match kv's shape or the range exceeds kv.seq_len.
absl::Status UnpackRaw(std::span<const uint8_t> raw, kv::Dtype dtype, uint32_t first_token,
                       uint32_t num_tokens, KvTensors* kv);

// Applies RoPE in place to one head vector at `position` (half-split pairs (i, i + d/2),
// frequency theta^(-2i/d), as HF Llama's rotate_half). Negative positions rotate back.
void ApplyRope(std::span<float> vec, double position, double theta);

// The latent structure of one (layer, kv_head), for building extra queries and needles.
struct HeadLatents {
  bool local = false;
  bool sink = false;                           // this layer has the attention sink
  std::vector<float> sink_dir;                 // unit, low-frequency band
  std::vector<float> salience_dir;             // unit, low-frequency band
  std::vector<std::vector<float>> topic_dirs;  // num_topics + needle_topics unit vectors
  std::vector<float> local_dir;                // unit, high-frequency band
  std::vector<uint32_t> outlier_channels;
  std::vector<float> outlier_values;           // signed magnitude per outlier channel
  // Per query head: gains of the sink, salience and topic directions and a private unit
  // direction (GQA diversity).
  std::vector<double> sink_gain, salience_gain, topic_gain;
  std::vector<std::vector<float>> private_dirs;
};

// One generated sequence. Thread-compatible; immutable after Generate except through
// PlantNeedle.
class SyntheticKv {
 public:
  // Generates the sequence. INVALID_ARGUMENT from params.Validate().
  static absl::StatusOr<SyntheticKv> Generate(const SyntheticParams& params);

  const SyntheticParams& params() const { return params_; }
  // Post-RoPE keys (what an engine caches, what KIVI quantizes) and values.
  const KvTensors& kv() const { return kv_; }
  // Pre-RoPE keys in kv().k's layout (values identical to kv().v).
  const KvTensors& kv_pre_rope() const { return kv_pre_rope_; }
  const HeadLatents& latents(uint32_t layer, uint32_t kv_head) const {
    return latents_[size_t{layer} * params_.layout.num_kv_heads + kv_head];
  }

  // Decode queries (post-RoPE, at position query_position()) of one KV head:
  // [query_head][query][head_dim], query_heads_per_kv_head * queries_per_head rows.
  std::span<const float> Queries(uint32_t layer, uint32_t kv_head) const;
  // Topic picked by each of those queries, in the same order.
  std::span<const uint32_t> QueryTopics(uint32_t layer, uint32_t kv_head) const;
  uint32_t num_queries_per_kv_head() const {
    return params_.query_heads_per_kv_head * params_.queries_per_head;
  }
  // Position of the decode queries: seq_len (the next token).
  uint32_t query_position() const { return params_.seq_len; }

  // Topic of each token (same for every head) and salience rank of each token per
  // (layer, kv_head) (1 = most salient).
  const std::vector<uint32_t>& token_topics() const { return token_topics_; }
  std::span<const uint32_t> SalienceRanks(uint32_t layer, uint32_t kv_head) const;

  // Builds one more post-RoPE query from query head `query_head`'s distribution for
  // (layer, kv_head), picking `topic` (any of num_topics + needle_topics), at `position`.
  // Deterministic in `seed`. INVALID_ARGUMENT on an out-of-range index.
  absl::StatusOr<std::vector<float>> MakeQuery(uint32_t layer, uint32_t kv_head,
                                               uint32_t query_head, uint32_t topic,
                                               uint32_t position, uint64_t seed) const;

  // Rewrites token `position` in every head as a needle of `topic`: its topic component
  // becomes `topic_logit` along topic's direction and its salience is set to the top
  // rank's, so a query of that topic attends to it. Keys (pre- and post-RoPE) are
  // regenerated for that token; values are kept. INVALID_ARGUMENT if position is 0 with
  // sinks on, out of range, or topic out of range.
  absl::Status PlantNeedle(uint32_t position, uint32_t topic, double topic_logit);

  // Raw payload (layout.h order) of block `block_index` (tokens_per_block tokens, the last
  // block possibly shorter) in `dtype`. REQUIRES: block_index < num_blocks().
  std::string RawBlock(uint32_t block_index, kv::Dtype dtype) const;
  uint32_t num_blocks() const;
  // Layout of the sequence's blocks (params().layout).
  const kv::Layout& layout() const { return params_.layout; }

 private:
  SyntheticKv() = default;
  void BuildKey(uint32_t layer, uint32_t head, uint32_t token, double salience_logit,
                uint32_t topic, double topic_logit, float* noise);

  SyntheticParams params_;
  KvTensors kv_;
  KvTensors kv_pre_rope_;
  std::vector<HeadLatents> latents_;
  std::vector<float> queries_;           // [layer][head][q][d]
  std::vector<uint32_t> query_topics_;   // [layer][head][q]
  std::vector<uint32_t> token_topics_;   // [token]
  std::vector<uint32_t> salience_ranks_; // [layer][head][token]
  std::vector<float> key_noise_;         // [layer][head][token][d], for PlantNeedle
};

// Generator statistics (to validate the generator against the literature), computed with
// the generator's own decode queries over all layers and heads.
struct SyntheticStats {
  double first_token_share = 0;      // mean attention weight on token 0
  double first_token_share_sink_layers = 0;  // the same over the sink layers (NaN if none)
  double sparsity_1pct = 0;          // share of weights < 1% of the row max
  double key_channel_ratio = 0;      // mean over heads of channel max/median mean|k|
  double key_channel_ratio_pre_rope = 0;
  double value_channel_ratio = 0;
  double zipf_slope = 0;             // slope of accumulated attention vs rank, ranks 2..n/4
  double top10pct_mass = 0;          // share of accumulated attention on the top 10% tokens
  double recent_share_local = 0;     // attention on the last 32 tokens, local heads (NaN if none)
  double recent_share_other = 0;     // same, non-local heads
  double sink_value_norm_ratio = 0;  // ||v_0|| / median ||v_t|| in sink layers (NaN if none)
};
SyntheticStats ComputeStats(const SyntheticKv& kv);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_SYNTHETIC_KV_H_
