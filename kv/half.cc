#include "kv/half.h"

#include <immintrin.h>

#include <array>

namespace kvtier::kv {
namespace {

std::array<float, 256> MakeFp8Table() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const int exp = (c >> 3) & 0xf;
    const int mant = c & 7;
    float v;
    if (exp == 15 && mant == 7) {
      v = BitsToFloat(0x7fc00000u);
    } else if (exp == 0) {
      v = static_cast<float>(mant) * 0x1p-9f;
    } else {
      // 2^(exp-7) * (1 + mant/8), built from bits so it is exact.
      v = BitsToFloat((static_cast<uint32_t>(exp + 120) << 23) |
                      (static_cast<uint32_t>(mant) << 20));
    }
    t[c] = (c & 0x80) ? -v : v;
  }
  return t;
}

bool DetectSimd() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}

__attribute__((target("avx2,f16c"))) void HalfToFloatNAvx2(const uint16_t* in,
                                                            float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  if (i < n) {
    alignas(16) uint16_t tmp_in[8] = {};
    alignas(32) float tmp_out[8];
    std::memcpy(tmp_in, in + i, (n - i) * sizeof(uint16_t));
    _mm256_store_ps(tmp_out, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<__m128i*>(tmp_in))));
    std::memcpy(out + i, tmp_out, (n - i) * sizeof(float));
  }
}

__attribute__((target("avx2,f16c"))) void FloatToHalfNAvx2(const float* in, uint16_t* out,
                                                            size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_loadu_ps(in + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT));
  }
  if (i < n) {
    alignas(32) float tmp_in[8] = {};
    alignas(16) uint16_t tmp_out[8];
    std::memcpy(tmp_in, in + i, (n - i) * sizeof(float));
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp_out),
                    _mm256_cvtps_ph(_mm256_load_ps(tmp_in), _MM_FROUND_TO_NEAREST_INT));
    std::memcpy(out + i, tmp_out, (n - i) * sizeof(uint16_t));
  }
}

// bf16 <-> float are integer operations; plain loops vectorize once AVX2 is allowed.
__attribute__((target("avx2"), optimize("O3"))) void Bf16ToFloatNAvx2(
    const uint16_t* __restrict in, float* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t{in[i]} << 16;
    std::memcpy(out + i, &u, sizeof(u));
  }
}

__attribute__((target("avx2"), optimize("O3"))) void FloatToBf16NAvx2(
    const float* __restrict in, uint16_t* __restrict out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, in + i, sizeof(u));
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u >> 16) | 0x40u;
    out[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

}  // namespace

float Fp8E4M3ToFloat(uint8_t code) {
  static const std::array<float, 256> table = MakeFp8Table();
  return table[code];
}

bool HalfSimdAvailable() {
  static const bool available = DetectSimd();
  return available;
}

namespace internal {

void HalfToFloatNScalar(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}
void FloatToHalfNScalar(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}
void Bf16ToFloatNScalar(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
}
void FloatToBf16NScalar(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16(in[i]);
}

}  // namespace internal

void HalfToFloatN(const uint16_t* in, float* out, size_t n) {
  if (HalfSimdAvailable()) return HalfToFloatNAvx2(in, out, n);
  internal::HalfToFloatNScalar(in, out, n);
}
void FloatToHalfN(const float* in, uint16_t* out, size_t n) {
  if (HalfSimdAvailable()) return FloatToHalfNAvx2(in, out, n);
  internal::FloatToHalfNScalar(in, out, n);
}
void Bf16ToFloatN(const uint16_t* in, float* out, size_t n) {
  if (HalfSimdAvailable()) return Bf16ToFloatNAvx2(in, out, n);
  internal::Bf16ToFloatNScalar(in, out, n);
}
void FloatToBf16N(const float* in, uint16_t* out, size_t n) {
  if (HalfSimdAvailable()) return FloatToBf16NAvx2(in, out, n);
  internal::FloatToBf16NScalar(in, out, n);
}
void DtypeToFloatN(Dtype dtype, const uint16_t* in, float* out, size_t n) {
  if (dtype == Dtype::kBf16) return Bf16ToFloatN(in, out, n);
  HalfToFloatN(in, out, n);
}
void FloatToDtypeN(Dtype dtype, const float* in, uint16_t* out, size_t n) {
  if (dtype == Dtype::kBf16) return FloatToBf16N(in, out, n);
  FloatToHalfN(in, out, n);
}

}  // namespace kvtier::kv
