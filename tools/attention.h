// Attention math and fidelity metrics used to judge KV codecs and token compaction on
// synthetic K/V (`kvtier eval`; offline only, see docs/design.md §1 Layout and dependency
// rules).
// Pure functions over caller-owned spans; no I/O, no allocation beyond returned vectors;
// thread-safe.
//
// Conventions: keys and values are row-major [num_tokens][head_dim] float arrays; a query
// is head_dim floats; attention weights are softmax(q . k / sqrt(head_dim)) in double.
#ifndef KVTIER_TOOLS_ATTENTION_H_
#define KVTIER_TOOLS_ATTENTION_H_

#include <cstdint>
#include <span>
#include <vector>

namespace kvtier::tools {

// Writes the softmax attention weights of `query` over the first `weights.size()` keys of
// `keys` (scale 1/sqrt(head_dim), max-subtracted, so it never overflows).
// REQUIRES: query.size() == head_dim, keys.size() >= weights.size() * head_dim,
// weights non-empty.
void AttentionWeights(std::span<const float> query, std::span<const float> keys,
                      uint32_t head_dim, std::span<double> weights);

// Writes out = sum_t weights[t] * values[t]. REQUIRES: out.size() == head_dim,
// values.size() >= weights.size() * head_dim.
void AttentionOutput(std::span<const double> weights, std::span<const float> values,
                     uint32_t head_dim, std::span<double> out);

// Returns ||ref - approx|| / ||ref|| (L2). Returns 0 when both are all zero and +inf when
// only ref is. REQUIRES: equal sizes.
double RelativeL2Error(std::span<const double> ref, std::span<const double> approx);
double RelativeL2Error(std::span<const float> ref, std::span<const float> approx);

// Returns KL(p || q) = sum p log(p / q) in nats, skipping p == 0 terms and clamping q at
// 1e-300 so a dropped key yields a large finite value. REQUIRES: equal sizes.
double KlDivergence(std::span<const double> p, std::span<const double> q);

// Returns the indices of the k largest entries of `x` (ties broken by lower index), in
// descending order of value. k is clamped to x.size().
std::vector<uint32_t> TopK(std::span<const double> x, uint32_t k);

// Returns |TopK(ref, k) ∩ TopK(approx, k)| / min(k, size): the fraction of the true
// top-k keys that the approximation also ranks in its top k. REQUIRES: equal sizes.
double TopKRecall(std::span<const double> ref, std::span<const double> approx, uint32_t k);

// Returns the fraction of entries strictly below `fraction_of_max` times the largest
// entry (H2O's sparsity: share of attention weights under 1% of the row max).
double SparsityBelow(std::span<const double> weights, double fraction_of_max);

// For a [rows][cols] row-major matrix, computes each column's mean |x| and returns
// max / median over columns (median of an even count = mean of the two middle values).
// Key outlier channels make this large; values stay near 1. Returns 0 for empty input.
double ChannelMaxMedianRatio(std::span<const float> x, uint32_t rows, uint32_t cols);

// Sorts `accumulated` (attention mass per token summed over queries) in descending order
// and returns the least-squares slope of ln(value) against ln(rank) over ranks
// [first_rank, last_rank] (1-based, clamped to the size; non-positive values skipped).
// A power law mass ~ rank^-a gives -a. Returns 0 with fewer than two usable points.
double ZipfSlope(std::span<const double> accumulated, uint32_t first_rank,
                 uint32_t last_rank);

// Returns the p-th percentile (0 <= p <= 100) by linear interpolation between closest
// ranks. Returns 0 for empty input.
double Percentile(std::vector<double> values, double p);

struct MeanStd {
  double mean = 0;
  double std = 0;  // sample standard deviation (n - 1); 0 for fewer than two values
};
MeanStd ComputeMeanStd(std::span<const double> values);

}  // namespace kvtier::tools

#endif  // KVTIER_TOOLS_ATTENTION_H_
