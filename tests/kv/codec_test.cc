#include "kv/codec.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv/half.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::kv {
namespace {

using ::testing::HasSubstr;

Layout MakeLayout(uint32_t layers, uint32_t heads, uint32_t head_dim, uint32_t tokens,
                  Dtype dtype, uint32_t sinks = 4) {
  Layout l;
  l.num_layers = layers;
  l.num_kv_heads = heads;
  l.head_dim = head_dim;
  l.tokens_per_block = tokens;
  l.dtype = dtype;
  l.sink_tokens = sinks;
  return l;
}

// Random KV with key outlier channels (large fixed magnitude per channel) and a few
// large sink values, in the layout's dtype.
std::string RandomBlock(const Layout& layout, uint32_t tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::string raw(uint64_t{tokens} * layout.BytesPerToken(), '\0');
  auto* out = reinterpret_cast<uint16_t*>(raw.data());
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    for (uint32_t kv = 0; kv < 2; ++kv) {
      for (uint32_t h = 0; h < layout.num_kv_heads; ++h) {
        for (uint32_t t = 0; t < tokens; ++t) {
          for (uint32_t c = 0; c < layout.head_dim; ++c) {
            float v = normal(rng);
            if (kv == 0 && c % 7 == 3) v = 12.0f + 0.5f * v;  // outlier channel
            if (t == 0) v *= 8.0f;                              // sink token
            out[layout.Index(l, kv, h, t, c, tokens)] = FloatToDtype(layout.dtype, v);
          }
        }
      }
    }
  }
  return raw;
}

float ValueAt(const std::string& raw, Dtype dtype, uint64_t index) {
  uint16_t v;
  std::memcpy(&v, raw.data() + 2 * index, 2);
  return DtypeToFloat(dtype, v);
}

uint16_t BitsAt(const std::string& raw, uint64_t index) {
  uint16_t v;
  std::memcpy(&v, raw.data() + 2 * index, 2);
  return v;
}

// Half an ulp of the destination dtype at magnitude |a|.
float HalfUlp(Dtype dtype, float a) {
  const int mant_bits = dtype == Dtype::kFp16 ? 10 : 7;
  a = std::fabs(a);
  int e = a > 0 ? static_cast<int>(std::floor(std::log2(a))) : -30;
  if (dtype == Dtype::kFp16 && e < -14) e = -14;
  return std::ldexp(1.0f, e - mant_bits - 1);
}

// Relative rounding-up slack of a 16-bit scale in dtype.
float ScaleSlack(Dtype dtype) { return dtype == Dtype::kFp16 ? 0x1p-10f : 0x1p-7f; }

struct Case {
  CodecId codec;
  Dtype dtype;
  uint32_t layers, heads, head_dim, tokens, block_index;
};

std::string CaseName(const Case& c) {
  return std::string(CodecName(c.codec)) + "/" + DtypeName(c.dtype) + "/L" +
         std::to_string(c.layers) + "H" + std::to_string(c.heads) + "D" +
         std::to_string(c.head_dim) + "T" + std::to_string(c.tokens) + "/b" +
         std::to_string(c.block_index);
}

