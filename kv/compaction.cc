#include "kv/compaction.h"

#include <openssl/sha.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kv/codec.h"
#include "kv/half.h"

namespace kvtier::kv {
namespace {

constexpr uint8_t kEntryVersion = 1;
constexpr size_t kEntryHeaderBytes = 24;

// --- little-endian helpers -----------------------------------------------------------

void PutU32(std::string& out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.append(b, 4);
}

uint32_t GetU32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

std::string Sha256Hex(const void* data, size_t size) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(static_cast<const unsigned char*>(data), size, digest);
  // 64 bits are plenty to tell score vectors apart in a key.
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), 8));
}

std::string FloatToken(float v) { return absl::StrFormat("%.9g", v); }

absl::Status CheckDims(uint32_t num_layers, uint32_t num_kv_heads, uint32_t num_tokens) {
  if (num_layers == 0) return absl::InvalidArgumentError("num_layers must be positive");
  if (num_kv_heads == 0) return absl::InvalidArgumentError("num_kv_heads must be positive");
  if (num_tokens == 0) return absl::InvalidArgumentError("num_tokens must be positive");
  return absl::OkStatus();
}

absl::Status CheckFinite(std::span<const float> v, const char* field) {
  for (float x : v) {
    if (!std::isfinite(x)) return absl::InvalidArgumentError(absl::StrCat(field, " must be finite"));
  }
  return absl::OkStatus();
}

Selection KeepAll(uint32_t num_layers, uint32_t num_kv_heads, uint32_t num_tokens) {
  Selection sel;
  sel.num_layers = num_layers;
  sel.num_kv_heads = num_kv_heads;
  sel.source_tokens = num_tokens;
  sel.kept = num_tokens;
  sel.positions.resize(uint64_t{num_layers} * num_kv_heads * num_tokens);
  for (uint64_t head = 0; head < uint64_t{num_layers} * num_kv_heads; ++head) {
    std::iota(sel.positions.begin() + head * num_tokens,
              sel.positions.begin() + (head + 1) * num_tokens, 0u);
  }
  return sel;
}

// Top-k over scores[lo, hi) plus forced [0, n_sink) and [T - recent, T) for one head.
// REQUIRES n_sink + heavy + recent < T (so the forced ranges are disjoint and heavy <=
// hi - lo).
void SelectHead(const float* scores, uint32_t num_tokens, uint32_t n_sink, uint32_t heavy,
                uint32_t recent, uint32_t* out) {
  const uint32_t lo = n_sink;
  const uint32_t hi = num_tokens - recent;
  std::vector<uint32_t> cand(hi - lo);
  std::iota(cand.begin(), cand.end(), lo);
  std::partial_sort(cand.begin(), cand.begin() + heavy, cand.end(),
                    [scores](uint32_t a, uint32_t b) {
                      if (scores[a] != scores[b]) return scores[a] > scores[b];
                      return a < b;
                    });
  cand.resize(heavy);
  std::sort(cand.begin(), cand.end());
  uint32_t n = 0;
  for (uint32_t t = 0; t < n_sink; ++t) out[n++] = t;
  for (uint32_t t : cand) out[n++] = t;
  for (uint32_t t = hi; t < num_tokens; ++t) out[n++] = t;
}

}  // namespace

const char* CompactionPolicyName(CompactionPolicy policy) {
  switch (policy) {
    case CompactionPolicy::kSinkWindow:
      return "sink_window";
    case CompactionPolicy::kH2o:
      return "h2o";
    case CompactionPolicy::kSnapKv:
      return "snapkv";
  }
  return "unknown";
}

KvSequence KvSequence::Zeros(uint32_t num_layers, uint32_t num_kv_heads, uint32_t head_dim,
                             uint32_t num_tokens) {
  KvSequence kv;
  kv.num_layers = num_layers;
  kv.num_kv_heads = num_kv_heads;
  kv.head_dim = head_dim;
  kv.num_tokens = num_tokens;
  kv.data.assign(2ull * num_layers * num_kv_heads * num_tokens * head_dim, 0.0f);
  return kv;
}

absl::Status KvSequence::Validate() const {
  if (num_layers == 0 || num_kv_heads == 0 || head_dim == 0 || num_tokens == 0) {
    return absl::InvalidArgumentError(
        "kv: num_layers, num_kv_heads, head_dim and num_tokens must be positive");
  }
  if (data.size() != 2ull * num_layers * num_kv_heads * num_tokens * head_dim) {
    return absl::InvalidArgumentError(absl::StrCat("kv.data has ", data.size(),
                                                   " values, want ",
                                                   2ull * num_layers * num_kv_heads *
                                                       num_tokens * head_dim));
  }
  return absl::OkStatus();
}

