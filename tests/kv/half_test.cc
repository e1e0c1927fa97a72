#include "kv/half.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier::kv {
namespace {

// ---- Independent references, straight from the format definitions. ----

// fp16 value of bits h: (-1)^s * 2^(e-15) * (1 + m/1024), subnormal 2^-14 * m/1024.
double RefHalfValue(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) {
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(m / 1024.0, -14);
  } else {
    v = std::ldexp(1.0 + m / 1024.0, e - 15);
  }
  return s ? -v : v;
}

// E4M3FN value of code c per the OCP spec: bias 7, S.1111.111 is NaN, no infinities.
double RefFp8Value(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  double v;
  if (e == 15 && m == 7) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(m / 8.0, -6);
  } else {
    v = std::ldexp(1.0 + m / 8.0, e - 7);
  }
  return s ? -v : v;
}

// Round-to-nearest-even by brute force over a sorted list of candidate (value, code) for
// non-negative finite values; `overflow_code` for values at or beyond the rounding
// boundary above the largest finite value (`saturate` picks the max code instead).
template <typename Code>
Code RefRound(double a, const std::vector<std::pair<double, Code>>& grid, double overflow_at,
              Code overflow_code) {
  if (a >= overflow_at) return overflow_code;
  auto it = std::lower_bound(grid.begin(), grid.end(), std::make_pair(a, Code{0}),
                             [](auto& x, auto& y) { return x.first < y.first; });
  if (it == grid.end()) return grid.back().second;
  if (it->first == a || it == grid.begin()) return it->second;
  auto lo = std::prev(it);
  const double dlo = a - lo->first, dhi = it->first - a;
  if (dlo < dhi) return lo->second;
  if (dhi < dlo) return it->second;
  return (lo->second & 1) == 0 ? lo->second : it->second;  // tie: even code
}

std::vector<std::pair<double, uint16_t>> HalfGrid() {
  std::vector<std::pair<double, uint16_t>> g;
  for (uint32_t h = 0; h < 0x7c00; ++h) g.push_back({RefHalfValue(static_cast<uint16_t>(h)), h});
  return g;
}

std::vector<std::pair<double, uint8_t>> Fp8Grid() {
  std::vector<std::pair<double, uint8_t>> g;
  for (uint32_t c = 0; c < 0x7f; ++c) g.push_back({RefFp8Value(static_cast<uint8_t>(c)), c});
  return g;
}

uint16_t RefFloatToHalf(float f, const std::vector<std::pair<double, uint16_t>>& grid) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  // 65504 + half ulp (16) = 65520 rounds to inf.
  return static_cast<uint16_t>(sign | RefRound<uint16_t>(std::fabs(double{f}), grid, 65520.0,
                                                         0x7c00));
}

uint8_t RefFloatToFp8(float f, const std::vector<std::pair<double, uint8_t>>& grid) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return static_cast<uint8_t>(sign | 0x7f);
  return static_cast<uint8_t>(
      sign | RefRound<uint8_t>(std::fabs(double{f}), grid, 448.0, 0x7e));  // saturating
}

uint16_t RefFloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  const uint32_t lo = u & 0xffff0000u;
  const double a = f, vlo = BitsToFloat(lo);
  const uint32_t hi = lo + 0x10000u;
  // The value above the largest finite bf16 is 2^128 (rounds to inf).
  const double vhi = (hi & 0x7fffffffu) == 0x7f800000u
                         ? std::copysign(std::ldexp(1.0, 128), a)
                         : double{BitsToFloat(hi)};
  const double dlo = std::fabs(a - vlo), dhi = std::fabs(vhi - a);
  if (dlo < dhi) return static_cast<uint16_t>(lo >> 16);
  if (dhi < dlo) return static_cast<uint16_t>(hi >> 16);
  return static_cast<uint16_t>(((lo >> 16) & 1) == 0 ? lo >> 16 : hi >> 16);
}

std::vector<float> InterestingFloats(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::vector<float> v;
  for (size_t i = 0; i < n; ++i) {
    switch (i % 4) {
      case 0: v.push_back(BitsToFloat(static_cast<uint32_t>(rng()))); break;  // any bits
      case 1: {  // fp16 range, log-uniform magnitude
        std::uniform_real_distribution<float> e(-26.0f, 17.0f);
        v.push_back((rng() & 1 ? -1.0f : 1.0f) * std::exp2(e(rng)));
        break;
      }
      case 2: {  // exact ties between two fp16 values: midpoints
        const uint16_t h = static_cast<uint16_t>(rng() % 0x7bff);
        v.push_back(static_cast<float>((RefHalfValue(h) + RefHalfValue(h + 1)) / 2));
        break;
      }
      default: {  // e4m3 range
        std::uniform_real_distribution<float> e(-12.0f, 10.0f);
        v.push_back((rng() & 1 ? -1.0f : 1.0f) * std::exp2(e(rng)));
      }
    }
  }
  return v;
}

