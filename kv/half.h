// Bit-exact conversions between float and the 16- and 8-bit floating formats used for KV
// data: IEEE binary16 (fp16), bfloat16 (bf16) and OCP FP8 E4M3FN (fp8_e4m3). Pure
// functions; thread-safe.
//
// Rounding is always round-to-nearest-even. Specifics:
//   fp16   float -> fp16 overflows to +-inf (values >= 65520 in magnitude), keeps
//          subnormals (down to 2^-24), keeps -0. NaN stays NaN with the quiet bit set and
//          the top payload bits kept (the same bits F16C's VCVTPS2PH produces).
//   bf16   float -> bf16 overflows to +-inf; NaN becomes a quiet NaN (sign and top payload
//          kept). bf16 -> float is exact (shift left 16).
//   e4m3   OCP E4M3FN: bias 7, no infinities, max finite +-448, min normal 2^-6, min
//          subnormal 2^-9, NaN only S.1111.111 (0x7F / 0xFF). float -> e4m3 saturates
//          (|x| > 448, including +-inf, becomes +-448 = 0x7E / 0xFE); NaN becomes 0x7F
//          (0xFF when the sign bit is set); -0 becomes 0x80.
//
// The bulk ("N") functions use F16C/AVX2 when the CPU has them (chosen once at run time)
// and a scalar loop otherwise; both paths produce identical bits. `in` and `out` must not
// overlap.
#ifndef KVTIER_KV_HALF_H_
#define KVTIER_KV_HALF_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kv/layout.h"

namespace kvtier::kv {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Returns the float value of fp16 bits `h` (exact).
inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in float.
    return BitsToFloat(sign | FloatBits(static_cast<float>(mant) * 0x1p-24f));
  }
  if (exp == 31) return BitsToFloat(sign | 0x7f800000u | (mant << 13) |
                                    (mant != 0 ? 0x00400000u : 0u));
  return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

// Returns `f` rounded to the nearest fp16 (ties to even).
inline uint16_t FloatToHalf(float f) {
  uint32_t u = FloatBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  uint32_t o;
  if (u >= 0x47800000u) {  // >= 65536, inf or NaN
    if (u > 0x7f800000u) {
      o = 0x7e00u | ((u >> 13) & 0x3ffu);  // quiet NaN, top payload bits kept
    } else {
      o = 0x7c00u;
    }
  } else if (u < 0x38800000u) {  // < 2^-14: subnormal or zero
    // Adding 0.5 puts the fp16 subnormal grid (2^-24) at float's ulp; the FPU rounds.
    const float r = BitsToFloat(u) + 0.5f;
    o = FloatBits(r) - 0x3f000000u;
  } else {
    const uint32_t mant_odd = (u >> 13) & 1u;
    u += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + mant_odd;
    o = u >> 13;
  }
  return static_cast<uint16_t>(o | sign);
}

// Returns the float value of bf16 bits `b` (exact).
inline float Bf16ToFloat(uint16_t b) { return BitsToFloat(uint32_t{b} << 16); }

// Returns `f` rounded to the nearest bf16 (ties to even).
inline uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Returns the float value of an E4M3FN code (exact; NaN for 0x7F / 0xFF).
float Fp8E4M3ToFloat(uint8_t code);

// Returns `f` converted to E4M3FN: RNE, saturating to +-448, NaN -> 0x7F|sign.
inline uint8_t FloatToFp8E4M3(float f) {
  uint32_t u = FloatBits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7f);
  if (u >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7e);  // >= 448 or inf
  if (u < 0x3c800000u) {  // < 2^-6: subnormal grid 2^-9 = ulp of 2^14
    const float r = BitsToFloat(u) + 16384.0f;
    return static_cast<uint8_t>(sign | (FloatBits(r) - 0x46800000u));
  }
  const uint32_t mant_odd = (u >> 20) & 1u;
  u += (static_cast<uint32_t>(7 - 127) << 23) + 0x7ffffu + mant_odd;
  return static_cast<uint8_t>(sign | (u >> 20));
}

// Bulk conversions of `n` elements.
void HalfToFloatN(const uint16_t* in, float* out, size_t n);
void FloatToHalfN(const float* in, uint16_t* out, size_t n);
void Bf16ToFloatN(const uint16_t* in, float* out, size_t n);
void FloatToBf16N(const float* in, uint16_t* out, size_t n);
// Dispatch on the source dtype (fp16 or bf16).
void DtypeToFloatN(Dtype dtype, const uint16_t* in, float* out, size_t n);
void FloatToDtypeN(Dtype dtype, const float* in, uint16_t* out, size_t n);
// Scalar versions for one element in `dtype`.
inline float DtypeToFloat(Dtype dtype, uint16_t v) {
  return dtype == Dtype::kBf16 ? Bf16ToFloat(v) : HalfToFloat(v);
}
inline uint16_t FloatToDtype(Dtype dtype, float f) {
  return dtype == Dtype::kBf16 ? FloatToBf16(f) : FloatToHalf(f);
}

// Whether the bulk functions use the F16C/AVX2 path on this CPU.
bool HalfSimdAvailable();

namespace internal {
// The scalar paths of the bulk functions, exposed so tests can compare both paths.
void HalfToFloatNScalar(const uint16_t* in, float* out, size_t n);
void FloatToHalfNScalar(const float* in, uint16_t* out, size_t n);
void Bf16ToFloatNScalar(const uint16_t* in, float* out, size_t n);
void FloatToBf16NScalar(const float* in, uint16_t* out, size_t n);
}  // namespace internal

}  // namespace kvtier::kv

#endif  // KVTIER_KV_HALF_H_