// Checks that every element of `decoded` is within the codec's error bound of `raw`.
// Returns the number of checked elements; fails the test on the first violation.
void CheckErrorBounds(const Case& c, const Layout& layout, uint32_t n, uint32_t r,
                      const std::string& raw, const std::string& decoded) {
  const Dtype dt = c.dtype;
  const uint32_t d = layout.head_dim;
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    for (uint32_t kv = 0; kv < 2; ++kv) {
      for (uint32_t h = 0; h < layout.num_kv_heads; ++h) {
        auto idx = [&](uint32_t t, uint32_t ch) { return layout.Index(l, kv, h, t, ch, n); };
        // Sinks: bit-exact.
        for (uint32_t t = 0; t < r; ++t) {
          for (uint32_t ch = 0; ch < d; ++ch) {
            ASSERT_EQ(BitsAt(raw, idx(t, ch)), BitsAt(decoded, idx(t, ch)))
                << CaseName(c) << " sink token " << t;
          }
        }
        if (c.codec == CodecId::kFp8E4M3) {
          float amax = 0;
          for (uint32_t t = r; t < n; ++t)
            for (uint32_t ch = 0; ch < d; ++ch)
              amax = std::max(amax, std::fabs(ValueAt(raw, dt, idx(t, ch))));
          const float scale = amax / 448.0f;
          for (uint32_t t = r; t < n; ++t) {
            for (uint32_t ch = 0; ch < d; ++ch) {
              const float x = ValueAt(raw, dt, idx(t, ch));
              const float y = ValueAt(decoded, dt, idx(t, ch));
              const float bound = std::fabs(x) * 0x1p-4f + scale * 0x1p-10f +
                                  HalfUlp(dt, x) * 1.01f + 1e-6f * amax;
              ASSERT_LE(std::fabs(x - y), bound) << CaseName(c) << " t" << t << " c" << ch;
            }
          }
          continue;
        }
        // kivi2 (format 2): keys 3 bits per channel over 16 tokens, values 2 bits per token
        // in 16 channels, ranges widened by up to 2 * A / 127 (codec.h ERROR BOUND).
        const bool kivi2 = c.codec == CodecId::kKivi2;
        const bool per_channel_keys =
            kv == 0 && (c.codec == CodecId::kKivi2 || c.codec == CodecId::kKivi4);
        const uint32_t bits = c.codec == CodecId::kInt8                                 ? 8
                              : (c.codec == CodecId::kInt4 || c.codec == CodecId::kKivi4) ? 4
                              : (kivi2 && kv == 0)                                       ? 3
                                                                                         : 2;
        const float qmax = static_cast<float>((1u << bits) - 1);
        const uint32_t chunk = kivi2 ? 16 : 32;  // key chunk (tokens) / value group (channels)
        float set_amax = 0;  // kivi2: A of the group's chunk (keys) or token (values)
        // Enumerate groups as lists of (t, ch).
        auto check_group = [&](const std::vector<std::pair<uint32_t, uint32_t>>& g) {
          float lo = INFINITY, hi = -INFINITY, amax = 0;
          for (auto [t, ch] : g) {
            const float x = ValueAt(raw, dt, idx(t, ch));
            lo = std::min(lo, x);
            hi = std::max(hi, x);
            amax = std::max(amax, std::fabs(x));
          }
          const float widen = kivi2 ? 2 * set_amax / 127 : 0.0f;
          const float step = (hi - lo + widen) / qmax * (1 + ScaleSlack(dt));
          if (kivi2) amax = set_amax + step;
          for (auto [t, ch] : g) {
            const float x = ValueAt(raw, dt, idx(t, ch));
            const float y = ValueAt(decoded, dt, idx(t, ch));
            const float bound = step / 2 + 0x1p-24f + HalfUlp(dt, amax) * 1.01f +
                                (kivi2 ? 0x1p-18f : 1e-6f) * amax;
            ASSERT_LE(std::fabs(x - y), bound)
                << CaseName(c) << " l" << l << " kv" << kv << " h" << h << " t" << t << " c"
                << ch << " x=" << x << " y=" << y << " range=" << hi - lo;
          }
        };
        std::vector<std::pair<uint32_t, uint32_t>> group;
        if (per_channel_keys) {
          for (uint32_t t0 = r; t0 < n; t0 += chunk) {
            set_amax = 0;
            for (uint32_t t = t0; t < std::min(n, t0 + chunk); ++t)
              for (uint32_t ch = 0; ch < d; ++ch)
                set_amax = std::max(set_amax, std::fabs(ValueAt(raw, dt, idx(t, ch))));
            for (uint32_t ch = 0; ch < d; ++ch) {
              group.clear();
              for (uint32_t t = t0; t < std::min(n, t0 + chunk); ++t) group.push_back({t, ch});
              check_group(group);
            }
          }
        } else {
          for (uint32_t t = r; t < n; ++t) {
            set_amax = 0;
            for (uint32_t ch = 0; ch < d; ++ch)
              set_amax = std::max(set_amax, std::fabs(ValueAt(raw, dt, idx(t, ch))));
            for (uint32_t c0 = 0; c0 < d; c0 += chunk) {
              group.clear();
              for (uint32_t ch = c0; ch < std::min(d, c0 + chunk); ++ch) group.push_back({t, ch});
              check_group(group);
            }
          }
        }
      }
    }
  }
}

class CodecRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(CodecRoundTrip, DecodesWithinBoundsAndSizesAreExact) {
  const Case c = GetParam();
  const Layout layout =
      MakeLayout(c.layers, c.heads, c.head_dim, c.tokens, c.dtype, std::min(4u, c.tokens));
  const std::string raw = RandomBlock(layout, c.tokens, 1234 + c.head_dim + c.tokens);
  const CodecId codec = c.codec;
  auto enc = Encode(codec, layout, c.block_index, AsBytes(raw));
  ASSERT_OK(enc) << CaseName(c) << ": " << enc.status();
  const uint32_t r = ProtectedTokens(layout, c.block_index, c.tokens, {});
  EXPECT_EQ(r, c.block_index == 0 ? std::min(4u, c.tokens) : 0u);
  if (codec == CodecId::kLossless) {
    EXPECT_LE(enc->size(), EncodedSize(codec, layout, c.tokens, r));  // an upper bound
  } else {
    EXPECT_EQ(enc->size(), EncodedSize(codec, layout, c.tokens, r));
  }

  auto info = ParseHeader(AsBytes(*enc));
  ASSERT_OK(info);
  EXPECT_EQ(info->codec, codec);
  EXPECT_EQ(info->num_tokens, c.tokens);
  EXPECT_EQ(info->layout.num_layers, c.layers);
  EXPECT_EQ(info->layout.num_kv_heads, c.heads);
  EXPECT_EQ(info->layout.head_dim, c.head_dim);
  EXPECT_EQ(info->layout.tokens_per_block, c.tokens);
  EXPECT_EQ(info->layout.dtype, c.dtype);
  EXPECT_EQ(info->encoded_bytes, enc->size());
  EXPECT_EQ(info->raw_bytes, raw.size());
  const bool is_raw =
      codec == CodecId::kFp16 || codec == CodecId::kBf16 || codec == CodecId::kLossless;
  EXPECT_EQ(info->raw_tokens, is_raw ? c.tokens : r);