TEST(HalfTest, HalfToFloatMatchesDefinitionForAllCodes) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> bulk(65536), scalar(65536);
  HalfToFloatN(all.data(), bulk.data(), all.size());
  internal::HalfToFloatNScalar(all.data(), scalar.data(), all.size());
  for (uint32_t h = 0; h < 65536; ++h) {
    const double ref = RefHalfValue(static_cast<uint16_t>(h));
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << h;
    } else {
      ASSERT_EQ(double{f}, ref) << h;
      ASSERT_EQ(std::signbit(f), std::signbit(ref)) << h;
      ASSERT_EQ(FloatToHalf(f), h) << "round trip " << h;
    }
    ASSERT_EQ(FloatBits(bulk[h]), FloatBits(f)) << "bulk vs scalar " << h;
    ASSERT_EQ(FloatBits(scalar[h]), FloatBits(f)) << h;
  }
}

TEST(HalfTest, FloatToHalfIsRoundToNearestEven) {
  const auto grid = HalfGrid();
  std::vector<float> in = InterestingFloats(1, 200000);
  for (float f : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e9f,
                  std::numeric_limits<float>::infinity(), 0x1p-24f, 0x1p-25f, 0x1.8p-25f,
                  0x1p-26f, 0x1.ffcp-15f, 0x1.ffep-15f, std::numeric_limits<float>::denorm_min(),
                  1.0009765625f /* 1 + 2^-10 */, 1.00048828125f /* tie -> 1 */,
                  1.00146484375f /* tie -> 1 + 2^-9 */}) {
    in.push_back(f);
  }
  std::vector<uint16_t> bulk(in.size()), scalar(in.size());
  FloatToHalfN(in.data(), bulk.data(), in.size());
  internal::FloatToHalfNScalar(in.data(), scalar.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const float f = in[i];
    const uint16_t h = FloatToHalf(f);
    if (std::isnan(f)) {
      ASSERT_EQ(h & 0x7e00, 0x7e00) << "quiet NaN";
      ASSERT_EQ(h >> 15, FloatBits(f) >> 31);
    } else {
      ASSERT_EQ(h, RefFloatToHalf(f, grid)) << "f=" << f << " bits=" << FloatBits(f);
    }
    ASSERT_EQ(bulk[i], h) << "F16C vs scalar, bits=" << FloatBits(f);
    ASSERT_EQ(scalar[i], h);
  }
  EXPECT_EQ(FloatToHalf(1.00048828125f), 0x3c00);  // tie to even (down)
  EXPECT_EQ(FloatToHalf(1.00146484375f), 0x3c02);  // tie to even (up)
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);        // half of min subnormal: tie to 0
  EXPECT_EQ(FloatToHalf(0x1.8p-25f), 0x0001);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
}

TEST(HalfTest, Bf16IsRoundToNearestEven) {
  std::vector<float> in = InterestingFloats(2, 200000);
  for (float f : {0.0f, -0.0f, std::numeric_limits<float>::max(),
                  -std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), BitsToFloat(0x3f808000u) /* tie */,
                  BitsToFloat(0x3f818000u) /* tie up */, BitsToFloat(0x7f7f8000u)}) {
    in.push_back(f);
  }
  std::vector<uint16_t> bulk(in.size());
  std::vector<float> back(in.size());
  FloatToBf16N(in.data(), bulk.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const float f = in[i];
    const uint16_t b = FloatToBf16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(Bf16ToFloat(b)));
      ASSERT_EQ(b & 0x40, 0x40);
    } else {
      ASSERT_EQ(b, RefFloatToBf16(f)) << "bits=" << FloatBits(f);
    }
    ASSERT_EQ(bulk[i], b);
  }
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3f808000u)), 0x3f80);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x3f818000u)), 0x3f82);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x7f7f8000u)), 0x7f80);  // rounds to inf
  Bf16ToFloatN(bulk.data(), back.data(), bulk.size());
  for (size_t i = 0; i < bulk.size(); ++i) {
    ASSERT_EQ(FloatBits(back[i]), uint32_t{bulk[i]} << 16);
  }
}

