// Token compaction over one sequence's KV (the Compact RPC, service/compact.h): choose
// which tokens' K/V to keep, gather them, optionally re-index their positions, and
// (de)serialize the compacted entry that kvtierd stores. Pure functions, no I/O; every function is
// thread-safe (no shared state).
//
// Policies (all keep the first n_sink tokens whatever the budget; default n_sink = 4):
//   sink_window(n_sink, window)   StreamingLLM: tokens [0, n_sink) + the last `window`.
//                                 n_sink = 0 is a plain sliding window (baseline only).
//   h2o(n_sink, heavy, recent, s) H2O: sinks + the last `recent` tokens + per KV head the
//                                 `heavy` tokens in between with the highest accumulated
//                                 attention s[layer][kv_head][token].
//   snapkv(n_sink, obs_window, pool_kernel, capacity, q)
//                                 SnapKV: the last obs_window tokens' queries
//                                 q[layer][query_head][obs][head_dim] (post-RoPE, at
//                                 positions T-obs..T-1) attend causally over the whole
//                                 prompt (softmax over every visible key, scaled by
//                                 1/sqrt(head_dim)); the weights on the prefix [0, T-obs)
//                                 are summed over the window ("votes"), averaged over the
//                                 query heads of each GQA group, max-pooled with stride 1
//                                 and padding pool_kernel/2 (the LongBench/NIAH setting;
//                                 neighbours of a peak survive together), and the top
//                                 capacity - n_sink - obs_window prefix tokens per KV head
//                                 are kept together with the sinks and the whole window.
//                                 `capacity` counts the window and the sinks.
// When a policy's budget covers the whole sequence every token is kept. Ties between
// equal scores go to the earlier position (deterministic).
//
// Selections are per (layer, kv_head) and rectangular: every head keeps the same number
// of tokens `kept`, listed in ascending original position. sink_window selects the same
// tokens in every head.
//
// Position policy: kKeepOriginal keeps the keys as stored (post-RoPE at their original
// positions; the worker must keep using the original positions, as H2O and SnapKV do).
// kReindex re-rotates every kept key from its original position p to its index t in the
// head's kept list (RoPE(a + b) = RoPE(a) o RoPE(b), so the extra rotation is by t - p),
// as StreamingLLM's position shift does. It assumes Llama/NeoX "rotate_half" RoPE: channel
// i pairs with i + head_dim/2 and rotates by pos * theta^(-2i/head_dim). It is exact on
// fp32 keys; on quantized namespaces the service dequantizes, rotates and re-quantizes.
#ifndef KVTIER_KV_COMPACTION_H_
#define KVTIER_KV_COMPACTION_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv/layout.h"

namespace kvtier::kv {

// Stable on disk (compacted entry header): never renumber.
enum class CompactionPolicy : uint8_t { kSinkWindow = 1, kH2o = 2, kSnapKv = 3 };
const char* CompactionPolicyName(CompactionPolicy policy);  // "sink_window", "h2o", "snapkv"

// Stable on disk; numbers match kvtier.v1.PositionPolicy.
enum class PositionPolicy : uint8_t { kKeepOriginal = 0, kReindex = 1 };

inline constexpr uint32_t kDefaultSinkTokens = 4;
inline constexpr float kDefaultRopeTheta = 500000.0f;  // Llama 3

struct SinkWindowParams {
  uint32_t n_sink = kDefaultSinkTokens;
  uint32_t window = 0;
};

struct H2oParams {
  uint32_t n_sink = kDefaultSinkTokens;
  uint32_t heavy = 0;   // heavy hitters per KV head (outside sinks and the recent window)
  uint32_t recent = 0;  // most recent tokens always kept
};

struct SnapKvParams {
  uint32_t n_sink = kDefaultSinkTokens;
  uint32_t obs_window = 32;     // last prompt tokens whose queries vote (always kept)
  uint32_t pool_kernel = 7;     // odd; 1 = no pooling
  uint32_t capacity = 0;        // kept tokens per KV head, sinks and window included
  uint32_t num_query_heads = 0; // a positive multiple of num_kv_heads
};

// fp32 K/V of one sequence, in the raw block order [layer][k|v][kv_head][token][head_dim].
// Thread-compatible value type.
struct KvSequence {
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t num_tokens = 0;
  std::vector<float> data;  // 2 * num_layers * num_kv_heads * num_tokens * head_dim