  auto dec = DecodeToString(AsBytes(*enc));
  ASSERT_OK(dec);
  ASSERT_EQ(dec->size(), raw.size());
  if (is_raw) {
    EXPECT_EQ(*dec, raw);
    return;
  }
  CheckErrorBounds(c, layout, c.tokens, r, raw, *dec);
  // Deterministic: encoding again yields identical bytes.
  auto enc2 = Encode(codec, layout, c.block_index, AsBytes(raw));
  ASSERT_OK(enc2);
  EXPECT_EQ(*enc, *enc2);
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  struct Shape {
    uint32_t layers, heads, head_dim, tokens;
  };
  const Shape shapes[] = {
      {2, 2, 128, 16},  // the default shape, smaller model
      {1, 2, 8, 16},    // head_dim below one group
      {2, 1, 40, 7},    // short last channel group, odd token count
      {1, 1, 64, 70},   // three key chunks, the last one short
      {1, 2, 96, 33},   // two key chunks, the second holding one token
      {1, 1, 2, 1},     // smallest legal shape
  };
  for (CodecId codec : AllCodecs()) {
    for (Dtype dtype : {Dtype::kFp16, Dtype::kBf16}) {
      if (codec == CodecId::kFp16 && dtype != Dtype::kFp16) continue;
      if (codec == CodecId::kBf16 && dtype != Dtype::kBf16) continue;
      for (const Shape& s : shapes) {
        for (uint32_t block : {0u, 3u}) {
          cases.push_back({codec, dtype, s.layers, s.heads, s.head_dim, s.tokens, block});
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, CodecRoundTrip, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = CaseName(info.param);
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

TEST(CodecTest, NamesRoundTrip) {
  ASSERT_EQ(AllCodecs().size(), 8u);
  EXPECT_STREQ(CodecName(CodecId::kLossless), "lossless");
  for (CodecId codec : AllCodecs()) {
    auto parsed = ParseCodecName(CodecName(codec));
    ASSERT_OK(parsed);
    EXPECT_EQ(*parsed, codec);
  }
  auto bad = ParseCodecName("int3");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("int3"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("kivi4, lossless"));
}

TEST(CodecTest, ExactSizesForDefaultLayout) {
  const Layout layout;  // L32 H8 D128 T16 fp16
  const uint64_t slabs = 2 * 32 * 8;
  EXPECT_EQ(EncodedSize(CodecId::kFp16, layout, 16, 4), 40 + 2u * 1024 * 1024);
  EXPECT_EQ(EncodedSize(CodecId::kFp8E4M3, layout, 16, 0), 40 + slabs * (4 + 16 * 128));
  EXPECT_EQ(EncodedSize(CodecId::kInt8, layout, 16, 0), 40 + slabs * (16 * 4 * 4 + 16 * 128));
  EXPECT_EQ(EncodedSize(CodecId::kInt4, layout, 16, 0), 40 + slabs * (16 * 4 * 4 + 16 * 64));
  // kivi2, 16 tokens: keys one chunk: A, 128 min and 128 max codes, 128 channels x 6 bytes
  // of 3-bit codes; values per token: A, 8 min and 8 max codes, 32 bytes of 2-bit codes.
  EXPECT_EQ(EncodedSize(CodecId::kKivi2, layout, 16, 0),
            40 + 256 * (2 + 2 * 128 + 128 * 6) + 256 * 16 * (2 + 2 * 8 + 32));
  // Sinks add raw tokens and remove quantized ones.
  EXPECT_EQ(EncodedSize(CodecId::kInt8, layout, 16, 4),
            40 + 4 * layout.BytesPerToken() + slabs * (12 * 4 * 4 + 12 * 128));
}

TEST(CodecTest, Kivi2BitsPerElement) {
  Layout layout;  // L32 H8 D128
  layout.tokens_per_block = 32;
  const uint64_t elements = layout.ElementsPerBlock();
  const std::string raw = RandomBlock(layout, 32, 7);
  auto enc = Encode(CodecId::kKivi2, layout, /*block_index=*/1, AsBytes(raw));
  ASSERT_OK(enc);
  EXPECT_EQ(enc->size(), EncodedSize(CodecId::kKivi2, layout, 32, 0));
  // Per head and 32 tokens: keys 2 chunks of (2 + 256 + 128 * 6) bytes, values 32 tokens of
  // (2 + 16 + 32) bytes: 3652 bytes for 8192 elements = 3.566 bits; the header adds 0.0002.
  const double body_bits = 8.0 * (enc->size() - kEncodedHeaderBytes) / elements;
  EXPECT_EQ(body_bits, 8.0 * 3652 / 8192);
  EXPECT_LE(8.0 * enc->size() / elements, 3.567);
  // kivi4 and int4: 5 bits; int8: 9 bits.
  EXPECT_EQ(8.0 * (EncodedSize(CodecId::kKivi4, layout, 32, 0) - kEncodedHeaderBytes) / elements,
            5.0);
  EXPECT_EQ(8.0 * (EncodedSize(CodecId::kInt4, layout, 32, 0) - kEncodedHeaderBytes) / elements,
            5.0);
  EXPECT_EQ(8.0 * (EncodedSize(CodecId::kInt8, layout, 32, 0) - kEncodedHeaderBytes) / elements,
            9.0);
}

// SmolLM2-135M's layout (L30 H3 D64, 16-token blocks, 4 sinks; docs/kivi2.md): a
// 1,024-token sequence in kivi2 takes at most 3.7 bits per value, headers and sinks counted.
TEST(CodecTest, Kivi2StaysUnder3Point7BitsOnSmolLM2) {
  const Layout layout = MakeLayout(30, 3, 64, 16, Dtype::kFp16, 4);
  // Steady state: keys 514 bytes, values 16 * 26 bytes per head and block = 3.633 bits.
  EXPECT_EQ(EncodedSize(CodecId::kKivi2, layout, 16, 0), 40 + 90 * (514 + 16 * 26));
  const uint64_t bytes = EncodedSize(CodecId::kKivi2, layout, 16, 4) +
                         63 * EncodedSize(CodecId::kKivi2, layout, 16, 0);
  const double bits = 8.0 * bytes / (1024 * layout.ElementsPerToken());
  EXPECT_GT(bits, 3.68);
  EXPECT_LE(bits, 3.7);
}

// A kivi2 blob in format version 1 (2-bit keys per channel over 32 tokens, values per token
// in 32 channels, fp16 scale and min per group) written before format version 2 still
// decodes. Built by hand: L1 H1 D32, 4 tokens, every scale 1 and min -1.
TEST(CodecTest, Kivi2FormatVersion1StillDecodes) {
  const Layout layout = MakeLayout(1, 1, 32, 4, Dtype::kFp16, 0);
  const uint16_t one = FloatToHalf(1.0f), minus_one = FloatToHalf(-1.0f);
  std::string body;
  auto put16 = [&](uint16_t v) { body.append(reinterpret_cast<const char*>(&v), 2); };
  for (int i = 0; i < 32; ++i) put16(one);        // key scales, one chunk x 32 channels
  for (int i = 0; i < 32; ++i) put16(minus_one);  // key mins
  body.append(32, static_cast<char>(0b11100100));  // token i of every channel: code i
  for (int i = 0; i < 4; ++i) put16(one);         // value scales, 4 tokens x 1 group
  for (int i = 0; i < 4; ++i) put16(minus_one);   // value mins
  for (int t = 0; t < 4; ++t) body.append(8, static_cast<char>(0b11100100));  // channel c: c % 4
  std::string blob(kEncodedHeaderBytes, '\0');
  EncodeRawHeader(CodecId::kKivi2, layout, 4, 0, body.size(),
                  reinterpret_cast<uint8_t*>(blob.data()));
  blob[4] = 1;  // format version 1
  blob += body;
  auto info = ParseHeader(AsBytes(blob));
  ASSERT_OK(info);
  EXPECT_EQ(info->format_version, 1);
  auto dec = DecodeToString(AsBytes(blob));
  ASSERT_OK(dec);
  for (uint32_t t = 0; t < 4; ++t) {
    for (uint32_t c = 0; c < 32; ++c) {
      ASSERT_EQ(ValueAt(*dec, Dtype::kFp16, layout.Index(0, 0, 0, t, c, 4)), t - 1.0f);
      ASSERT_EQ(ValueAt(*dec, Dtype::kFp16, layout.Index(0, 1, 0, t, c, 4)), c % 4 - 1.0f);
    }
  }
  // What kivi2 writes today is format version 2; other codecs stay version 1.
  const std::string raw = RandomBlock(layout, 4, 3);
  EXPECT_EQ(ParseHeader(AsBytes(*Encode(CodecId::kKivi2, layout, 1, AsBytes(raw))))->format_version, 2);
  EXPECT_EQ(ParseHeader(AsBytes(*Encode(CodecId::kKivi4, layout, 1, AsBytes(raw))))->format_version, 1);
}

TEST(CodecTest, SinkTokensOnlyInBlockZeroAndOnlyWithKeepSinks) {
  const Layout layout = MakeLayout(1, 1, 32, 8, Dtype::kFp16, 3);
  CodecOptions off;
  off.keep_sinks = false;
  EXPECT_EQ(ProtectedTokens(layout, 0, 8, {}), 3u);
  EXPECT_EQ(ProtectedTokens(layout, 0, 2, {}), 2u);
  EXPECT_EQ(ProtectedTokens(layout, 1, 8, {}), 0u);
  EXPECT_EQ(ProtectedTokens(layout, 0, 8, off), 0u);

  const std::string raw = RandomBlock(layout, 8, 99);
  auto with = Encode(CodecId::kKivi2, layout, 0, AsBytes(raw));
  auto without = Encode(CodecId::kKivi2, layout, 0, AsBytes(raw), off);
  ASSERT_OK(with);
  ASSERT_OK(without);
  EXPECT_GT(with->size(), without->size());
  auto dec = DecodeToString(AsBytes(*without));
  ASSERT_OK(dec);
  // Without protection the large sink token is quantized and no longer exact.
  bool all_exact = true;
  for (uint32_t c = 0; c < 32; ++c) {
    all_exact &= BitsAt(raw, layout.Index(0, 0, 0, 0, c, 8)) ==
                 BitsAt(*dec, layout.Index(0, 0, 0, 0, c, 8));
  }
  EXPECT_FALSE(all_exact);
}

TEST(CodecTest, ConstantGroupsDecodeExactly) {
  for (Dtype dtype : {Dtype::kFp16, Dtype::kBf16}) {
    const Layout layout = MakeLayout(1, 1, 64, 16, dtype, 0);
    std::string raw(layout.BytesPerBlock(), '\0');
    auto* p = reinterpret_cast<uint16_t*>(raw.data());
    for (uint64_t i = 0; i < layout.ElementsPerBlock(); ++i) {
      p[i] = FloatToDtype(dtype, -3.25f);
    }
    for (CodecId codec : {CodecId::kInt8, CodecId::kInt4, CodecId::kKivi2, CodecId::kKivi4,
                          CodecId::kFp8E4M3}) {
      auto enc = Encode(codec, layout, 1, AsBytes(raw));
      ASSERT_OK(enc);
      auto dec = DecodeToString(AsBytes(*enc));
      ASSERT_OK(dec);
      EXPECT_EQ(*dec, raw) << CodecName(codec) << " " << DtypeName(dtype);
    }
  }
}

TEST(CodecTest, Fp8KeepsNanSaturatesInfAndUsesCalibratedScales) {
  const Layout layout = MakeLayout(1, 1, 8, 2, Dtype::kFp16, 0);
  std::vector<uint16_t> v(layout.ElementsPerBlock(), FloatToHalf(1.0f));
  v[0] = 0x7e00;                    // NaN
  v[1] = 0x7c00;                    // +inf
  v[2] = FloatToHalf(-2.0f);        // finite amax = 2 (K slab)
  v[16] = FloatToHalf(100.0f);      // V slab
  std::string raw(reinterpret_cast<const char*>(v.data()), v.size() * 2);
  auto enc = Encode(CodecId::kFp8E4M3, layout, 1, AsBytes(raw));
  ASSERT_OK(enc);
  auto dec = DecodeToString(AsBytes(*enc));
  ASSERT_OK(dec);
  EXPECT_TRUE(std::isnan(ValueAt(*dec, Dtype::kFp16, 0)));
  EXPECT_EQ(ValueAt(*dec, Dtype::kFp16, 1), 2.0f);  // saturates at 448 * (2 / 448)
  EXPECT_EQ(ValueAt(*dec, Dtype::kFp16, 2), -2.0f);
  EXPECT_EQ(ValueAt(*dec, Dtype::kFp16, 3), 1.0f);
  EXPECT_EQ(ValueAt(*dec, Dtype::kFp16, 16), 100.0f);

  CodecOptions opts;
  opts.fp8_scales = {1.0f / 64, 1.0f};  // K: max 7, V: max 448
  auto cal = Encode(CodecId::kFp8E4M3, layout, 1, AsBytes(raw), opts);
  ASSERT_OK(cal);
  auto dcal = DecodeToString(AsBytes(*cal));
  ASSERT_OK(dcal);
  EXPECT_EQ(ValueAt(*dcal, Dtype::kFp16, 1), 7.0f);     // inf saturates at 448 / 64
  EXPECT_EQ(ValueAt(*dcal, Dtype::kFp16, 2), -2.0f);
  EXPECT_EQ(ValueAt(*dcal, Dtype::kFp16, 16), 96.0f);   // 100 rounds to 96 in e4m3

  opts.fp8_scales = {1.0f};
  auto wrong = Encode(CodecId::kFp8E4M3, layout, 1, AsBytes(raw), opts);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("fp8_scales"));
  opts.fp8_scales = {1.0f, -1.0f};
  wrong = Encode(CodecId::kFp8E4M3, layout, 1, AsBytes(raw), opts);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("fp8_scales[1]"));
}

TEST(CodecTest, Fp8ScaleIsPerLayerKvHead) {
  // Slabs of very different magnitude: each keeps ~4 significant bits, which a shared
  // (per-tensor) scale would not give the small slabs (they would fall to subnormals).
  const Layout layout = MakeLayout(2, 2, 16, 4, Dtype::kFp16, 0);
  std::vector<uint16_t> v(layout.ElementsPerBlock());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.5f, 1.0f);
  const uint32_t slab = 4 * 16;
  for (size_t i = 0; i < v.size(); ++i) {
    const float magnitude = (i / slab) % 2 == 0 ? 0.001f : 300.0f;
    v[i] = FloatToHalf(magnitude * u(rng));
  }
  std::string raw(reinterpret_cast<const char*>(v.data()), v.size() * 2);
  auto enc = Encode(CodecId::kFp8E4M3, layout, 1, AsBytes(raw));
  ASSERT_OK(enc);
  EXPECT_EQ(enc->size(), 40 + 8 * (4 + slab));
  auto dec = DecodeToString(AsBytes(*enc));
  ASSERT_OK(dec);
  for (size_t i = 0; i < v.size(); ++i) {
    const float x = HalfToFloat(v[i]);
    ASSERT_NEAR(ValueAt(*dec, Dtype::kFp16, i), x, std::fabs(x) / 16 + HalfUlp(Dtype::kFp16, x))
        << i;
  }
}

TEST(CodecTest, IntegerCodecsRejectNonFinite) {
  const Layout layout = MakeLayout(1, 1, 8, 2, Dtype::kBf16, 0);
  std::vector<uint16_t> v(layout.ElementsPerBlock(), FloatToBf16(1.0f));
  v[5] = 0x7f80;  // +inf
  const std::string raw(reinterpret_cast<const char*>(v.data()), v.size() * 2);
  for (CodecId codec : {CodecId::kInt8, CodecId::kInt4, CodecId::kKivi2, CodecId::kKivi4}) {
    auto enc = Encode(codec, layout, 1, AsBytes(raw));
    ASSERT_FALSE(enc.ok()) << CodecName(codec);
    EXPECT_EQ(enc.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(enc.status().message()), HasSubstr("NaN"));
  }
  // bf16 magnitudes near FLT_MAX would overflow code * scale + min: refused as well.
  v[5] = FloatToBf16(1e38f);
  std::string huge(reinterpret_cast<const char*>(v.data()), v.size() * 2);
  EXPECT_FALSE(Encode(CodecId::kInt8, layout, 1, AsBytes(huge)).ok());
  v[5] = FloatToBf16(-5e37f);  // below 2^126: fine, and decodes finite
  std::string big(reinterpret_cast<const char*>(v.data()), v.size() * 2);
  auto big_enc = Encode(CodecId::kInt8, layout, 1, AsBytes(big));
  ASSERT_OK(big_enc);
  auto big_dec = DecodeToString(AsBytes(*big_enc));
  ASSERT_OK(big_dec);
  for (uint64_t i = 0; i < v.size(); ++i) {
    ASSERT_TRUE(std::isfinite(ValueAt(*big_dec, Dtype::kBf16, i))) << i;
  }
  EXPECT_NEAR(ValueAt(*big_dec, Dtype::kBf16, 5), -5e37f, 5e37f / 256);
  // Raw codecs store them as is.
  auto enc = Encode(CodecId::kBf16, layout, 1, AsBytes(raw));
  ASSERT_OK(enc);
  EXPECT_EQ(*DecodeToString(AsBytes(*enc)), raw);
}

TEST(CodecTest, EncodeValidationErrorsNameTheField) {
  Layout layout = MakeLayout(1, 1, 8, 2, Dtype::kFp16, 2);
  const std::string raw(layout.BytesPerBlock(), '\0');
  struct Bad {
    Layout layout;
    const char* field;
  };
  std::vector<Bad> bads;
  // `layout` with one change that Encode must reject naming `field`.
  auto add_bad = [&](const char* field, auto change) {
    Layout b = layout;
    change(b);
    bads.push_back({b, field});
  };
  add_bad("num_layers", [](Layout& b) { b.num_layers = 0; });
  add_bad("num_kv_heads", [](Layout& b) { b.num_kv_heads = 0; });
  add_bad("head_dim", [](Layout& b) { b.head_dim = 7; });
  add_bad("tokens_per_block", [](Layout& b) { b.tokens_per_block = 0; });
  add_bad("sink_tokens", [](Layout& b) { b.sink_tokens = 3; });
  add_bad("dtype", [](Layout& b) { b.dtype = static_cast<Dtype>(9); });
  add_bad("1 GiB", [](Layout& b) {
    b.num_layers = 1u << 31;  // would wrap a naive 64-bit size product
    b.num_kv_heads = 1u << 31;
    b.head_dim = 1u << 30;
    b.tokens_per_block = 1u << 20;
  });
  for (const Bad& bad : bads) {
    auto enc = Encode(CodecId::kInt8, bad.layout, 0, AsBytes(raw));
    ASSERT_FALSE(enc.ok()) << bad.field;
    EXPECT_EQ(enc.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(enc.status().message()), HasSubstr(bad.field));
  }
  auto odd = Encode(CodecId::kInt8, layout, 0, AsBytes(raw.substr(0, raw.size() - 2)));
  ASSERT_FALSE(odd.ok());
  EXPECT_THAT(std::string(odd.status().message()), HasSubstr("raw payload size"));
  auto empty = Encode(CodecId::kInt8, layout, 0, {});
  ASSERT_FALSE(empty.ok());
  auto mismatch = Encode(CodecId::kBf16, layout, 0, AsBytes(raw));
  ASSERT_FALSE(mismatch.ok());
  EXPECT_THAT(std::string(mismatch.status().message()), HasSubstr("layout.dtype"));
}

TEST(CodecTest, PartialAndOversizedPayloadsEncode) {
  const Layout layout = MakeLayout(2, 2, 16, 8, Dtype::kFp16);
  for (uint32_t tokens : {1u, 5u, 12u}) {
    const std::string raw = RandomBlock(layout, tokens, tokens);
    auto enc = Encode(CodecId::kInt4, layout, 0, AsBytes(raw));
    ASSERT_OK(enc);
    auto info = ParseHeader(AsBytes(*enc));
    ASSERT_OK(info);
    EXPECT_EQ(info->num_tokens, tokens);
    EXPECT_EQ(info->raw_tokens, std::min(tokens, 4u));
  }
}

TEST(CodecTest, DecodeRejectsWrongOutputSize) {
  const Layout layout = MakeLayout(1, 1, 8, 4, Dtype::kFp16);
  const std::string raw = RandomBlock(layout, 4, 1);
  auto enc = Encode(CodecId::kInt8, layout, 0, AsBytes(raw));
  ASSERT_OK(enc);
  std::string out(raw.size() + 2, '\0');
  absl::Status st = Decode(AsBytes(*enc), {reinterpret_cast<uint8_t*>(out.data()), out.size()});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("raw_out"));
}

TEST(CodecTest, UnalignedBuffersGiveTheSameResult) {
  const Layout layout = MakeLayout(2, 1, 40, 9, Dtype::kBf16);
  const std::string raw = RandomBlock(layout, 9, 5);
  for (CodecId codec : {CodecId::kFp8E4M3, CodecId::kInt8, CodecId::kKivi2}) {
    auto aligned = Encode(codec, layout, 0, AsBytes(raw));
    ASSERT_OK(aligned);
    std::string shifted_raw = "x" + raw;
    auto unaligned = Encode(codec, layout, 0, AsBytes(shifted_raw).subspan(1));
    ASSERT_OK(unaligned);
    EXPECT_EQ(*aligned, *unaligned);
    std::string shifted_enc = "x" + *aligned;
    std::string out_buf(raw.size() + 1, '\0');
    ASSERT_OK(Decode(AsBytes(shifted_enc).subspan(1),
                       {reinterpret_cast<uint8_t*>(out_buf.data()) + 1, raw.size()}));
    EXPECT_EQ(out_buf.substr(1), *DecodeToString(AsBytes(*aligned))) << CodecName(codec);
  }
}

TEST(CodecTest, ParseHeaderRejectsBadHeaders) {
  const Layout layout = MakeLayout(1, 1, 8, 4, Dtype::kFp16);
  const std::string raw = RandomBlock(layout, 4, 1);
  const std::string good = *Encode(CodecId::kKivi4, layout, 1, AsBytes(raw));
  ASSERT_OK(ParseHeader(AsBytes(good)));
  auto with = [&](size_t offset, uint8_t value) {
    std::string s = good;
    s[offset] = static_cast<char>(value);
    return s;
  };
  auto message = [](const std::string& blob) {
    auto info = ParseHeader(AsBytes(blob));
    EXPECT_FALSE(info.ok());
    return std::string(info.status().message());
  };
  EXPECT_THAT(message(with(0, 'X')), HasSubstr("magic"));
  EXPECT_THAT(message(with(4, 2)), HasSubstr("only defined for kivi2"));
  EXPECT_THAT(message(with(4, 3)), HasSubstr("version 3 is not supported"));
  EXPECT_THAT(message(with(6, 0)), HasSubstr("codec"));
  EXPECT_THAT(message(with(6, 9)), HasSubstr("unknown codec"));
  EXPECT_THAT(message(with(6, 8)), HasSubstr("raw_tokens"));  // lossless needs r == n
  EXPECT_THAT(message(with(7, 3)), HasSubstr("dtype"));
  EXPECT_THAT(message(with(6, 1)), HasSubstr("raw_tokens"));  // fp16 needs r == n
  EXPECT_THAT(message(with(16, 7)), HasSubstr("head_dim"));
  EXPECT_THAT(message(with(24, 9)), HasSubstr("raw_tokens"));
  EXPECT_THAT(message(with(28, 1)), HasSubstr("reserved"));
  EXPECT_THAT(message(with(20, 5)), HasSubstr("implies"));
  EXPECT_THAT(message(with(32, 1)), HasSubstr("body_bytes"));
  EXPECT_THAT(message(good.substr(0, 39)), HasSubstr("header"));
  EXPECT_THAT(message(good.substr(0, good.size() - 1)), HasSubstr("body_bytes"));
  EXPECT_THAT(message(good + "z"), HasSubstr("body_bytes"));
}

}  // namespace
}  // namespace kvtier::kv