bool Selection::Uniform() const {
  const uint64_t heads = uint64_t{num_layers} * num_kv_heads;
  for (uint64_t h = 1; h < heads; ++h) {
    if (!std::equal(positions.begin(), positions.begin() + kept,
                    positions.begin() + h * kept)) {
      return false;
    }
  }
  return true;
}

std::vector<uint32_t> Selection::UnionPositions() const {
  std::vector<bool> seen(source_tokens, false);
  for (uint32_t p : positions) {
    if (p < source_tokens) seen[p] = true;
  }
  std::vector<uint32_t> out;
  for (uint32_t p = 0; p < source_tokens; ++p) {
    if (seen[p]) out.push_back(p);
  }
  return out;
}

absl::Status Selection::Validate() const {
  if (num_layers == 0 || num_kv_heads == 0) {
    return absl::InvalidArgumentError("selection: num_layers and num_kv_heads must be positive");
  }
  if (kept == 0 || kept > source_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("selection.kept ", kept, " must be in 1..source_tokens ", source_tokens));
  }
  const uint64_t heads = uint64_t{num_layers} * num_kv_heads;
  if (positions.size() != heads * kept) {
    return absl::InvalidArgumentError(absl::StrCat("selection.positions has ", positions.size(),
                                                   " entries, want ", heads * kept));
  }
  for (uint64_t h = 0; h < heads; ++h) {
    for (uint32_t t = 0; t < kept; ++t) {
      const uint32_t p = positions[h * kept + t];
      if (p >= source_tokens || (t > 0 && p <= positions[h * kept + t - 1])) {
        return absl::InvalidArgumentError(
            "selection.positions must be strictly ascending per head and < source_tokens");
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Selection> SelectSinkWindow(uint32_t num_layers, uint32_t num_kv_heads,
                                           uint32_t num_tokens, const SinkWindowParams& p) {
  if (absl::Status s = CheckDims(num_layers, num_kv_heads, num_tokens); !s.ok()) return s;
  if (uint64_t{p.n_sink} + p.window == 0) {
    return absl::InvalidArgumentError("sink_window: n_sink + window must be positive");
  }
  if (uint64_t{p.n_sink} + p.window >= num_tokens) {
    return KeepAll(num_layers, num_kv_heads, num_tokens);
  }
  Selection sel;
  sel.num_layers = num_layers;
  sel.num_kv_heads = num_kv_heads;
  sel.source_tokens = num_tokens;
  sel.kept = p.n_sink + p.window;
  std::vector<uint32_t> one;
  for (uint32_t t = 0; t < p.n_sink; ++t) one.push_back(t);
  for (uint32_t t = num_tokens - p.window; t < num_tokens; ++t) one.push_back(t);
  for (uint64_t h = 0; h < uint64_t{num_layers} * num_kv_heads; ++h) {
    sel.positions.insert(sel.positions.end(), one.begin(), one.end());
  }
  return sel;
}

absl::StatusOr<Selection> SelectTopK(uint32_t num_layers, uint32_t num_kv_heads,
                                     uint32_t num_tokens, uint32_t n_sink, uint32_t heavy,
                                     uint32_t recent, std::span<const float> scores) {
  if (absl::Status s = CheckDims(num_layers, num_kv_heads, num_tokens); !s.ok()) return s;
  const uint64_t heads = uint64_t{num_layers} * num_kv_heads;
  if (scores.size() != heads * num_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("scores has ", scores.size(), " values, want num_layers * num_kv_heads * "
                     "num_tokens = ", heads * num_tokens));
  }
  if (absl::Status s = CheckFinite(scores, "scores"); !s.ok()) return s;
  const uint64_t budget = uint64_t{n_sink} + heavy + recent;
  if (budget == 0) {
    return absl::InvalidArgumentError("n_sink + heavy + recent must be positive");
  }
  if (budget >= num_tokens) return KeepAll(num_layers, num_kv_heads, num_tokens);
  Selection sel;
  sel.num_layers = num_layers;
  sel.num_kv_heads = num_kv_heads;
  sel.source_tokens = num_tokens;
  sel.kept = static_cast<uint32_t>(budget);
  sel.positions.resize(heads * sel.kept);
  for (uint64_t h = 0; h < heads; ++h) {
    SelectHead(scores.data() + h * num_tokens, num_tokens, n_sink, heavy, recent,
               sel.positions.data() + h * sel.kept);
  }
  return sel;
}

absl::StatusOr<Selection> SelectH2o(uint32_t num_layers, uint32_t num_kv_heads,
                                    uint32_t num_tokens, const H2oParams& p,
                                    std::span<const float> scores) {
  return SelectTopK(num_layers, num_kv_heads, num_tokens, p.n_sink, p.heavy, p.recent, scores);
}

namespace {

absl::Status CheckSnapKv(const KvSequence& kv, const SnapKvParams& p,
                         std::span<const float> obs_queries) {
  if (absl::Status s = kv.Validate(); !s.ok()) return s;
  if (p.obs_window == 0) return absl::InvalidArgumentError("snapkv.obs_window must be positive");
  if (uint64_t{p.capacity} < uint64_t{p.n_sink} + p.obs_window) {
    return absl::InvalidArgumentError(absl::StrCat("snapkv.capacity ", p.capacity,
                                                   " must be >= n_sink + obs_window = ",
                                                   uint64_t{p.n_sink} + p.obs_window));
  }
  if (p.pool_kernel % 2 == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapkv.pool_kernel ", p.pool_kernel, " must be odd"));
  }
  if (p.num_query_heads == 0 || p.num_query_heads % kv.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("snapkv.num_query_heads ", p.num_query_heads,
                                                   " must be a positive multiple of "
                                                   "num_kv_heads ", kv.num_kv_heads));
  }
  const uint64_t want =
      uint64_t{kv.num_layers} * p.num_query_heads * p.obs_window * kv.head_dim;
  if (obs_queries.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "snapkv.obs_queries has ", obs_queries.size(),
        " values, want num_layers * num_query_heads * obs_window * head_dim = ", want));
  }
  return CheckFinite(obs_queries, "snapkv.obs_queries");
}

