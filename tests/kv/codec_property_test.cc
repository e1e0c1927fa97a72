// Adversarial blocks for every codec, through both kernel sets: decoded values are finite
// and within the error bound codec.h documents, element by element, and the baseline and
// AVX2 kernels produce the same blobs and the same decoded bits.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kv/codec.h"
#include "kv/codec_kernels.h"
#include "kv/half.h"
#include "tests/testing/status_matchers.h"

namespace kvtier::kv {
namespace {

using internal::CodecKernels;

// L1 H1 D64 T40: two row groups per token, two key chunks (32 + 8 tokens).
Layout TestLayout(Dtype dtype) {
  Layout l;
  l.num_layers = 1;
  l.num_kv_heads = 1;
  l.head_dim = 64;
  l.tokens_per_block = 40;
  l.dtype = dtype;
  l.sink_tokens = 0;
  return l;
}

// Largest value the min-max codecs accept: fp16 65504, bf16 just below 2^126.
float TopValue(Dtype dtype) { return dtype == Dtype::kFp16 ? 65504.0f : Bf16ToFloat(0x7e7f); }

double MaxFinite(Dtype dtype) {
  return dtype == Dtype::kFp16 ? 65504.0 : static_cast<double>(Bf16ToFloat(0x7f7f));
}

// Spacing of `dtype` at magnitude min(|a|, its largest finite value).
double Ulp(Dtype dtype, double a) {
  a = std::min(std::fabs(a), MaxFinite(dtype));
  if (dtype == Dtype::kFp16) return a < 0x1p-14 ? 0x1p-24 : std::ldexp(1.0, std::ilogb(a) - 10);
  return a < 0x1p-126 ? 0x1p-133 : std::ldexp(1.0, std::ilogb(a) - 7);
}

uint32_t BitsOf(CodecId codec) {
  switch (codec) {
    case CodecId::kInt8:
      return 8;
    case CodecId::kInt4:
    case CodecId::kKivi4:
      return 4;
    case CodecId::kKivi2:
      return 2;
    default:
      return 0;
  }
}

// A block generator: fills `v` (source values as float, exact in the dtype) for a codec
// with `qmax` levels (0 for the codecs without levels).
struct Pattern {
  const char* name;
  std::function<void(Dtype, uint32_t qmax, std::mt19937&, std::vector<float>&)> fill;
};

float Round(Dtype dtype, float f) { return DtypeToFloat(dtype, FloatToDtype(dtype, f)); }

std::vector<Pattern> Patterns() {
  std::vector<Pattern> p;
  auto normal = [](Dtype dt, std::mt19937& rng, std::vector<float>& v) {
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (float& x : v) x = Round(dt, n(rng));
  };
  p.push_back({"all_equal_top", [](Dtype dt, uint32_t, std::mt19937&, std::vector<float>& v) {
                 for (float& x : v) x = TopValue(dt);
               }});
  p.push_back({"all_equal_small", [](Dtype dt, uint32_t, std::mt19937&, std::vector<float>& v) {
                 for (float& x : v) x = Round(dt, -0.3f);
               }});
  p.push_back({"alternating_max", [](Dtype dt, uint32_t, std::mt19937&, std::vector<float>& v) {
                 for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 2 ? -1 : 1) * TopValue(dt);
               }});
  p.push_back(
      {"alternating_max_by_token", [](Dtype dt, uint32_t, std::mt19937&, std::vector<float>& v) {
         for (size_t i = 0; i < v.size(); ++i) v[i] = ((i / 64) % 2 ? -1 : 1) * TopValue(dt);
       }});
  p.push_back({"one_max_among_normal",
               [normal](Dtype dt, uint32_t, std::mt19937& rng, std::vector<float>& v) {
                 normal(dt, rng, v);
                 v[rng() % v.size()] = TopValue(dt);
               }});
  p.push_back({"max_and_min_among_normal",
               [normal](Dtype dt, uint32_t, std::mt19937& rng, std::vector<float>& v) {
                 normal(dt, rng, v);
                 v[rng() % v.size()] = TopValue(dt);
                 v[rng() % v.size()] = -TopValue(dt);
               }});
  p.push_back(
      {"channel_at_max", [normal](Dtype dt, uint32_t, std::mt19937& rng, std::vector<float>& v) {
         normal(dt, rng, v);
         for (size_t i = 5; i < v.size(); i += 64) v[i] = TopValue(dt);
       }});
  p.push_back(
      {"issue_55712", [normal](Dtype dt, uint32_t, std::mt19937& rng, std::vector<float>& v) {
         normal(dt, rng, v);
         for (size_t i = 0; i < v.size(); i += 7) v[i] = Round(dt, 55712.0f);
         for (size_t i = 3; i < v.size(); i += 11) v[i] = Round(dt, -40000.0f);
       }});
  p.push_back({"near_top", [](Dtype dt, uint32_t, std::mt19937& rng, std::vector<float>& v) {
                 std::uniform_real_distribution<float> u(0.5f, 1.0f);
                 for (float& x : v) x = Round(dt, (rng() % 2 ? -1 : 1) * u(rng) * TopValue(dt));
                 for (float& x : v) x = std::min(std::max(x, -TopValue(dt)), TopValue(dt));
               }});
  p.push_back({"subnormals_only", [](Dtype dt, uint32_t, std::mt19937& rng, std::vector<float>& v) {
                 const uint32_t mant = dt == Dtype::kFp16 ? 0x3ff : 0x7f;
                 for (float& x : v) {
                   const auto bits =
                       static_cast<uint16_t>((rng() & mant) | (rng() % 2 ? 0x8000 : 0));
                   x = DtypeToFloat(dt, bits);
                 }
               }});
  p.push_back({"tiny_subnormals", [](Dtype dt, uint32_t, std::mt19937& rng, std::vector<float>& v) {
                 for (float& x : v) x = DtypeToFloat(dt, static_cast<uint16_t>(rng() % 3));
               }});
  p.push_back({"zeros_signed", [](Dtype dt, uint32_t, std::mt19937& rng, std::vector<float>& v) {
                 for (float& x : v) x = DtypeToFloat(dt, rng() % 2 ? 0x8000 : 0);
               }});
  // Per group of 32 consecutive values: a min, a scale target t (a dtype value of random
  // magnitude) and values just below the code boundaries min + (k + 1/2) * t, with the
  // max just below min + qmax * t, so the float scale lands just below or just above t.
  p.push_back(
      {"scale_boundaries", [](Dtype dt, uint32_t qmax, std::mt19937& rng, std::vector<float>& v) {
         if (qmax == 0) qmax = 255;
         std::uniform_int_distribution<int> e(dt == Dtype::kFp16 ? -20 : -120,
                                              dt == Dtype::kFp16 ? 6 : 110);
         std::uniform_real_distribution<float> u(1.0f, 2.0f);
         const float top = TopValue(dt);
         for (size_t g = 0; g < v.size(); g += 32) {
           const float t = Round(dt, std::ldexp(u(rng), e(rng)));
           const float lo = Round(dt, -std::min(top, t * (rng() % 4) * qmax));
           const float hi_raw = lo + t * static_cast<float>(qmax);
           const float hi = Round(dt, std::min(top, hi_raw * (1 - (rng() % 2) * 0x1p-12f)));
           for (size_t i = g; i < std::min(v.size(), g + 32); ++i) {
             const float k = static_cast<float>(rng() % qmax) + 0.5f;
             const float b = lo + k * t;
             // The largest dtype value below the boundary.
             uint16_t bits = FloatToDtype(dt, b);
             float x = DtypeToFloat(dt, bits);
             if (x >= b) x = Round(dt, std::nextafter(b, -INFINITY));
             v[i] = std::min(std::max(x, lo), hi);
           }
           v[g] = lo;
           v[std::min(v.size(), g + 32) - 1] = hi;
         }
       }});
  p.push_back({"large_exponents", [](Dtype dt, uint32_t, std::mt19937& rng, std::vector<float>& v) {
                 std::uniform_int_distribution<int> e(dt == Dtype::kFp16 ? 10 : 100,
                                                      dt == Dtype::kFp16 ? 15 : 125);
                 std::uniform_real_distribution<float> u(1.0f, 2.0f);
                 for (float& x : v) {
                   x = Round(dt, (rng() % 2 ? -1 : 1) * std::ldexp(u(rng), e(rng)));
                   x = std::min(std::max(x, -TopValue(dt)), TopValue(dt));
                 }
               }});
  return p;
}

std::string Pack(Dtype dtype, const std::vector<float>& v) {
  std::string raw(v.size() * 2, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t b = FloatToDtype(dtype, v[i]);
    std::memcpy(raw.data() + 2 * i, &b, 2);
  }
  return raw;
}

float At(Dtype dtype, const std::string& raw, size_t i) {
  uint16_t b;
  std::memcpy(&b, raw.data() + 2 * i, 2);
  return DtypeToFloat(dtype, b);
}

// Checks the documented bound of a min-max codec over one group (element indices).
void CheckGroup(CodecId codec, Dtype dt, const std::vector<size_t>& group, const std::string& raw,
                const std::string& dec, const std::string& where) {
  const double qmax = (1u << BitsOf(codec)) - 1;
  double mn = INFINITY, mx = -INFINITY;
  for (size_t i : group) {
    mn = std::min<double>(mn, At(dt, raw, i));
    mx = std::max<double>(mx, At(dt, raw, i));
  }
  if (mn == mx) {
    for (size_t i : group) ASSERT_EQ(At(dt, dec, i), At(dt, raw, i)) << where << " constant group";
    return;
  }
  const double p = dt == Dtype::kFp16 ? 0x1p-10 : 0x1p-7;
  const double s_min = dt == Dtype::kFp16 ? 0x1p-24 : 0x1p-126;
  const double s = (mx - mn) / qmax * (1 + p + 0x1p-22) + s_min;
  const double a = std::max(std::fabs(mn), std::fabs(mx)) + s;
  const double bound = s / 2 + Ulp(dt, a) / 2 + 0x1p-20 * a;
  for (size_t i : group) {
    const double x = At(dt, raw, i), y = At(dt, dec, i);
    ASSERT_LE(std::fabs(y - x), bound)
        << where << " element " << i << " x=" << x << " y=" << y << " mn=" << mn << " mx=" << mx;
  }
}

// Checks kivi2's (format 2) bound over one group: A is the largest |x| of the group's
// chunk (keys) or token (values), u = A / 127, s = (mx - mn + 2u) / qmax.
void CheckKivi2Group(Dtype dt, double qmax, double A, const std::vector<size_t>& group,
                     const std::string& raw, const std::string& dec, const std::string& where) {
  double mn = INFINITY, mx = -INFINITY;
  for (size_t i : group) {
    mn = std::min<double>(mn, At(dt, raw, i));
    mx = std::max<double>(mx, At(dt, raw, i));
  }
  const double s = (mx - mn + 2 * A / 127) / qmax;
  const double a = A + s;
  const double bound = s / 2 + Ulp(dt, a) / 2 + 0x1p-18 * a;
  for (size_t i : group) {
    const double x = At(dt, raw, i), y = At(dt, dec, i);
    ASSERT_LE(std::fabs(y - x), bound)
        << where << " element " << i << " x=" << x << " y=" << y << " mn=" << mn << " mx=" << mx;
  }
}

void CheckBounds(CodecId codec, const Layout& layout, const std::string& raw,
                 const std::string& dec, const std::string& where) {
  const Dtype dt = layout.dtype;
  const size_t n = raw.size() / 2;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(At(dt, dec, i))) << where << " element " << i;
  }
  if (codec == CodecId::kFp16 || codec == CodecId::kBf16 || codec == CodecId::kLossless) {
    ASSERT_EQ(raw, dec) << where;
    return;
  }
  const uint32_t d = layout.head_dim, t = layout.tokens_per_block;
  for (uint32_t kv = 0; kv < 2; ++kv) {
    auto idx = [&](uint32_t tok, uint32_t ch) { return layout.Index(0, kv, 0, tok, ch, t); };
    const std::string slab = where + (kv == 0 ? " K" : " V");
    if (codec == CodecId::kFp8E4M3) {
      double amax = 0;
      for (uint32_t tok = 0; tok < t; ++tok)
        for (uint32_t ch = 0; ch < d; ++ch)
          amax = std::max<double>(amax, std::fabs(At(dt, raw, idx(tok, ch))));
      const double s = std::max(static_cast<float>(amax) / 448.0f, FLT_MIN);
      for (uint32_t tok = 0; tok < t; ++tok) {
        for (uint32_t ch = 0; ch < d; ++ch) {
          const double x = At(dt, raw, idx(tok, ch)), y = At(dt, dec, idx(tok, ch));
          const double bound = std::fabs(x) * 0x1p-4 + s * 0x1p-10 +
                               Ulp(dt, 1.125 * std::fabs(x) + s) / 2 + 0x1p-20 * amax;
          ASSERT_LE(std::fabs(y - x), bound) << slab << " t" << tok << " c" << ch;
        }
      }
      continue;
    }
    if (codec == CodecId::kKivi2) {
      std::vector<size_t> group;
      if (kv == 0) {  // keys: per channel over chunks of 16 tokens, 3 bits
        for (uint32_t t0 = 0; t0 < t; t0 += 16) {
          const uint32_t t1 = std::min(t, t0 + 16);
          double A = 0;
          for (uint32_t tok = t0; tok < t1; ++tok)
            for (uint32_t ch = 0; ch < d; ++ch) A = std::max<double>(A, std::fabs(At(dt, raw, idx(tok, ch))));
          for (uint32_t ch = 0; ch < d; ++ch) {
            group.clear();
            for (uint32_t tok = t0; tok < t1; ++tok) group.push_back(idx(tok, ch));
            CheckKivi2Group(dt, 7, A, group, raw, dec, slab);
          }
        }
      } else {  // values: per token in groups of 16 channels, 2 bits
        for (uint32_t tok = 0; tok < t; ++tok) {
          double A = 0;
          for (uint32_t ch = 0; ch < d; ++ch) A = std::max<double>(A, std::fabs(At(dt, raw, idx(tok, ch))));
          for (uint32_t c0 = 0; c0 < d; c0 += 16) {
            group.clear();
            for (uint32_t ch = c0; ch < std::min(d, c0 + 16); ++ch) group.push_back(idx(tok, ch));
            CheckKivi2Group(dt, 3, A, group, raw, dec, slab);
          }
        }
      }
      continue;
    }
    const bool by_channel = kv == 0 && codec == CodecId::kKivi4;
    std::vector<size_t> group;
    if (by_channel) {
      for (uint32_t t0 = 0; t0 < t; t0 += 32) {
        for (uint32_t ch = 0; ch < d; ++ch) {
          group.clear();
          for (uint32_t tok = t0; tok < std::min(t, t0 + 32); ++tok) group.push_back(idx(tok, ch));
          CheckGroup(codec, dt, group, raw, dec, slab);
        }
      }
    } else {
      for (uint32_t tok = 0; tok < t; ++tok) {
        for (uint32_t c0 = 0; c0 < d; c0 += 32) {
          group.clear();
          for (uint32_t ch = c0; ch < std::min(d, c0 + 32); ++ch) group.push_back(idx(tok, ch));
          CheckGroup(codec, dt, group, raw, dec, slab);
        }
      }
    }
  }
}

