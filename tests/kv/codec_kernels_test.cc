// The baseline and AVX2 kernel sets must produce identical bits; the codec picks one at
// run time, so blobs written on one machine decode identically on another.
#include "kv/codec_kernels.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kv/half.h"

namespace kvtier::kv::internal {
namespace {

bool HasAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(CodecKernelsTest, BaselineAndAvx2Agree) {
  if (!HasAvx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  const CodecKernels& a = BaselineKernels();
  const CodecKernels& b = Avx2Kernels();
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (uint32_t d : {2u, 8u, 40u, 64u, 128u, 130u}) {
    for (uint32_t rows : {1u, 3u, 16u, 33u}) {
      const size_t n = size_t{rows} * d;
      std::vector<float> x(n);
      for (float& v : x) v = HalfToFloat(FloatToHalf(normal(rng)));
      const uint32_t ng = (d + 31) / 32;
      std::vector<float> mn1(rows * ng), mx1(rows * ng), mn2(rows * ng), mx2(rows * ng);
      a.min_max_rows(x.data(), rows, d, mn1.data(), mx1.data());
      b.min_max_rows(x.data(), rows, d, mn2.data(), mx2.data());
      ASSERT_TRUE(SameBits(mn1, mn2) && SameBits(mx1, mx2));
      // Reference min/max per row group.
      for (uint32_t r = 0; r < rows; ++r) {
        for (uint32_t g = 0; g < ng; ++g) {
          float lo = x[r * d + g * 32], hi = lo;
          for (uint32_t c = g * 32; c < std::min(d, g * 32 + 32); ++c) {
            lo = std::min(lo, x[r * d + c]);
            hi = std::max(hi, x[r * d + c]);
          }
          ASSERT_EQ(mn1[r * ng + g], lo);
          ASSERT_EQ(mx1[r * ng + g], hi);
        }
      }
      std::vector<float> cmn1(d), cmx1(d), cmn2(d), cmx2(d);
      a.min_max_cols(x.data(), rows, d, cmn1.data(), cmx1.data());
      b.min_max_cols(x.data(), rows, d, cmn2.data(), cmx2.data());
      ASSERT_TRUE(SameBits(cmn1, cmn2) && SameBits(cmx1, cmx2));

      std::vector<float> inv(rows * ng), scale(rows * ng);
      for (size_t g = 0; g < inv.size(); ++g) {
        scale[g] = (mx1[g] - mn1[g]) / 15.0f;
        inv[g] = scale[g] > 0 ? 1.0f / scale[g] : 0.0f;
      }
      std::vector<uint8_t> q1(n), q2(n);
      a.quant_rows(x.data(), rows, d, mn1.data(), inv.data(), 15, q1.data());
      b.quant_rows(x.data(), rows, d, mn1.data(), inv.data(), 15, q2.data());
      ASSERT_TRUE(SameBits(q1, q2));
      std::vector<float> o1(n), o2(n);
      a.dequant_rows(q1.data(), rows, d, scale.data(), mn1.data(), 65504.0f, o1.data());
      b.dequant_rows(q1.data(), rows, d, scale.data(), mn1.data(), 65504.0f, o2.data());
      ASSERT_TRUE(SameBits(o1, o2));

      std::vector<float> cinv(d), cscale(d);
      for (uint32_t c = 0; c < d; ++c) {
        cscale[c] = (cmx1[c] - cmn1[c]) / 3.0f;
        cinv[c] = cscale[c] > 0 ? 1.0f / cscale[c] : 0.0f;
      }
      a.quant_cols(x.data(), rows, d, cmn1.data(), cinv.data(), 3, q1.data());
      b.quant_cols(x.data(), rows, d, cmn1.data(), cinv.data(), 3, q2.data());
      ASSERT_TRUE(SameBits(q1, q2));
      a.dequant_cols(q1.data(), rows, d, cscale.data(), cmn1.data(), 65504.0f, o1.data());
      b.dequant_cols(q1.data(), rows, d, cscale.data(), cmn1.data(), 65504.0f, o2.data());
      ASSERT_TRUE(SameBits(o1, o2));

      for (uint32_t bits : {2u, 4u}) {
        std::vector<uint8_t> codes(n);
        for (uint8_t& c : codes) c = static_cast<uint8_t>(rng() & ((1u << bits) - 1));
        const size_t row_bytes = (d * bits + 7) / 8;
        std::vector<uint8_t> p1(rows * row_bytes), p2(rows * row_bytes), u1(n), u2(n);
        a.pack_rows(codes.data(), rows, d, bits, p1.data());
        b.pack_rows(codes.data(), rows, d, bits, p2.data());
        ASSERT_TRUE(SameBits(p1, p2));
        // Lowest bits first: channel 0 in the low bits of byte 0.
        ASSERT_EQ(p1[0] & ((1u << bits) - 1), codes[0]);
        a.unpack_rows(p1.data(), rows, d, bits, u1.data());
        b.unpack_rows(p1.data(), rows, d, bits, u2.data());
        ASSERT_TRUE(SameBits(u1, codes) && SameBits(u2, codes));
        const uint32_t per = 8 / bits;
        std::vector<uint8_t> c1((rows + per - 1) / per * d), c2(c1.size());
        a.pack_cols(codes.data(), rows, d, bits, c1.data());
        b.pack_cols(codes.data(), rows, d, bits, c2.data());
        ASSERT_TRUE(SameBits(c1, c2));
        ASSERT_EQ(c1[0] & ((1u << bits) - 1), codes[0]);
        ASSERT_EQ(c1[1] & ((1u << bits) - 1), codes[1]);  // channel 1 of token 0
        if (rows > 1) {
          ASSERT_EQ((c1[0] >> bits) & ((1u << bits) - 1), codes[d]);  // token 1, channel 0
        }
        a.unpack_cols(c1.data(), rows, d, bits, u1.data());
        b.unpack_cols(c1.data(), rows, d, bits, u2.data());
        ASSERT_TRUE(SameBits(u1, codes) && SameBits(u2, codes));
      }
    }
  }
}

TEST(CodecKernelsTest, Fp8KernelsMatchScalarConversions) {
  std::mt19937 rng(12);
  std::vector<float> x;
  for (int i = 0; i < 100000; ++i) {
    uint32_t u = static_cast<uint32_t>(rng());
    if (i % 2) u = (u & 0x80000000u) | ((u % (40u << 23)) + (100u << 23));  // e4m3 range
    x.push_back(BitsToFloat(u));
  }
  std::vector<const CodecKernels*> sets = {&BaselineKernels()};
  if (HasAvx2()) sets.push_back(&Avx2Kernels());
  for (const CodecKernels* k : sets) {
    std::vector<uint8_t> codes(x.size());
    k->encode_fp8(x.data(), x.size(), 1.0f, codes.data());
    // An odd length exercises the scalar tail of the AVX2 kernel.
    k->encode_fp8(x.data() + 1, x.size() - 7, 1.0f, codes.data() + 1);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(codes[i], FloatToFp8E4M3(x[i])) << "bits " << FloatBits(x[i]);
    }
    std::vector<uint8_t> all(256);
    for (int c = 0; c < 256; ++c) all[c] = static_cast<uint8_t>(c);
    std::vector<float> out(256);
    k->decode_fp8(all.data(), all.size(), 2.0f, FLT_MAX, out.data());
    for (int c = 0; c < 256; ++c) {
      const float want = Fp8E4M3ToFloat(static_cast<uint8_t>(c)) * 2.0f;
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(out[c]));
      } else {
        ASSERT_EQ(out[c], want) << c;
      }
    }
  }
}