// Votes for a validated request with obs_window < num_tokens.
std::vector<float> ComputeVotes(const KvSequence& kv, const SnapKvParams& p,
                                std::span<const float> q) {
  const uint32_t T = kv.num_tokens;
  const uint32_t d = kv.head_dim;
  const uint32_t obs = p.obs_window;
  const uint32_t prefix = T - obs;
  const uint32_t group = p.num_query_heads / kv.num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> votes(uint64_t{kv.num_layers} * kv.num_kv_heads * T, 0.0f);
  std::vector<float> logits(T);
  for (uint32_t l = 0; l < kv.num_layers; ++l) {
    for (uint32_t qh = 0; qh < p.num_query_heads; ++qh) {
      const uint32_t h = qh / group;
      float* vote = &votes[(uint64_t{l} * kv.num_kv_heads + h) * T];
      for (uint32_t i = 0; i < obs; ++i) {
        const float* query = &q[((uint64_t{l} * p.num_query_heads + qh) * obs + i) * d];
        const uint32_t visible = prefix + i + 1;  // causal inside the window
        float mx = -std::numeric_limits<float>::infinity();
        for (uint32_t j = 0; j < visible; ++j) {
          const float* key = kv.Key(l, h, j);
          float dot = 0.0f;
          for (uint32_t c = 0; c < d; ++c) dot += query[c] * key[c];
          logits[j] = dot * scale;
          mx = std::max(mx, logits[j]);
        }
        double sum = 0.0;
        for (uint32_t j = 0; j < visible; ++j) {
          logits[j] = std::exp(logits[j] - mx);
          sum += logits[j];
        }
        const float inv = static_cast<float>(1.0 / sum) / static_cast<float>(group);
        for (uint32_t j = 0; j < prefix; ++j) vote[j] += logits[j] * inv;
      }
    }
  }
  return votes;
}

}  // namespace

absl::StatusOr<std::vector<float>> SnapKvVotes(const KvSequence& kv, const SnapKvParams& p,
                                               std::span<const float> obs_queries) {
  if (absl::Status s = CheckSnapKv(kv, p, obs_queries); !s.ok()) return s;
  if (p.obs_window >= kv.num_tokens) {
    return std::vector<float>(uint64_t{kv.num_layers} * kv.num_kv_heads * kv.num_tokens, 0.0f);
  }
  return ComputeVotes(kv, p, obs_queries);
}

