#include "kv/codec_kivi2.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kv/half.h"

namespace kvtier::kv::internal {
namespace {

constexpr int kSteps = 127;  // min/max codes are steps of A / 127 in [-127, 127]

uint32_t CeilDiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

uint16_t Bits16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

float MaxFinite(Dtype dtype) {
  return DtypeToFloat(dtype, dtype == Dtype::kBf16 ? 0x7f7f : 0x7bff);
}

// One group's decoded range: lo and step s.
struct Range {
  float lo;
  float s;
};

Range RangeOf(float u, int min_code, int max_code, uint32_t qmax) {
  const float lo = static_cast<float>(min_code) * u;
  const float hi = static_cast<float>(max_code) * u;
  return {lo, (hi - lo) / static_cast<float>(qmax)};
}

// Chooses the min/max codes of a group with extremes mn <= mx, |mn|, |mx| <= A.
void ChooseCodes(float u, float mn, float mx, int8_t* min_code, int8_t* max_code) {
  if (u == 0.0f) {
    *min_code = 0;
    *max_code = 0;
    return;
  }
  int lo = static_cast<int>(std::floor(mn / u));
  int hi = static_cast<int>(std::ceil(mx / u));
  lo = std::clamp(lo, -kSteps, kSteps);
  hi = std::clamp(hi, -kSteps, kSteps);
  // Float rounding in mn / u may leave lo * u a hair above mn (or hi * u below mx).
  if (lo > -kSteps && static_cast<float>(lo) * u > mn) --lo;
  if (hi < kSteps && static_cast<float>(hi) * u < mx) ++hi;
  *min_code = static_cast<int8_t>(lo);
  *max_code = static_cast<int8_t>(std::max(hi, lo));
}

uint32_t Quantize(float x, const Range& r, uint32_t qmax) {
  if (!(r.s > 0.0f)) return 0;
  const float t = std::floor((x - r.lo) / r.s + 0.5f);
  return static_cast<uint32_t>(std::clamp(t, 0.0f, static_cast<float>(qmax)));
}

float Dequantize(uint32_t code, const Range& r, float limit) {
  return std::clamp(r.lo + static_cast<float>(code) * r.s, -limit, limit);
}

// Reads and checks A and returns u = A / 127. DATA_LOSS on a negative or non-finite A.
absl::Status ReadUnit(Dtype dtype, const uint8_t* in, float* u) {
  const uint16_t a = Bits16(in);
  const uint16_t inf = dtype == Dtype::kBf16 ? 0x7f80 : 0x7c00;
  if (a >= inf) return absl::DataLossError("encoded kivi2 block has a negative or non-finite A");
  *u = DtypeToFloat(dtype, a) / static_cast<float>(kSteps);
  return absl::OkStatus();
}

absl::Status CheckCodes(const int8_t* mn, const int8_t* mx, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    if (mn[i] < -kSteps || mx[i] < -kSteps || mn[i] > mx[i]) {
      return absl::DataLossError("encoded kivi2 block has a bad min/max code");
    }
  }
  return absl::OkStatus();
}

float AbsMax(const float* x, size_t n) {
  float a = 0.0f;
  for (size_t i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
  return a;
}

}  // namespace

uint64_t Kivi2KeySlabBytes(uint32_t d, uint32_t m) {
  uint64_t bytes = 0;
  for (uint32_t t0 = 0; t0 < m; t0 += kKivi2KeyChunk) {
    const uint32_t rows = std::min(kKivi2KeyChunk, m - t0);
    bytes += 2 + 2ull * d + uint64_t{d} * CeilDiv(rows * kKivi2KeyBits, 8);
  }
  return bytes;
}

uint64_t Kivi2ValueSlabBytes(uint32_t d, uint32_t m) {
  return uint64_t{m} * (2 + 2ull * CeilDiv(d, kKivi2ValueGroup) + CeilDiv(d * kKivi2ValueBits, 8));
}

void EncodeKivi2Keys(Dtype dtype, const float* x, uint32_t d, uint32_t m, uint8_t* out) {
  constexpr uint32_t qmax = (1u << kKivi2KeyBits) - 1;
  for (uint32_t t0 = 0; t0 < m; t0 += kKivi2KeyChunk) {
    const uint32_t rows = std::min(kKivi2KeyChunk, m - t0);
    const float* c = x + size_t{t0} * d;
    // A is the largest |x| of the chunk: a source-dtype value, stored exactly.
    const float a = AbsMax(c, size_t{rows} * d);
    const uint16_t a_bits = FloatToDtype(dtype, a);
    std::memcpy(out, &a_bits, 2);
    const float u = DtypeToFloat(dtype, a_bits) / static_cast<float>(kSteps);
    auto* mn_codes = reinterpret_cast<int8_t*>(out + 2);
    auto* mx_codes = mn_codes + d;
    uint8_t* codes = out + 2 + 2ull * d;
    const uint32_t row_bytes = CeilDiv(rows * kKivi2KeyBits, 8);
    std::memset(codes, 0, size_t{d} * row_bytes);
    for (uint32_t ch = 0; ch < d; ++ch) {
      float mn = c[ch], mx = c[ch];
      for (uint32_t t = 1; t < rows; ++t) {
        mn = std::min(mn, c[size_t{t} * d + ch]);
        mx = std::max(mx, c[size_t{t} * d + ch]);
      }
      ChooseCodes(u, mn, mx, &mn_codes[ch], &mx_codes[ch]);
      const Range r = RangeOf(u, mn_codes[ch], mx_codes[ch], qmax);
      uint8_t* dst = codes + size_t{ch} * row_bytes;
      for (uint32_t t = 0; t < rows; ++t) {
        const uint32_t q = Quantize(c[size_t{t} * d + ch], r, qmax);
        const uint32_t bit = t * kKivi2KeyBits;
        dst[bit / 8] |= static_cast<uint8_t>(q << (bit % 8));
        if (bit % 8 > 8 - kKivi2KeyBits) dst[bit / 8 + 1] |= static_cast<uint8_t>(q >> (8 - bit % 8));
      }
    }
    out += 2 + 2ull * d + size_t{d} * row_bytes;
  }
}

absl::Status DecodeKivi2Keys(Dtype dtype, const uint8_t* in, uint32_t d, uint32_t m, float* x) {
  constexpr uint32_t qmax = (1u << kKivi2KeyBits) - 1;
  const float limit = MaxFinite(dtype);
  for (uint32_t t0 = 0; t0 < m; t0 += kKivi2KeyChunk) {
    const uint32_t rows = std::min(kKivi2KeyChunk, m - t0);
    float u = 0.0f;
    if (absl::Status st = ReadUnit(dtype, in, &u); !st.ok()) return st;
    const auto* mn_codes = reinterpret_cast<const int8_t*>(in + 2);
    const auto* mx_codes = mn_codes + d;
    if (absl::Status st = CheckCodes(mn_codes, mx_codes, d); !st.ok()) return st;
    const uint8_t* codes = in + 2 + 2ull * d;
    const uint32_t row_bytes = CeilDiv(rows * kKivi2KeyBits, 8);
    float* c = x + size_t{t0} * d;
    for (uint32_t ch = 0; ch < d; ++ch) {
      const Range r = RangeOf(u, mn_codes[ch], mx_codes[ch], qmax);
      const uint8_t* src = codes + size_t{ch} * row_bytes;
      for (uint32_t t = 0; t < rows; ++t) {
        const uint32_t bit = t * kKivi2KeyBits;
        uint32_t q = src[bit / 8] >> (bit % 8);
        if (bit % 8 > 8 - kKivi2KeyBits) q |= uint32_t{src[bit / 8 + 1]} << (8 - bit % 8);
        c[size_t{t} * d + ch] = Dequantize(q & qmax, r, limit);
      }
    }
    in += 2 + 2ull * d + size_t{d} * row_bytes;
  }
  return absl::OkStatus();
}

void EncodeKivi2Values(Dtype dtype, const float* x, uint32_t d, uint32_t m, uint8_t* out) {
  constexpr uint32_t qmax = (1u << kKivi2ValueBits) - 1;
  const uint32_t groups = CeilDiv(d, kKivi2ValueGroup);
  const uint32_t code_bytes = CeilDiv(d * kKivi2ValueBits, 8);
  for (uint32_t t = 0; t < m; ++t) {
    const float* row = x + size_t{t} * d;
    const uint16_t a_bits = FloatToDtype(dtype, AbsMax(row, d));
    std::memcpy(out, &a_bits, 2);
    const float u = DtypeToFloat(dtype, a_bits) / static_cast<float>(kSteps);
    auto* mn_codes = reinterpret_cast<int8_t*>(out + 2);
    auto* mx_codes = mn_codes + groups;
    uint8_t* codes = out + 2 + 2ull * groups;
    std::memset(codes, 0, code_bytes);
    for (uint32_t g = 0; g < groups; ++g) {
      const uint32_t c0 = g * kKivi2ValueGroup;
      const uint32_t c1 = std::min(d, c0 + kKivi2ValueGroup);
      float mn = row[c0], mx = row[c0];
      for (uint32_t ch = c0 + 1; ch < c1; ++ch) {
        mn = std::min(mn, row[ch]);
        mx = std::max(mx, row[ch]);
      }
      ChooseCodes(u, mn, mx, &mn_codes[g], &mx_codes[g]);
      const Range r = RangeOf(u, mn_codes[g], mx_codes[g], qmax);
      for (uint32_t ch = c0; ch < c1; ++ch) {
        codes[ch / 4] |= static_cast<uint8_t>(Quantize(row[ch], r, qmax) << (2 * (ch % 4)));
      }
    }
    out += 2 + 2ull * groups + code_bytes;
  }
}

absl::Status DecodeKivi2Values(Dtype dtype, const uint8_t* in, uint32_t d, uint32_t m,
                               float* x) {
  constexpr uint32_t qmax = (1u << kKivi2ValueBits) - 1;
  const float limit = MaxFinite(dtype);
  const uint32_t groups = CeilDiv(d, kKivi2ValueGroup);
  const uint32_t code_bytes = CeilDiv(d * kKivi2ValueBits, 8);
  for (uint32_t t = 0; t < m; ++t) {
    float u = 0.0f;
    if (absl::Status st = ReadUnit(dtype, in, &u); !st.ok()) return st;
    const auto* mn_codes = reinterpret_cast<const int8_t*>(in + 2);
    const auto* mx_codes = mn_codes + groups;
    if (absl::Status st = CheckCodes(mn_codes, mx_codes, groups); !st.ok()) return st;
    const uint8_t* codes = in + 2 + 2ull * groups;
    float* row = x + size_t{t} * d;
    for (uint32_t g = 0; g < groups; ++g) {
      const Range r = RangeOf(u, mn_codes[g], mx_codes[g], qmax);
      const uint32_t c1 = std::min(d, (g + 1) * kKivi2ValueGroup);
      for (uint32_t ch = g * kKivi2ValueGroup; ch < c1; ++ch) {
        row[ch] = Dequantize((codes[ch / 4] >> (2 * (ch % 4))) & qmax, r, limit);
      }
    }
    in += 2 + 2ull * groups + code_bytes;
  }
  return absl::OkStatus();
}

}  // namespace kvtier::kv::internal