TEST(CodecKernelsTest, MaxAbsBitsSkipsValuesAtOrAboveLimit) {
  const std::vector<uint16_t> v = {0x3c00, 0xbe00, 0x7c00, 0x7e00, 0x0001};
  const auto* raw = reinterpret_cast<const uint8_t*>(v.data());
  EXPECT_EQ(ActiveKernels().max_abs_bits(raw, v.size(), 0x7c00), 0x3e00);
  EXPECT_EQ(ActiveKernels().max_abs_bits(raw, v.size(), 0xffff), 0x7e00);
  EXPECT_EQ(BaselineKernels().max_abs_bits(raw, v.size(), 0x7c00), 0x3e00);

  // Long inputs (vector body + tail), unaligned start, both kernel sets.
  if (!HasAvx2()) return;
  std::mt19937 rng(13);
  for (size_t n : {16u, 31u, 1000u, 1037u}) {
    std::vector<uint8_t> bytes(2 * n + 1);
    for (int round = 0; round < 20; ++round) {
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng() % (round % 2 ? 256 : 0x7c));
      for (uint16_t limit : {0x0001, 0x3c00, 0x7c00, 0x7e80, 0xffff}) {
        ASSERT_EQ(Avx2Kernels().max_abs_bits(bytes.data() + 1, n, limit),
                  BaselineKernels().max_abs_bits(bytes.data() + 1, n, limit))
            << n << " " << limit;
      }
    }
  }
}