absl::StatusOr<Selection> SelectSnapKv(const KvSequence& kv, const SnapKvParams& p,
                                       std::span<const float> obs_queries) {
  if (absl::Status s = CheckSnapKv(kv, p, obs_queries); !s.ok()) return s;
  const uint32_t T = kv.num_tokens;
  if (p.capacity >= T) return KeepAll(kv.num_layers, kv.num_kv_heads, T);
  // capacity >= n_sink + obs_window, capacity < T: the sinks, the prefix candidates and the
  // window are disjoint.
  std::vector<float> votes = ComputeVotes(kv, p, obs_queries);
  const uint32_t prefix = T - p.obs_window;
  const int32_t half = static_cast<int32_t>(p.pool_kernel / 2);
  std::vector<float> pooled(votes.size(), 0.0f);
  for (uint64_t head = 0; head < uint64_t{kv.num_layers} * kv.num_kv_heads; ++head) {
    const float* v = &votes[head * T];
    float* out = &pooled[head * T];
    for (int32_t j = 0; j < static_cast<int32_t>(prefix); ++j) {
      float m = v[j];
      const int32_t lo = std::max(0, j - half);
      const int32_t hi = std::min(static_cast<int32_t>(prefix) - 1, j + half);
      for (int32_t k = lo; k <= hi; ++k) m = std::max(m, v[k]);
      out[j] = m;
    }
  }
  return SelectTopK(kv.num_layers, kv.num_kv_heads, T, p.n_sink,
                    p.capacity - p.n_sink - p.obs_window, p.obs_window, pooled);
}

absl::StatusOr<KvSequence> Gather(const KvSequence& kv, const Selection& sel) {
  if (absl::Status s = kv.Validate(); !s.ok()) return s;
  if (absl::Status s = sel.Validate(); !s.ok()) return s;
  if (sel.num_layers != kv.num_layers || sel.num_kv_heads != kv.num_kv_heads ||
      sel.source_tokens != kv.num_tokens) {
    return absl::InvalidArgumentError("selection shape does not match the kv sequence");
  }
  KvSequence out = KvSequence::Zeros(kv.num_layers, kv.num_kv_heads, kv.head_dim, sel.kept);
  for (uint32_t l = 0; l < kv.num_layers; ++l) {
    for (uint32_t h = 0; h < kv.num_kv_heads; ++h) {
      std::span<const uint32_t> pos = sel.Head(l, h);
      for (uint32_t kvi = 0; kvi < 2; ++kvi) {
        for (uint32_t t = 0; t < sel.kept; ++t) {
          std::memcpy(&out.data[out.Index(l, kvi, h, t)], &kv.data[kv.Index(l, kvi, h, pos[t])],
                      sizeof(float) * kv.head_dim);
        }
      }
    }
  }
  return out;
}

void RopeRotate(float* vec, uint32_t head_dim, double position, float rope_theta) {
  const uint32_t half = head_dim / 2;
  for (uint32_t i = 0; i < half; ++i) {
    const double freq = std::pow(static_cast<double>(rope_theta), -2.0 * i / head_dim);
    const double angle = position * freq;
    const double c = std::cos(angle);
    const double s = std::sin(angle);
    const double x = vec[i];
    const double y = vec[i + half];
    vec[i] = static_cast<float>(x * c - y * s);
    vec[i + half] = static_cast<float>(x * s + y * c);
  }
}

