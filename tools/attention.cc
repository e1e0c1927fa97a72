#include "tools/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kvtier::tools {

void AttentionWeights(std::span<const float> query, std::span<const float> keys,
                      uint32_t head_dim, std::span<double> weights) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  double max_logit = -std::numeric_limits<double>::infinity();
  for (size_t t = 0; t < weights.size(); ++t) {
    const float* k = keys.data() + t * head_dim;
    // float accumulation in 4 lanes vectorizes; the error (~1e-6 relative) is far below
    // any codec error measured with it.
    float acc[4] = {0, 0, 0, 0};
    uint32_t c = 0;
    for (; c + 4 <= head_dim; c += 4) {
      for (int j = 0; j < 4; ++j) acc[j] += query[c + j] * k[c + j];
    }
    double dot = double{acc[0]} + acc[1] + acc[2] + acc[3];
    for (; c < head_dim; ++c) dot += double{query[c]} * k[c];
    weights[t] = dot * scale;
    max_logit = std::max(max_logit, weights[t]);
  }
  double sum = 0;
  for (double& w : weights) {
    w = std::exp(w - max_logit);
    sum += w;
  }
  for (double& w : weights) w /= sum;
}

void AttentionOutput(std::span<const double> weights, std::span<const float> values,
                     uint32_t head_dim, std::span<double> out) {
  std::fill(out.begin(), out.end(), 0.0);
  for (size_t t = 0; t < weights.size(); ++t) {
    const double w = weights[t];
    if (w == 0) continue;
    const float* v = values.data() + t * head_dim;
    for (uint32_t c = 0; c < head_dim; ++c) out[c] += w * v[c];
  }
}

namespace {

template <typename T>
double RelErr(std::span<const T> ref, std::span<const T> approx) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double{ref[i]} - double{approx[i]};
    num += d * d;
    den += double{ref[i]} * double{ref[i]};
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

}  // namespace

double RelativeL2Error(std::span<const double> ref, std::span<const double> approx) {
  return RelErr(ref, approx);
}

double RelativeL2Error(std::span<const float> ref, std::span<const float> approx) {
  return RelErr(ref, approx);
}

double KlDivergence(std::span<const double> p, std::span<const double> q) {
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    kl += p[i] * (std::log(p[i]) - std::log(std::max(q[i], 1e-300)));
  }
  return std::max(kl, 0.0);
}

std::vector<uint32_t> TopK(std::span<const double> x, uint32_t k) {
  std::vector<uint32_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0u);
  k = std::min<uint32_t>(k, static_cast<uint32_t>(x.size()));
  auto better = [&](uint32_t a, uint32_t b) {
    return x[a] > x[b] || (x[a] == x[b] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  idx.resize(k);
  return idx;
}

double TopKRecall(std::span<const double> ref, std::span<const double> approx, uint32_t k) {
  const std::vector<uint32_t> a = TopK(ref, k);
  std::vector<uint32_t> b = TopK(approx, k);
  if (a.empty()) return 1.0;
  std::sort(b.begin(), b.end());
  size_t hits = 0;
  for (uint32_t i : a) hits += std::binary_search(b.begin(), b.end(), i) ? 1 : 0;
  return static_cast<double>(hits) / static_cast<double>(a.size());
}

double SparsityBelow(std::span<const double> weights, double fraction_of_max) {
  if (weights.empty()) return 0;
  const double threshold = *std::max_element(weights.begin(), weights.end()) * fraction_of_max;
  size_t below = 0;
  for (double w : weights) below += w < threshold ? 1 : 0;
  return static_cast<double>(below) / static_cast<double>(weights.size());
}

double ChannelMaxMedianRatio(std::span<const float> x, uint32_t rows, uint32_t cols) {
  if (rows == 0 || cols == 0) return 0;
  std::vector<double> mag(cols, 0.0);
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t c = 0; c < cols; ++c) mag[c] += std::fabs(x[size_t{r} * cols + c]);
  }
  std::vector<double> sorted = mag;
  std::sort(sorted.begin(), sorted.end());
  const double median = cols % 2 == 1 ? sorted[cols / 2]
                                      : 0.5 * (sorted[cols / 2 - 1] + sorted[cols / 2]);
  if (median == 0) return std::numeric_limits<double>::infinity();
  return sorted.back() / median;
}

double ZipfSlope(std::span<const double> accumulated, uint32_t first_rank,
                 uint32_t last_rank) {
  std::vector<double> v(accumulated.begin(), accumulated.end());
  std::sort(v.begin(), v.end(), std::greater<double>());
  first_rank = std::max<uint32_t>(first_rank, 1);
  last_rank = std::min<uint32_t>(last_rank, static_cast<uint32_t>(v.size()));
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0;
  for (uint32_t r = first_rank; r <= last_rank; ++r) {
    if (v[r - 1] <= 0) continue;
    const double x = std::log(static_cast<double>(r));
    const double y = std::log(v[r - 1]);
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
    ++n;
  }
  if (n < 2) return 0;
  const double den = n * sxx - sx * sx;
  if (den == 0) return 0;
  return (n * sxy - sx * sy) / den;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  p = std::clamp(p, 0.0, 100.0);
  const double pos = p / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

MeanStd ComputeMeanStd(std::span<const double> values) {
  MeanStd r;
  if (values.empty()) return r;
  for (double v : values) r.mean += v;
  r.mean /= static_cast<double>(values.size());
  if (values.size() < 2) return r;
  double ss = 0;
  for (double v : values) ss += (v - r.mean) * (v - r.mean);
  r.std = std::sqrt(ss / static_cast<double>(values.size() - 1));
  return r;
}

}  // namespace kvtier::tools
