#include "kv/compaction.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv/codec.h"
#include "kv/layout.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::kv {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

KvSequence RandomKv(std::mt19937& rng, uint32_t layers, uint32_t heads, uint32_t dim,
                    uint32_t tokens) {
  KvSequence kv = KvSequence::Zeros(layers, heads, dim, tokens);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (float& x : kv.data) x = n(rng);
  return kv;
}

std::vector<float> RandomVec(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Checks the structural invariants every selection must satisfy.
void ExpectWellFormed(const Selection& sel, uint32_t n_sink, uint32_t want_kept) {
  ASSERT_OK(sel.Validate());
  EXPECT_EQ(sel.kept, want_kept);
  for (uint32_t l = 0; l < sel.num_layers; ++l) {
    for (uint32_t h = 0; h < sel.num_kv_heads; ++h) {
      std::span<const uint32_t> pos = sel.Head(l, h);
      for (uint32_t t = 0; t < std::min(n_sink, sel.source_tokens); ++t) {
        ASSERT_EQ(pos[t], t) << "sink " << t << " missing in layer " << l << " head " << h;
      }
    }
  }
}

TEST(SinkWindowTest, KeepsSinksAndLastWindow) {
  auto sel = SelectSinkWindow(2, 3, 20, {.n_sink = 4, .window = 5});
  ASSERT_OK(sel);
  EXPECT_EQ(sel->kept, 9u);
  EXPECT_TRUE(sel->Uniform());
  EXPECT_THAT(sel->Head(1, 2), ElementsAre(0, 1, 2, 3, 15, 16, 17, 18, 19));
  EXPECT_THAT(sel->UnionPositions(), ElementsAre(0, 1, 2, 3, 15, 16, 17, 18, 19));
}

TEST(SinkWindowTest, NoSinksIsPlainWindowAndLargeBudgetKeepsAll) {
  auto window = SelectSinkWindow(1, 1, 10, {.n_sink = 0, .window = 3});
  ASSERT_OK(window);
  EXPECT_THAT(window->Head(0, 0), ElementsAre(7, 8, 9));
  auto all = SelectSinkWindow(1, 2, 10, {.n_sink = 4, .window = 6});
  ASSERT_OK(all);
  EXPECT_EQ(all->kept, 10u);
  EXPECT_THAT(all->Head(0, 1), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
}

TEST(H2oTest, KeepsHeavyHittersPerHead) {
  // 1 layer, 2 heads, 12 tokens. Head 0 likes tokens 5 and 7, head 1 likes 6 and 8.
  std::vector<float> scores(24, 0.1f);
  scores[5] = 3.0f;
  scores[7] = 2.0f;
  scores[12 + 6] = 5.0f;
  scores[12 + 8] = 4.0f;
  scores[12 + 10] = 9.0f;  // inside the recent window: kept anyway, not counted as heavy
  auto sel = SelectH2o(1, 2, 12, {.n_sink = 2, .heavy = 2, .recent = 2}, scores);
  ASSERT_OK(sel);
  EXPECT_THAT(sel->Head(0, 0), ElementsAre(0, 1, 5, 7, 10, 11));
  EXPECT_THAT(sel->Head(0, 1), ElementsAre(0, 1, 6, 8, 10, 11));
  EXPECT_FALSE(sel->Uniform());
  EXPECT_THAT(sel->UnionPositions(), ElementsAre(0, 1, 5, 6, 7, 8, 10, 11));
}

TEST(H2oTest, SinksKeptEvenWithZeroScore) {
  std::vector<float> scores(16, 1.0f);
  scores[0] = scores[1] = 0.0f;
  auto sel = SelectH2o(1, 1, 16, {.n_sink = 2, .heavy = 1, .recent = 0}, scores);
  ASSERT_OK(sel);
  EXPECT_THAT(sel->Head(0, 0), ElementsAre(0, 1, 2));  // tie -> earliest position
}

TEST(SnapKvTest, VotesFindNeedleAndPoolingKeepsNeighbours) {
  // 1 layer, 1 KV head, 2 query heads (GQA group of 2), head_dim 8, 64 tokens.
  std::mt19937 rng(7);
  const uint32_t T = 64, d = 8, obs = 4;
  KvSequence kv = RandomKv(rng, 1, 1, d, T);
  for (float& x : kv.data) x *= 0.1f;
  // Needle at token 30: key strongly aligned with channel 0.
  kv.Key(0, 0, 30)[0] = 8.0f;
  std::vector<float> q(1 * 2 * obs * d, 0.0f);
  for (uint32_t qh = 0; qh < 2; ++qh) {
    for (uint32_t i = 0; i < obs; ++i) q[(qh * obs + i) * d + 0] = 3.0f;
  }
  SnapKvParams p{.n_sink = 4, .obs_window = obs, .pool_kernel = 3, .capacity = 11,
                 .num_query_heads = 2};
  auto votes = SnapKvVotes(kv, p, q);
  ASSERT_OK(votes);
  uint32_t argmax = 0;
  for (uint32_t j = 0; j < T; ++j) {
    if ((*votes)[j] > (*votes)[argmax]) argmax = j;
  }
  EXPECT_EQ(argmax, 30u);
  for (uint32_t j = T - obs; j < T; ++j) EXPECT_EQ((*votes)[j], 0.0f);
  auto sel = SelectSnapKv(kv, p, q);
  ASSERT_OK(sel);
  ExpectWellFormed(*sel, 4, 11);
  // 11 = 4 sinks + 4 window + 3 prefix tokens: the needle and its pooled neighbours.
  EXPECT_THAT(sel->Head(0, 0), ElementsAre(0, 1, 2, 3, 29, 30, 31, 60, 61, 62, 63));
}

TEST(SnapKvTest, GqaVotesAreMeanOverGroup) {
  std::mt19937 rng(11);
  const uint32_t T = 20, d = 4, obs = 3;
  KvSequence kv = RandomKv(rng, 1, 1, d, T);
  std::vector<float> q2 = RandomVec(rng, 2 * obs * d);
  SnapKvParams p2{.n_sink = 1, .obs_window = obs, .pool_kernel = 1, .capacity = 8,
                  .num_query_heads = 2};
  SnapKvParams p1 = p2;
  p1.num_query_heads = 1;
  auto both = SnapKvVotes(kv, p2, q2);
  auto a = SnapKvVotes(kv, p1, std::span<const float>(q2).subspan(0, obs * d));
  auto b = SnapKvVotes(kv, p1, std::span<const float>(q2).subspan(obs * d, obs * d));
  ASSERT_OK(both);
  ASSERT_OK(a);
  ASSERT_OK(b);
  for (uint32_t j = 0; j < T; ++j) {
    EXPECT_NEAR((*both)[j], 0.5f * ((*a)[j] + (*b)[j]), 1e-6f) << j;
  }
  // Votes of one query are softmax weights on the prefix: each query contributes <= 1.
  float total = 0.0f;
  for (float v : *a) total += v;
  EXPECT_LE(total, static_cast<float>(obs) + 1e-4f);
  EXPECT_GT(total, 0.0f);
}

// Property test: random shapes, budgets and scores; sinks are always kept, kept counts
// match the budget, positions are valid.
TEST(CompactionPropertyTest, SinksKeptUnderEveryPolicyAndBudget) {
  std::mt19937 rng(20261130);
  for (int iter = 0; iter < 300; ++iter) {
    const uint32_t layers = 1 + rng() % 2;
    const uint32_t heads = 1 + rng() % 3;
    const uint32_t group = 1 + rng() % 3;
    const uint32_t d = 2 * (1 + rng() % 4);
    const uint32_t T = 1 + rng() % 80;
    const uint32_t n_sink = rng() % 6;
    SCOPED_TRACE(::testing::Message() << "iter " << iter << " T " << T << " n_sink " << n_sink);

    const uint32_t window = rng() % (T + 3);
    if (n_sink + window > 0) {
      auto sw = SelectSinkWindow(layers, heads, T, {.n_sink = n_sink, .window = window});
      ASSERT_OK(sw);
      ExpectWellFormed(*sw, n_sink, std::min(T, n_sink + window));
    }

    const uint32_t heavy = rng() % (T + 2);
    const uint32_t recent = rng() % (T + 2);
    // Adversarial scores: sinks get the lowest scores.
    std::vector<float> scores = RandomVec(rng, uint64_t{layers} * heads * T);
    for (uint64_t h = 0; h < uint64_t{layers} * heads; ++h) {
      for (uint32_t t = 0; t < std::min(n_sink, T); ++t) scores[h * T + t] = -100.0f;
    }
    if (n_sink + heavy + recent > 0) {
      auto h2o = SelectH2o(layers, heads, T, {.n_sink = n_sink, .heavy = heavy, .recent = recent},
                           scores);
      ASSERT_OK(h2o);
      ExpectWellFormed(*h2o, n_sink, std::min(T, n_sink + heavy + recent));
      // The recent window is kept too.
      for (uint32_t t = T - std::min(T, recent); t < T; ++t) {
        EXPECT_TRUE(std::binary_search(h2o->Head(0, 0).begin(), h2o->Head(0, 0).end(), t));
      }
    }

    const uint32_t obs = 1 + rng() % 8;
    const uint32_t capacity = n_sink + obs + rng() % (T + 2);
    const uint32_t kernel = 1 + 2 * (rng() % 3);
    KvSequence kv = RandomKv(rng, layers, heads, d, T);
    for (uint64_t i = 0; i < kv.data.size(); ++i) kv.data[i] *= 3.0f;  // peaky attention
    std::vector<float> q = RandomVec(rng, uint64_t{layers} * heads * group * obs * d);
    auto snap = SelectSnapKv(kv,
                             {.n_sink = n_sink, .obs_window = obs, .pool_kernel = kernel,
                              .capacity = capacity, .num_query_heads = heads * group},
                             q);
    ASSERT_OK(snap);
    ExpectWellFormed(*snap, n_sink, std::min(T, capacity));
    if (capacity < T) {  // the whole observation window is kept
      for (uint32_t t = T - obs; t < T; ++t) {
        EXPECT_TRUE(std::binary_search(snap->Head(0, 0).begin(), snap->Head(0, 0).end(), t));
      }
    }
  }
}

TEST(GatherTest, PositionsMatchSourceTokens) {
  std::mt19937 rng(3);
  const uint32_t L = 2, H = 2, d = 4, T = 30;
  KvSequence kv = RandomKv(rng, L, H, d, T);
  std::vector<float> scores = RandomVec(rng, L * H * T);
  auto sel = SelectH2o(L, H, T, {.n_sink = 3, .heavy = 5, .recent = 4}, scores);
  ASSERT_OK(sel);
  auto g = Gather(kv, *sel);
  ASSERT_OK(g);
  ASSERT_EQ(g->num_tokens, 12u);
  for (uint32_t l = 0; l < L; ++l) {
    for (uint32_t h = 0; h < H; ++h) {
      for (uint32_t t = 0; t < sel->kept; ++t) {
        const uint32_t src = sel->Head(l, h)[t];
        for (uint32_t c = 0; c < d; ++c) {
          ASSERT_EQ(g->Key(l, h, t)[c], kv.Key(l, h, src)[c]);
          ASSERT_EQ(g->Value(l, h, t)[c], kv.Value(l, h, src)[c]);
        }
      }
    }
  }
}

TEST(InvalidArgumentTest, BadParametersAndShapes) {
  std::mt19937 rng(5);
  KvSequence kv = RandomKv(rng, 1, 2, 4, 40);
  std::vector<float> q = RandomVec(rng, 1 * 4 * 8 * 4);
  SnapKvParams good{.n_sink = 4, .obs_window = 8, .pool_kernel = 5, .capacity = 20,
                    .num_query_heads = 4};
  ASSERT_OK(SelectSnapKv(kv, good, q));

  auto expect_invalid = [](const absl::Status& s, const std::string& field) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(field));
  };
  SnapKvParams p = good;
  p.capacity = 11;  // < n_sink + obs_window
  expect_invalid(SelectSnapKv(kv, p, q).status(), "capacity");
  p = good;
  p.obs_window = 0;
  expect_invalid(SelectSnapKv(kv, p, q).status(), "obs_window");
  p = good;
  p.pool_kernel = 4;
  expect_invalid(SelectSnapKv(kv, p, q).status(), "pool_kernel");
  p = good;
  p.num_query_heads = 3;
  expect_invalid(SelectSnapKv(kv, p, q).status(), "num_query_heads");
  expect_invalid(SelectSnapKv(kv, good, std::span<const float>(q).subspan(1)).status(),
                 "obs_queries");
  std::vector<float> bad_q = q;
  bad_q[3] = std::nanf("");
  expect_invalid(SelectSnapKv(kv, good, bad_q).status(), "obs_queries");

  std::vector<float> scores(2 * 40, 1.0f);
  expect_invalid(SelectH2o(1, 2, 40, {.n_sink = 4, .heavy = 4, .recent = 4},
                           std::span<const float>(scores).subspan(0, 79))
                     .status(),
                 "scores");
  expect_invalid(SelectH2o(1, 2, 40, {.n_sink = 0, .heavy = 0, .recent = 0}, scores).status(),
                 "n_sink");
  scores[7] = INFINITY;
  expect_invalid(SelectH2o(1, 2, 40, {.n_sink = 4, .heavy = 4, .recent = 4}, scores).status(),
                 "scores");
  expect_invalid(SelectSinkWindow(1, 1, 10, {.n_sink = 0, .window = 0}).status(), "window");
  expect_invalid(SelectSinkWindow(1, 1, 0, {.n_sink = 4, .window = 4}).status(), "num_tokens");
  expect_invalid(SelectSinkWindow(0, 1, 10, {.n_sink = 4, .window = 4}).status(), "num_layers");
}