TEST(HalfTest, BulkPathsHandleEveryTailLength) {
  std::mt19937 rng(3);
  for (size_t n = 0; n < 40; ++n) {
    std::vector<float> in(n);
    for (float& f : in) f = std::uniform_real_distribution<float>(-100, 100)(rng);
    std::vector<uint16_t> h(n + 1, 0xabcd), b(n + 1, 0xabcd);
    FloatToHalfN(in.data(), h.data(), n);
    FloatToBf16N(in.data(), b.data(), n);
    ASSERT_EQ(h[n], 0xabcd) << "wrote past the end";
    ASSERT_EQ(b[n], 0xabcd);
    std::vector<float> hf(n + 1, 7.0f), bf(n + 1, 7.0f);
    HalfToFloatN(h.data(), hf.data(), n);
    Bf16ToFloatN(b.data(), bf.data(), n);
    ASSERT_EQ(hf[n], 7.0f);
    ASSERT_EQ(bf[n], 7.0f);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(h[i], FloatToHalf(in[i]));
      ASSERT_EQ(b[i], FloatToBf16(in[i]));
      ASSERT_EQ(hf[i], HalfToFloat(h[i]));
      ASSERT_EQ(bf[i], Bf16ToFloat(b[i]));
    }
  }
}

TEST(Fp8Test, DecodeMatchesSpecForAll256Codes) {
  int nans = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    const double ref = RefFp8Value(static_cast<uint8_t>(c));
    const float f = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    if (std::isnan(ref)) {
      ++nans;
      ASSERT_TRUE(std::isnan(f)) << c;
      EXPECT_TRUE(c == 0x7f || c == 0xff);
      continue;
    }
    ASSERT_EQ(double{f}, ref) << "code " << c;
    ASSERT_EQ(std::signbit(f), (c & 0x80) != 0) << c;
    ASSERT_EQ(FloatToFp8E4M3(f), c) << "round trip " << c;
  }
  EXPECT_EQ(nans, 2);
  EXPECT_EQ(Fp8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), 0x1p-9f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x08), 0x1p-6f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x77), 240.0f);
}

TEST(Fp8Test, EncodeIsSaturatingRoundToNearestEven) {
  const auto grid = Fp8Grid();
  EXPECT_EQ(FloatToFp8E4M3(0.0f), 0x00);
  EXPECT_EQ(FloatToFp8E4M3(-0.0f), 0x80);
  EXPECT_EQ(FloatToFp8E4M3(0x1p-9f), 0x01);
  EXPECT_EQ(FloatToFp8E4M3(0x1p-10f), 0x00);        // tie between 0 and 2^-9: even
  EXPECT_EQ(FloatToFp8E4M3(0x1.0001p-10f), 0x01);
  EXPECT_EQ(FloatToFp8E4M3(3 * 0x1p-10f), 0x02);    // tie between 1 and 2: even
  EXPECT_EQ(FloatToFp8E4M3(0x1p-6f - 0x1p-10f), 0x08);  // tie 7 / 8 (min normal): even
  EXPECT_EQ(FloatToFp8E4M3(0x1p-6f), 0x08);
  EXPECT_EQ(FloatToFp8E4M3(100.0f), 0x6c);          // tie 96 / 104: even mantissa (96)
  EXPECT_EQ(FloatToFp8E4M3(448.0f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(464.0f), 0x7e);          // would round to 480: saturates
  EXPECT_EQ(FloatToFp8E4M3(1e30f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(-1e30f), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(FloatToFp8E4M3(-std::numeric_limits<float>::quiet_NaN()), 0xff);
  EXPECT_EQ(FloatToFp8E4M3(std::numeric_limits<float>::denorm_min()), 0x00);

  std::vector<float> in = InterestingFloats(4, 200000);
  // Every midpoint between adjacent codes, and the points just around them.
  for (size_t i = 0; i + 1 < grid.size(); ++i) {
    const float mid = static_cast<float>((grid[i].first + grid[i + 1].first) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)}) {
      in.push_back(f);
      in.push_back(-f);
    }
  }
  for (float f : in) {
    ASSERT_EQ(FloatToFp8E4M3(f), RefFloatToFp8(f, grid)) << "f=" << f << " bits=" << FloatBits(f);
  }
}

}  // namespace
}  // namespace kvtier::kv