TEST(CodecKernelsTest, DequantClampsToTheLimitAndKeepsNan) {
  std::vector<const CodecKernels*> sets = {&BaselineKernels()};
  if (HasAvx2()) sets.push_back(&Avx2Kernels());
  for (const CodecKernels* k : sets) {
    // One row group of 40 channels (a full group and a short one), codes 0..255.
    std::vector<uint8_t> q(40);
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(i * 6 + 21);
    const std::vector<float> scale = {514.0f, 514.0f}, mn = {-65504.0f, -65504.0f};
    std::vector<float> out(q.size());
    k->dequant_rows(q.data(), 1, 40, scale.data(), mn.data(), 65504.0f, out.data());
    for (size_t i = 0; i < q.size(); ++i) {
      const float want = std::min(q[i] * 514.0f - 65504.0f, 65504.0f);
      ASSERT_EQ(out[i], want) << i;
    }
    std::vector<float> cscale(40, 1e38f), cmn(40, -1e38f);
    k->dequant_cols(q.data(), 1, 40, cscale.data(), cmn.data(), 3.0e38f, out.data());
    for (size_t i = 0; i < q.size(); ++i) {
      ASSERT_TRUE(std::isfinite(out[i]) && std::fabs(out[i]) <= 3.0e38f) << i;
    }
    // fp8: 448 * 1000 clamps to the fp16 maximum; NaN codes stay NaN.
    const std::vector<uint8_t> codes = {0x7e, 0xfe, 0x7f, 0x38};
    std::vector<float> f(codes.size());
    k->decode_fp8(codes.data(), codes.size(), 1000.0f, 65504.0f, f.data());
    EXPECT_EQ(f[0], 65504.0f);
    EXPECT_EQ(f[1], -65504.0f);
    EXPECT_TRUE(std::isnan(f[2]));
    EXPECT_EQ(f[3], 1000.0f);
  }
}

TEST(CodecKernelsTest, PlanesSplitAndMergeBackBothKernelSets) {
  std::mt19937 rng(14);
  std::vector<const CodecKernels*> sets = {&BaselineKernels()};
  if (HasAvx2()) sets.push_back(&Avx2Kernels());
  for (size_t n : {1u, 15u, 64u, 1000u, 4099u}) {
    std::vector<uint8_t> raw(2 * n + 1);
    for (uint8_t& b : raw) b = static_cast<uint8_t>(rng());
    std::vector<uint8_t> want_hi(n), want_lo(n);
    for (size_t i = 0; i < n; ++i) {
      want_lo[i] = raw[1 + 2 * i];
      want_hi[i] = raw[2 + 2 * i];
    }
    for (const CodecKernels* k : sets) {
      std::vector<uint8_t> hi(n), lo(n), back(2 * n + 1, 0);
      k->split_planes(raw.data() + 1, n, hi.data(), lo.data());  // unaligned source
      ASSERT_TRUE(SameBits(hi, want_hi) && SameBits(lo, want_lo)) << n;
      k->merge_planes(hi.data(), lo.data(), n, back.data() + 1);
      ASSERT_EQ(std::memcmp(back.data() + 1, raw.data() + 1, 2 * n), 0) << n;
    }
  }
}

}  // namespace
}  // namespace kvtier::kv::internal