TEST(ReindexTest, ReRotationEqualsRopeAtNewPosition) {
  std::mt19937 rng(9);
  const uint32_t d = 16, T = 50;
  const float theta = 10000.0f;
  // Base (pre-RoPE) keys; stored keys are RoPE'd at their original positions.
  KvSequence base = RandomKv(rng, 1, 1, d, T);
  KvSequence stored = base;
  for (uint32_t t = 0; t < T; ++t) RopeRotate(stored.Key(0, 0, t), d, t, theta);
  auto sel = SelectSinkWindow(1, 1, T, {.n_sink = 4, .window = 6});
  ASSERT_OK(sel);
  auto g = Gather(stored, *sel);
  ASSERT_OK(g);
  ASSERT_OK(ReindexKeys(*g, *sel, theta));
  for (uint32_t t = 0; t < sel->kept; ++t) {
    std::vector<float> want(base.Key(0, 0, sel->Head(0, 0)[t]),
                            base.Key(0, 0, sel->Head(0, 0)[t]) + d);
    RopeRotate(want.data(), d, t, theta);
    for (uint32_t c = 0; c < d; ++c) EXPECT_NEAR(g->Key(0, 0, t)[c], want[c], 1e-4f) << t;
    // Values are never rotated.
    for (uint32_t c = 0; c < d; ++c) {
      EXPECT_EQ(g->Value(0, 0, t)[c], stored.Value(0, 0, sel->Head(0, 0)[t])[c]);
    }
  }
  // Sinks (positions 0..3 -> 0..3) are unchanged bit for bit.
  for (uint32_t c = 0; c < d; ++c) EXPECT_EQ(g->Key(0, 0, 2)[c], stored.Key(0, 0, 2)[c]);
}

