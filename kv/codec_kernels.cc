// Compiles codec_kernels.inc twice: for baseline x86-64 and for AVX2. The release build
// may be -O2, where gcc 12 only vectorizes cheap loops; these kernels are the hot path of
// every codec, so they are built with -O3 whatever the build type.
#include "kv/codec_kernels.h"

#include <immintrin.h>

#include <bit>
#include <cstring>

#include "kv/half.h"

// After the includes, so only the kernels below are affected. no-trapping-math lets gcc
// if-convert the float clamps (we never inspect FP exception flags).
#pragma GCC optimize("O3", "no-trapping-math")

namespace kvtier::kv::internal {

namespace baseline {
#include "kv/codec_kernels.inc"
}  // namespace baseline

#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {
#include "kv/codec_kernels.inc"
}  // namespace avx2
#pragma GCC pop_options

namespace {

// gcc 12 does not vectorize these two loops (mixed widths / bit casts), and they are on
// the encode path of every quantizing codec; written out with AVX2 intrinsics.
__attribute__((target("avx2"))) uint16_t MaxAbsBitsAvx2(const uint8_t* raw, size_t n,
                                                        uint16_t limit) {
  if (limit == 0) return 0;
  const __m256i magnitude = _mm256_set1_epi16(0x7fff);
  const __m256i below = _mm256_set1_epi16(static_cast<int16_t>(limit - 1));
  __m256i best = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(raw + 2 * i));
    v = _mm256_and_si256(v, magnitude);
    const __m256i keep = _mm256_cmpeq_epi16(_mm256_min_epu16(v, below), v);  // v < limit
    best = _mm256_max_epu16(best, _mm256_and_si256(v, keep));
  }
  alignas(32) uint16_t lanes[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), best);
  uint16_t out = 0;
  for (uint16_t l : lanes) out = l > out ? l : out;
  const uint16_t tail = avx2::MaxAbsBits(raw + 2 * i, n - i, limit);
  return tail > out ? tail : out;
}

__attribute__((target("avx2"))) void EncodeFp8Avx2(const float* x, size_t n, float inv_scale,
                                                   uint8_t* out) {
  const __m256 inv = _mm256_set1_ps(inv_scale);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256 magic = _mm256_set1_ps(16384.0f);
  const __m256i magic_bits = _mm256_set1_epi32(0x46800000);
  const __m256i rebias = _mm256_set1_epi32(static_cast<int32_t>(0x7ffffu - (120u << 23)));
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i min_normal = _mm256_set1_epi32(0x3c800000 - 1);
  const __m256i max_finite = _mm256_set1_epi32(0x43e00000 - 1);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i sat = _mm256_set1_epi32(0x7e);
  const __m256i nan = _mm256_set1_epi32(0x7f);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i r[4];
    for (int j = 0; j < 4; ++j) {
      const __m256i u =
          _mm256_castps_si256(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * j), inv));
      const __m256i a = _mm256_and_si256(u, abs_mask);
      const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
      const __m256i sub = _mm256_sub_epi32(
          _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), magic)), magic_bits);
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 20), one);
      const __m256i nor =
          _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, rebias), odd), 20);
      // a is non-negative as int32, so signed compares are fine.
      __m256i v = _mm256_blendv_epi8(sub, nor, _mm256_cmpgt_epi32(a, min_normal));
      v = _mm256_blendv_epi8(v, sat, _mm256_cmpgt_epi32(a, max_finite));
      v = _mm256_blendv_epi8(v, nan, _mm256_cmpgt_epi32(a, inf));
      r[j] = _mm256_or_si256(v, sign);
    }
    // 4 x 8 int32 (each 0..255) -> 32 bytes in order.
    const __m256i p01 = _mm256_packus_epi32(r[0], r[1]);  // lanes interleaved by 128 bits
    const __m256i p23 = _mm256_packus_epi32(r[2], r[3]);
    __m256i b = _mm256_packus_epi16(p01, p23);
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), b);
  }
  avx2::EncodeFp8(x + i, n - i, inv_scale, out + i);
}

constexpr CodecKernels MakeTable(bool use_avx2) {
  if (use_avx2) {
    return {&avx2::MinMaxRows,  &avx2::MinMaxCols, &avx2::QuantRows,   &avx2::QuantCols,
            &avx2::DequantRows, &avx2::DequantCols, &avx2::PackRows,   &avx2::UnpackRows,
            &avx2::PackCols,    &avx2::UnpackCols, &EncodeFp8Avx2,     &avx2::DecodeFp8,
            &MaxAbsBitsAvx2,    &avx2::MakeParams,  &avx2::SplitPlanes, &avx2::MergePlanes};
  }
  return {&baseline::MinMaxRows,  &baseline::MinMaxCols, &baseline::QuantRows,
          &baseline::QuantCols,   &baseline::DequantRows, &baseline::DequantCols,
          &baseline::PackRows,    &baseline::UnpackRows, &baseline::PackCols,
          &baseline::UnpackCols,  &baseline::EncodeFp8,  &baseline::DecodeFp8,
          &baseline::MaxAbsBits,  &baseline::MakeParams, &baseline::SplitPlanes,
          &baseline::MergePlanes};
}

constexpr CodecKernels kBaseline = MakeTable(false);
constexpr CodecKernels kAvx2 = MakeTable(true);

}  // namespace

const CodecKernels& BaselineKernels() { return kBaseline; }
const CodecKernels& Avx2Kernels() { return kAvx2; }

const CodecKernels& ActiveKernels() {
  static const CodecKernels* const kernels = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? &kAvx2 : &kBaseline;
  }();
  return *kernels;
}

}  // namespace kvtier::kv::internal