absl::Status ReindexKeys(KvSequence& gathered, const Selection& sel, float rope_theta) {
  if (absl::Status s = gathered.Validate(); !s.ok()) return s;
  if (absl::Status s = sel.Validate(); !s.ok()) return s;
  if (sel.num_layers != gathered.num_layers || sel.num_kv_heads != gathered.num_kv_heads ||
      sel.kept != gathered.num_tokens) {
    return absl::InvalidArgumentError("selection shape does not match the gathered kv");
  }
  if (gathered.head_dim % 2 != 0) {
    return absl::InvalidArgumentError("head_dim must be even to re-rotate keys");
  }
  if (!(rope_theta > 0.0f)) rope_theta = kDefaultRopeTheta;
  for (uint32_t l = 0; l < gathered.num_layers; ++l) {
    for (uint32_t h = 0; h < gathered.num_kv_heads; ++h) {
      std::span<const uint32_t> pos = sel.Head(l, h);
      for (uint32_t t = 0; t < sel.kept; ++t) {
        if (pos[t] == t) continue;
        RopeRotate(gathered.Key(l, h, t), gathered.head_dim,
                  static_cast<double>(t) - static_cast<double>(pos[t]), rope_theta);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<KvSequence> KvSequenceFromRawBlocks(const Layout& layout,
                                                   std::span<const std::string> raw_blocks) {
  if (absl::Status s = layout.Validate(); !s.ok()) return s;
  if (raw_blocks.empty()) return absl::InvalidArgumentError("raw_blocks must not be empty");
  const uint64_t bpt = layout.BytesPerToken();
  uint64_t total = 0;
  for (size_t b = 0; b < raw_blocks.size(); ++b) {
    if (raw_blocks[b].empty() || raw_blocks[b].size() % bpt != 0) {
      return absl::InvalidArgumentError(absl::StrCat("raw_blocks[", b, "] has ",
                                                     raw_blocks[b].size(),
                                                     " bytes, not a positive multiple of ", bpt));
    }
    total += raw_blocks[b].size() / bpt;
  }
  if (total > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("sequence too long");
  }
  KvSequence kv = KvSequence::Zeros(layout.num_layers, layout.num_kv_heads, layout.head_dim,
                                    static_cast<uint32_t>(total));
  uint32_t base = 0;
  for (const std::string& block : raw_blocks) {
    const uint32_t tokens = static_cast<uint32_t>(block.size() / bpt);
    const auto* src = reinterpret_cast<const uint8_t*>(block.data());
    for (uint32_t l = 0; l < layout.num_layers; ++l) {
      for (uint32_t kvi = 0; kvi < 2; ++kvi) {
        for (uint32_t h = 0; h < layout.num_kv_heads; ++h) {
          for (uint32_t t = 0; t < tokens; ++t) {
            const uint8_t* in = src + 2 * layout.Index(l, kvi, h, t, 0, tokens);
            float* out = &kv.data[kv.Index(l, kvi, h, base + t)];
            for (uint32_t c = 0; c < layout.head_dim; ++c) {
              const uint16_t e = static_cast<uint16_t>(in[2 * c] | (in[2 * c + 1] << 8));
              out[c] = DtypeToFloat(layout.dtype, e);
            }
          }
        }
      }
    }
    base += tokens;
  }
  return kv;
}

std::string KvSequenceToRaw(const KvSequence& kv, Dtype dtype) {
  std::string out(kv.data.size() * 2, '\0');
  auto* dst = reinterpret_cast<uint8_t*>(out.data());
  for (size_t i = 0; i < kv.data.size(); ++i) {
    const uint16_t e = FloatToDtype(dtype, kv.data[i]);
    dst[2 * i] = static_cast<uint8_t>(e & 0xff);
    dst[2 * i + 1] = static_cast<uint8_t>(e >> 8);
  }
  return out;
}

absl::StatusOr<std::string> SerializeCompactedEntry(CompactionPolicy policy,
                                                    PositionPolicy position_policy,
                                                    const Selection& sel,
                                                    std::string_view blob) {
  if (absl::Status s = sel.Validate(); !s.ok()) return s;
  if (blob.empty()) return absl::InvalidArgumentError("blob must not be empty");
  const bool uniform = sel.Uniform();
  std::string out;
  out.reserve(kEntryHeaderBytes + 4 * (uniform ? sel.kept : sel.positions.size()) + blob.size());
  out.append(kCompactedEntryMagic, 4);
  out.push_back(static_cast<char>(kEntryVersion));
  out.push_back(static_cast<char>(policy));
  out.push_back(static_cast<char>(position_policy));
  out.push_back(static_cast<char>(uniform ? 1 : 0));
  PutU32(out, sel.num_layers);
  PutU32(out, sel.num_kv_heads);
  PutU32(out, sel.kept);
  PutU32(out, sel.source_tokens);
  const size_t count = uniform ? sel.kept : sel.positions.size();
  for (size_t i = 0; i < count; ++i) PutU32(out, sel.positions[i]);
  out.append(blob);
  return out;
}

bool IsCompactedEntry(std::span<const uint8_t> payload) {
  return payload.size() >= 4 && std::memcmp(payload.data(), kCompactedEntryMagic, 4) == 0;
}

absl::StatusOr<CompactedEntry> ParseCompactedEntry(std::span<const uint8_t> payload) {
  if (payload.size() < kEntryHeaderBytes || !IsCompactedEntry(payload)) {
    return absl::InvalidArgumentError("payload is not a compacted entry (bad magic or size)");
  }
  const uint8_t* p = payload.data();
  if (p[4] != kEntryVersion) {
    return absl::InvalidArgumentError(absl::StrCat("compacted entry version ", p[4],
                                                   " is not supported"));
  }
  CompactedEntry entry;
  if (p[5] < 1 || p[5] > 3) return absl::DataLossError("compacted entry: bad policy");
  entry.policy = static_cast<CompactionPolicy>(p[5]);
  if (p[6] > 1) return absl::DataLossError("compacted entry: bad position policy");
  entry.position_policy = static_cast<PositionPolicy>(p[6]);
  if (p[7] > 1) return absl::DataLossError("compacted entry: bad flags");
  const bool uniform = p[7] == 1;
  Selection& sel = entry.selection;
  sel.num_layers = GetU32(p + 8);
  sel.num_kv_heads = GetU32(p + 12);
  sel.kept = GetU32(p + 16);
  sel.source_tokens = GetU32(p + 20);
  if (sel.num_layers == 0 || sel.num_kv_heads == 0 || sel.kept == 0) {
    return absl::DataLossError("compacted entry: zero dimension");
  }
  const uint64_t heads = uint64_t{sel.num_layers} * sel.num_kv_heads;
  const uint64_t avail = payload.size() - kEntryHeaderBytes;
  if (!uniform && heads > avail / 4 / sel.kept) {
    return absl::DataLossError("compacted entry: truncated positions");
  }
  const uint64_t count = uniform ? sel.kept : heads * sel.kept;
  if (count > avail / 4 || count * 4 >= avail) {
    return absl::DataLossError("compacted entry: truncated positions or missing blob");
  }
  // The blob's header must describe the same shape (this also bounds the dimensions by
  // the payload size before anything is allocated).
  entry.blob = payload.subspan(kEntryHeaderBytes + count * 4);
  absl::StatusOr<EncodedInfo> info = ParseHeader(entry.blob);
  if (!info.ok()) {
    return absl::DataLossError(absl::StrCat("compacted entry blob: ", info.status().message()));
  }
  if (info->layout.num_layers != sel.num_layers || info->layout.num_kv_heads != sel.num_kv_heads ||
      info->num_tokens != sel.kept) {
    return absl::DataLossError("compacted entry: blob shape differs from the header");
  }
  sel.positions.resize(heads * sel.kept);
  const uint8_t* q = p + kEntryHeaderBytes;
  for (uint64_t i = 0; i < count; ++i) sel.positions[i] = GetU32(q + 4 * i);
  if (uniform) {
    for (uint64_t h = 1; h < heads; ++h) {
      std::copy(sel.positions.begin(), sel.positions.begin() + sel.kept,
                sel.positions.begin() + h * sel.kept);
    }
  }
  if (absl::Status s = sel.Validate(); !s.ok()) {
    return absl::DataLossError(absl::StrCat("compacted entry: ", s.message()));
  }
  return entry;
}

namespace {
std::string PosString(PositionPolicy pos, float rope_theta) {
  if (pos == PositionPolicy::kKeepOriginal) return " pos=keep";
  if (!(rope_theta > 0.0f)) rope_theta = kDefaultRopeTheta;
  return absl::StrCat(" pos=reindex theta=", FloatToken(rope_theta));
}
}  // namespace

std::string CompactionParamsString(const SinkWindowParams& p, PositionPolicy pos,
                                   float rope_theta) {
  return absl::StrCat("sink_window n_sink=", p.n_sink, " window=", p.window,
                      PosString(pos, rope_theta));
}

std::string CompactionParamsString(const H2oParams& p, std::span<const float> scores,
                                   PositionPolicy pos, float rope_theta) {
  return absl::StrCat("h2o n_sink=", p.n_sink, " heavy=", p.heavy, " recent=", p.recent,
                      " scores=", Sha256Hex(scores.data(), scores.size_bytes()),
                      PosString(pos, rope_theta));
}

std::string CompactionParamsString(const SnapKvParams& p, std::span<const float> obs_queries,
                                   PositionPolicy pos, float rope_theta) {
  return absl::StrCat("snapkv n_sink=", p.n_sink, " obs_window=", p.obs_window,
                      " pool_kernel=", p.pool_kernel, " capacity=", p.capacity,
                      " num_query_heads=", p.num_query_heads,
                      " queries=", Sha256Hex(obs_queries.data(), obs_queries.size_bytes()),
                      PosString(pos, rope_theta));
}

std::string CompactedEntryKey(std::string_view last_block_key, std::string_view params) {
  std::string msg = "kvtier-compact-v1";
  PutU32(msg, static_cast<uint32_t>(last_block_key.size()));
  msg.append(last_block_key);
  msg.append(params);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), digest);
  return std::string(reinterpret_cast<const char*>(digest), 16);
}

}  // namespace kvtier::kv