TEST(RawTest, Fp16AndBf16RoundTripAndBlocksConcatenate) {
  for (Dtype dtype : {Dtype::kFp16, Dtype::kBf16}) {
    Layout layout{.num_layers = 2, .num_kv_heads = 2, .head_dim = 4, .tokens_per_block = 3,
                  .dtype = dtype, .sink_tokens = 1};
    std::mt19937 rng(13);
    // Random finite source-dtype bit patterns.
    std::vector<std::string> blocks;
    for (uint32_t tokens : {3u, 3u, 2u}) {
      std::string raw(layout.BytesPerToken() * tokens, '\0');
      for (size_t i = 0; i < raw.size(); i += 2) {
        uint16_t e;
        do {
          e = static_cast<uint16_t>(rng());
        } while (dtype == Dtype::kFp16 ? ((e >> 10) & 0x1f) == 0x1f : ((e >> 7) & 0xff) == 0xff);
        raw[i] = static_cast<char>(e & 0xff);
        raw[i + 1] = static_cast<char>(e >> 8);
      }
      blocks.push_back(raw);
    }
    auto kv = KvSequenceFromRawBlocks(layout, blocks);
    ASSERT_OK(kv);
    ASSERT_EQ(kv->num_tokens, 8u);
    // Token 4 is token 1 of block 1; compare element (l=1, V, h=1, c=2).
    KvSequence one = *KvSequenceFromRawBlocks(layout, std::vector<std::string>{blocks[1]});
    EXPECT_EQ(kv->Value(1, 1, 4)[2], one.Value(1, 1, 1)[2]);
    // Re-splitting the concatenated sequence back gives the same bytes per block.
    std::string all = KvSequenceToRaw(*kv, dtype);
    auto back = KvSequenceFromRawBlocks(layout, std::vector<std::string>{all});
    ASSERT_OK(back);
    EXPECT_EQ(back->data, kv->data);
    for (size_t b = 0; b < blocks.size(); ++b) {
      auto single = KvSequenceFromRawBlocks(layout, std::vector<std::string>{blocks[b]});
      ASSERT_OK(single);
      EXPECT_EQ(KvSequenceToRaw(*single, dtype), blocks[b]) << DtypeName(dtype) << " " << b;
    }
  }
  Layout layout;
  EXPECT_EQ(KvSequenceFromRawBlocks(layout, std::vector<std::string>{"abc"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RawTest, Fp16RoundingOfFloats) {
  KvSequence kv = KvSequence::Zeros(1, 1, 4, 1);
  kv.data = {1.0f, 65504.0f, 1e6f, 5.960464477539063e-08f, 1.0009765625f, -2.0f, 0.0f, 3e-5f};
  std::string raw = KvSequenceToRaw(kv, Dtype::kFp16);
  auto u16 = [&](int i) {
    return static_cast<uint16_t>(static_cast<uint8_t>(raw[2 * i]) |
                                 static_cast<uint8_t>(raw[2 * i + 1]) << 8);
  };
  EXPECT_EQ(u16(0), 0x3c00);
  EXPECT_EQ(u16(1), 0x7bff);
  EXPECT_EQ(u16(2), 0x7c00);  // overflow -> inf
  EXPECT_EQ(u16(3), 0x0001);  // smallest subnormal
  EXPECT_EQ(u16(4), 0x3c01);
  EXPECT_EQ(u16(5), 0xc000);
  EXPECT_EQ(u16(6), 0x0000);
  EXPECT_EQ(u16(7), 0x01f7);  // 3e-5 = 503.3 * 2^-24 -> subnormal 503
}

TEST(EntryTest, SerializeParseRoundTrip) {
  std::vector<float> scores(2 * 3 * 20);
  std::mt19937 rng(17);
  for (float& s : scores) s = static_cast<float>(rng() % 1000);
  for (bool uniform : {true, false}) {
    auto sel = uniform ? SelectSinkWindow(2, 3, 20, {.n_sink = 4, .window = 4})
                       : SelectH2o(2, 3, 20, {.n_sink = 4, .heavy = 2, .recent = 2}, scores);
    ASSERT_OK(sel);
    // A real blob of the kept tokens (fp16, layout L2 H3 D4, 8 tokens).
    Layout blob_layout{.num_layers = 2, .num_kv_heads = 3, .head_dim = 4,
                       .tokens_per_block = sel->kept, .sink_tokens = 0};
    std::mt19937 brng(1);
    KvSequence kept = RandomKv(brng, 2, 3, 4, sel->kept);
    auto blob = Encode(CodecId::kFp16, blob_layout, 0,
                       AsBytes(KvSequenceToRaw(kept, Dtype::kFp16)));
    ASSERT_OK(blob);
    auto payload = SerializeCompactedEntry(CompactionPolicy::kH2o, PositionPolicy::kReindex,
                                           *sel, *blob);
    ASSERT_OK(payload);
    auto bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload->data()),
                                          payload->size());
    EXPECT_TRUE(IsCompactedEntry(bytes));
    auto entry = ParseCompactedEntry(bytes);
    ASSERT_OK(entry);
    EXPECT_EQ(entry->policy, CompactionPolicy::kH2o);
    EXPECT_EQ(entry->position_policy, PositionPolicy::kReindex);
    EXPECT_EQ(entry->selection.positions, sel->positions);
    EXPECT_EQ(entry->selection.source_tokens, 20u);
    EXPECT_EQ(std::string(entry->blob.begin(), entry->blob.end()), *blob);
    // Every truncation is rejected without crashing.
    for (size_t n = 0; n < payload->size(); ++n) {
      EXPECT_FALSE(ParseCompactedEntry(bytes.subspan(0, n)).ok()) << n;
    }
    // A header claiming huge dimensions is rejected before anything is allocated.
    std::string huge = *payload;
    huge[8] = huge[9] = huge[10] = huge[11] = '\xff';
    EXPECT_FALSE(ParseCompactedEntry(kv::AsBytes(huge)).ok());
    // A blob of another shape is rejected.
    Layout other = blob_layout;
    other.num_kv_heads = 1;
    auto other_blob = Encode(CodecId::kFp16, other, 0,
                             AsBytes(std::string(other.BytesPerToken() * sel->kept, '\0')));
    ASSERT_OK(other_blob);
    auto mismatched = SerializeCompactedEntry(CompactionPolicy::kH2o, PositionPolicy::kReindex,
                                              *sel, *other_blob);
    ASSERT_OK(mismatched);
    EXPECT_FALSE(ParseCompactedEntry(AsBytes(*mismatched)).ok());
    // A corrupted position (not ascending) is rejected.
    std::string bad = *payload;
    bad[24] = 9;
    EXPECT_FALSE(ParseCompactedEntry(std::span<const uint8_t>(
                                         reinterpret_cast<const uint8_t*>(bad.data()), bad.size()))
                     .ok());
  }
}

TEST(EntryTest, KeyIsDeterministicAndDependsOnParams) {
  std::vector<float> s1(8, 1.0f), s2(8, 1.0f);
  s2[3] = 2.0f;
  const std::string a = CompactionParamsString(H2oParams{4, 2, 2}, s1,
                                               PositionPolicy::kKeepOriginal, 0);
  const std::string b = CompactionParamsString(H2oParams{4, 2, 2}, s2,
                                               PositionPolicy::kKeepOriginal, 0);
  EXPECT_NE(a, b);
  EXPECT_EQ(CompactedEntryKey("k", a), CompactedEntryKey("k", a));
  EXPECT_EQ(CompactedEntryKey("k", a).size(), 16u);
  EXPECT_NE(CompactedEntryKey("k", a), CompactedEntryKey("k", b));
  EXPECT_NE(CompactedEntryKey("k", a), CompactedEntryKey("j", a));
  EXPECT_EQ(CompactionParamsString(SinkWindowParams{4, 8}, PositionPolicy::kReindex, 0),
            "sink_window n_sink=4 window=8 pos=reindex theta=500000");
}

}  // namespace
}  // namespace kvtier::kv