  // A zero-filled sequence of that shape.
  static KvSequence Zeros(uint32_t num_layers, uint32_t num_kv_heads, uint32_t head_dim,
                          uint32_t num_tokens);

  uint64_t Index(uint32_t layer, uint32_t kv, uint32_t head, uint32_t token) const {
    return (((uint64_t{layer} * 2 + kv) * num_kv_heads + head) * num_tokens + token) *
           head_dim;
  }
  float* Key(uint32_t l, uint32_t h, uint32_t t) { return &data[Index(l, 0, h, t)]; }
  const float* Key(uint32_t l, uint32_t h, uint32_t t) const { return &data[Index(l, 0, h, t)]; }
  float* Value(uint32_t l, uint32_t h, uint32_t t) { return &data[Index(l, 1, h, t)]; }
  const float* Value(uint32_t l, uint32_t h, uint32_t t) const {
    return &data[Index(l, 1, h, t)];
  }

  // INVALID_ARGUMENT if a dimension is zero or data has the wrong size.
  absl::Status Validate() const;
};

// Which tokens a policy kept. Thread-compatible value type.
struct Selection {
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t source_tokens = 0;  // tokens of the source sequence
  uint32_t kept = 0;           // tokens kept per (layer, kv_head)
  // [layer][kv_head][kept]: original positions, strictly ascending within each head.
  std::vector<uint32_t> positions;