std::vector<const CodecKernels*> KernelSets() {
  std::vector<const CodecKernels*> sets = {&internal::BaselineKernels()};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) sets.push_back(&internal::Avx2Kernels());
  return sets;
}

TEST(CodecPropertyTest, AdversarialBlocksDecodeFiniteAndWithinTheBound) {
  const std::vector<const CodecKernels*> sets = KernelSets();
  int checked = 0;
  for (Dtype dt : {Dtype::kFp16, Dtype::kBf16}) {
    const Layout layout = TestLayout(dt);
    for (CodecId codec : AllCodecs()) {
      if (codec == CodecId::kFp16 && dt != Dtype::kFp16) continue;
      if (codec == CodecId::kBf16 && dt != Dtype::kBf16) continue;
      const uint32_t bits = BitsOf(codec);
      for (const Pattern& pattern : Patterns()) {
        for (uint32_t seed = 1; seed <= 3; ++seed) {
          std::mt19937 rng(seed * 7919 + static_cast<uint32_t>(codec));
          std::vector<float> v(layout.ElementsPerBlock());
          pattern.fill(dt, bits == 0 ? 0 : (1u << bits) - 1, rng, v);
          const std::string raw = Pack(dt, v);
          const std::string where = std::string(CodecName(codec)) + "/" + DtypeName(dt) + "/" +
                                    pattern.name + "/seed" + std::to_string(seed);
          std::string first_blob, first_dec;
          for (const CodecKernels* k : sets) {
            auto enc = internal::EncodeWithKernels(*k, codec, layout, 1, AsBytes(raw), {});
            ASSERT_OK(enc) << where << ": " << enc.status();
            std::string dec(raw.size(), '\0');
            ASSERT_OK(internal::DecodeWithKernels(
                            *k, AsBytes(*enc), {reinterpret_cast<uint8_t*>(dec.data()), dec.size()}))
                << where;
            CheckBounds(codec, layout, raw, dec, where + (k == sets[0] ? "/baseline" : "/avx2"));
            if (k == sets[0]) {
              first_blob = *enc;
              first_dec = dec;
            } else {
              ASSERT_EQ(*enc, first_blob) << where << ": kernel sets encode differently";
              ASSERT_EQ(dec, first_dec) << where << ": kernel sets decode differently";
            }
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 500);
}

// The cases issue 17 reported as decoding to +inf.
TEST(CodecPropertyTest, ReportedOverflowsNowDecodeToTheMaximum) {
  const Layout layout = TestLayout(Dtype::kFp16);
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> one_max(layout.ElementsPerBlock()), alternating(one_max.size());
  for (float& x : one_max) x = HalfToFloat(FloatToHalf(normal(rng)));
  one_max[0] = 65504.0f;
  for (size_t i = 0; i < alternating.size(); ++i) alternating[i] = i % 2 ? -65504.0f : 65504.0f;
  for (const auto* v : {&one_max, &alternating}) {
    const std::string raw = Pack(Dtype::kFp16, *v);
    for (CodecId codec : {CodecId::kInt8, CodecId::kInt4, CodecId::kKivi2, CodecId::kKivi4}) {
      auto enc = Encode(codec, layout, 1, AsBytes(raw));
      ASSERT_OK(enc);
      auto dec = DecodeToString(AsBytes(*enc));
      ASSERT_OK(dec);
      EXPECT_EQ(At(Dtype::kFp16, *dec, 0), 65504.0f) << CodecName(codec);
      for (size_t i = 0; i < v->size(); ++i) {
        ASSERT_TRUE(std::isfinite(At(Dtype::kFp16, *dec, i))) << CodecName(codec) << " " << i;
      }
    }
  }
}

// A calibrated fp8 scale can make a code round up past the dtype's maximum (x / scale =
// 15.6 rounds to the e4m3 value 16): decode saturates at the maximum instead of inf.
TEST(CodecPropertyTest, Fp8RoundingPastTheDtypeMaximumSaturates) {
  for (Dtype dt : {Dtype::kFp16, Dtype::kBf16}) {
    const Layout layout = TestLayout(dt);
    const float top = static_cast<float>(MaxFinite(dt));
    std::vector<float> v(layout.ElementsPerBlock(), top);
    v[1] = -top;
    const std::string raw = Pack(dt, v);
    CodecOptions opts;
    opts.fp8_scales = {top / 15.6f, top / 15.6f};
    auto enc = Encode(CodecId::kFp8E4M3, layout, 1, AsBytes(raw), opts);
    ASSERT_OK(enc);
    auto dec = DecodeToString(AsBytes(*enc));
    ASSERT_OK(dec);
    EXPECT_EQ(At(dt, *dec, 0), top) << DtypeName(dt);
    EXPECT_EQ(At(dt, *dec, 1), -top) << DtypeName(dt);
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_TRUE(std::isfinite(At(dt, *dec, i))) << DtypeName(dt) << " " << i;
    }
  }
}

}  // namespace
}  // namespace kvtier::kv