  std::span<const uint32_t> Head(uint32_t layer, uint32_t head) const {
    return std::span<const uint32_t>(positions)
        .subspan((uint64_t{layer} * num_kv_heads + head) * kept, kept);
  }
  // True if every head keeps the same positions.
  bool Uniform() const;
  // Sorted union of the kept positions over all heads.
  std::vector<uint32_t> UnionPositions() const;
  // INVALID_ARGUMENT unless positions has num_layers * num_kv_heads * kept entries, each
  // head strictly ascending and < source_tokens.
  absl::Status Validate() const;
};

// Every selection function returns INVALID_ARGUMENT naming the field for zero dimensions,
// num_tokens == 0, a budget that keeps nothing, or inputs of the wrong size / non-finite.

// sink_window: [0, n_sink) + [T - window, T). INVALID_ARGUMENT if n_sink + window == 0.
absl::StatusOr<Selection> SelectSinkWindow(uint32_t num_layers, uint32_t num_kv_heads,
                                           uint32_t num_tokens, const SinkWindowParams& p);

// h2o: `scores` is [layer][kv_head][token] accumulated attention (num_layers *
// num_kv_heads * num_tokens finite values). INVALID_ARGUMENT if n_sink + heavy + recent
// == 0 or the scores have the wrong size.
absl::StatusOr<Selection> SelectH2o(uint32_t num_layers, uint32_t num_kv_heads,
                                    uint32_t num_tokens, const H2oParams& p,
                                    std::span<const float> scores);

// snapkv over `kv` (keys used for the votes). `obs_queries` is [layer][query_head]
// [obs_window][head_dim] (num_layers * num_query_heads * obs_window * head_dim finite
// values). INVALID_ARGUMENT if obs_window == 0, capacity < n_sink + obs_window,
// pool_kernel is even, num_query_heads is not a positive multiple of num_kv_heads, or the
// queries have the wrong size.
absl::StatusOr<Selection> SelectSnapKv(const KvSequence& kv, const SnapKvParams& p,
                                       std::span<const float> obs_queries);

// The SnapKV votes alone (before pooling), [layer][kv_head][token] with zeros at the
// window positions; exposed for tests and evaluation. Same errors as SelectSnapKv.
absl::StatusOr<std::vector<float>> SnapKvVotes(const KvSequence& kv, const SnapKvParams& p,
                                               std::span<const float> obs_queries);

// Per-head top-k with forced positions: keeps [0, n_sink), [T - recent, T) and the
// `heavy` highest-scoring tokens in between (ties to the earlier position). The building
// block of h2o and snapkv, and with n_sink = recent = 0 of an oracle (top-k by future
// attention). Same errors as SelectH2o.
absl::StatusOr<Selection> SelectTopK(uint32_t num_layers, uint32_t num_kv_heads,
                                     uint32_t num_tokens, uint32_t n_sink, uint32_t heavy,
                                     uint32_t recent, std::span<const float> scores);

// Gathers the kept tokens: token t of (layer, head) in the result is source token
// sel.Head(layer, head)[t]. INVALID_ARGUMENT if the shapes disagree or sel is invalid.
absl::StatusOr<KvSequence> Gather(const KvSequence& kv, const Selection& sel);

// Applies rotate_half RoPE at `position` to one head vector of `head_dim` (even) floats.
void RopeRotate(float* vec, uint32_t head_dim, double position, float rope_theta);

// Re-rotates the keys of a gathered sequence (Gather(kv, sel)) from their original
// positions to contiguous positions 0..kept-1 per head. rope_theta <= 0 means
// kDefaultRopeTheta. INVALID_ARGUMENT if the shapes disagree.
absl::Status ReindexKeys(KvSequence& gathered, const Selection& sel, float rope_theta);

// Raw KV conversions. A raw sequence or block is `layout.dtype` elements in the order
// [layer][k|v][kv_head][token][head_dim] for its own token count.
// Concatenates raw blocks (each a whole number of tokens) into one fp32 sequence.
// INVALID_ARGUMENT if a block is empty or not a multiple of layout.BytesPerToken().
absl::StatusOr<KvSequence> KvSequenceFromRawBlocks(const Layout& layout,
                                                   std::span<const std::string> raw_blocks);
// fp32 -> raw in `dtype` (round to nearest even). fp16 overflow saturates to +-inf as
// IEEE conversion does; bf16/fp16 values round-trip exactly through fp32.
std::string KvSequenceToRaw(const KvSequence& kv, Dtype dtype);

// A compacted entry as stored by kvtierd: a header followed by one codec blob
// (kv/codec.h) of `kept` tokens whose token t of (layer, head) is the source
// token at positions[(layer * num_kv_heads + head) * kept + t].
//
// Wire format (little-endian):
//   0  "KVTC" magic (4 bytes)      4  version = 1 (u8)     5  policy (u8)
//   6  position policy (u8)        7  flags (u8): bit 0 = uniform (positions stored once)
//   8  num_layers (u32)           12  num_kv_heads (u32)  16  kept (u32)
//  20  source_tokens (u32)        24  positions: kept u32 if uniform, else
//                                     num_layers * num_kv_heads * kept u32
//   then the codec blob (the rest of the payload).
struct CompactedEntry {
  CompactionPolicy policy = CompactionPolicy::kSinkWindow;
  PositionPolicy position_policy = PositionPolicy::kKeepOriginal;
  Selection selection;              // kept positions per head (expanded if uniform)
  std::span<const uint8_t> blob;    // view into the parsed payload: the codec blob
};

inline constexpr char kCompactedEntryMagic[4] = {'K', 'V', 'T', 'C'};

// Builds the payload. INVALID_ARGUMENT if sel is invalid or blob is empty.
absl::StatusOr<std::string> SerializeCompactedEntry(CompactionPolicy policy,
                                                    PositionPolicy position_policy,
                                                    const Selection& sel,
                                                    std::string_view blob);
// True if `payload` starts with the compacted-entry magic (cheap; does not validate).
bool IsCompactedEntry(std::span<const uint8_t> payload);
// Parses and validates the header, the positions and the inner blob's codec header (its
// num_layers, num_kv_heads and token count must match; the body is checked when decoded).
// INVALID_ARGUMENT / DATA_LOSS on anything inconsistent; never reads out of bounds. The
// returned blob views `payload`.
absl::StatusOr<CompactedEntry> ParseCompactedEntry(std::span<const uint8_t> payload);

// Canonical description of a compaction request, used to derive the entry key: the policy
// name and parameters, the position policy and RoPE theta, plus a SHA-256 of the scores /
// queries for h2o / snapkv (so different scores give different entries).
std::string CompactionParamsString(const SinkWindowParams& p, PositionPolicy pos,
                                   float rope_theta);
std::string CompactionParamsString(const H2oParams& p, std::span<const float> scores,
                                   PositionPolicy pos, float rope_theta);
std::string CompactionParamsString(const SnapKvParams& p, std::span<const float> obs_queries,
                                   PositionPolicy pos, float rope_theta);

// Entry key = first 16 bytes of SHA-256("kvtier-compact-v1" || u32 len || last_block_key
// || params). Deterministic: a client can recompute it.
std::string CompactedEntryKey(std::string_view last_block_key, std::string_view params);

}  // namespace kvtier::kv

#endif  // KVTIER_KV_COMPACTION_H_
