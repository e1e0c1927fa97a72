#include "tools/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier::tools {
namespace {

TEST(AttentionTest, WeightsMatchHandComputedSoftmax) {
  // head_dim 4 -> scale 1/2. Logits: q.k0 = 2 -> 1, q.k1 = 0 -> 0, q.k2 = -2 -> -1.
  const std::vector<float> q = {1, 1, 0, 0};
  const std::vector<float> keys = {1, 1, 0, 0,   0, 0, 1, 1,   -1, -1, 0, 0};
  std::vector<double> w(3);
  AttentionWeights(q, keys, 4, w);
  const double z = std::exp(1.0) + 1.0 + std::exp(-1.0);
  EXPECT_NEAR(w[0], std::exp(1.0) / z, 1e-9);
  EXPECT_NEAR(w[1], 1.0 / z, 1e-9);
  EXPECT_NEAR(w[2], std::exp(-1.0) / z, 1e-9);
  // Only the first two keys when weights has two entries.
  std::vector<double> w2(2);
  AttentionWeights(q, keys, 4, w2);
  EXPECT_NEAR(w2[0], std::exp(1.0) / (std::exp(1.0) + 1), 1e-9);
}

TEST(AttentionTest, WeightsDoNotOverflowOnHugeLogits) {
  const std::vector<float> q = {1000, 0};
  const std::vector<float> keys = {1000, 0,   999, 0};
  std::vector<double> w(2);
  AttentionWeights(q, keys, 2, w);
  EXPECT_NEAR(w[0], 1.0, 1e-12);
  EXPECT_TRUE(std::isfinite(w[1]));
}

TEST(AttentionTest, OutputIsWeightedSumOfValues) {
  const std::vector<double> w = {0.25, 0.75};
  const std::vector<float> v = {4, 0, 8,   0, 4, -4};
  std::vector<double> out(3);
  AttentionOutput(w, v, 3, out);
  EXPECT_DOUBLE_EQ(out[0], 1.0);
  EXPECT_DOUBLE_EQ(out[1], 3.0);
  EXPECT_DOUBLE_EQ(out[2], -1.0);
}

TEST(AttentionTest, RelativeError) {
  const std::vector<double> ref = {3, 4};
  const std::vector<double> approx = {3, 3};
  EXPECT_DOUBLE_EQ(RelativeL2Error(ref, approx), 0.2);
  const std::vector<double> zero = {0, 0};
  EXPECT_EQ(RelativeL2Error(zero, zero), 0.0);
  EXPECT_TRUE(std::isinf(RelativeL2Error(zero, ref)));
  const std::vector<float> rf = {1, 0, 0, 0};
  const std::vector<float> af = {1, 0.5f, 0, 0};
  EXPECT_DOUBLE_EQ(RelativeL2Error(rf, af), 0.5);
}

TEST(AttentionTest, KlDivergence) {
  const std::vector<double> p = {0.5, 0.5};
  const std::vector<double> q = {0.25, 0.75};
  EXPECT_NEAR(KlDivergence(p, q), 0.5 * std::log(2.0) + 0.5 * std::log(0.5 / 0.75), 1e-12);
  EXPECT_EQ(KlDivergence(p, p), 0.0);
  // A key the approximation drops entirely: large but finite.
  const std::vector<double> dropped = {1.0, 0.0};
  const double kl = KlDivergence(p, dropped);
  EXPECT_TRUE(std::isfinite(kl));
  EXPECT_GT(kl, 100);
  // p == 0 terms contribute nothing.
  const std::vector<double> p0 = {1.0, 0.0};
  EXPECT_NEAR(KlDivergence(p0, q), std::log(4.0), 1e-12);
}

TEST(AttentionTest, TopKAndRecall) {
  const std::vector<double> ref = {0.1, 0.5, 0.05, 0.3, 0.05};
  EXPECT_EQ(TopK(ref, 2), (std::vector<uint32_t>{1, 3}));
  // Ties break by lower index.
  EXPECT_EQ(TopK(ref, 5), (std::vector<uint32_t>{1, 3, 0, 2, 4}));
  EXPECT_EQ(TopK(ref, 10).size(), 5u);
  const std::vector<double> approx = {0.4, 0.35, 0.05, 0.1, 0.1};
  // True top-2 {1, 3}; approx top-2 {0, 1}: one of two recalled.
  EXPECT_DOUBLE_EQ(TopKRecall(ref, approx, 2), 0.5);
  EXPECT_DOUBLE_EQ(TopKRecall(ref, ref, 3), 1.0);
  // True top-3 {1, 3, 0}; approx top-3 {0, 1, 3}: all recalled.
  EXPECT_DOUBLE_EQ(TopKRecall(ref, approx, 3), 1.0);
}

TEST(AttentionTest, Sparsity) {
  const std::vector<double> w = {0.9, 0.05, 0.005, 0.0089, 0.0091};
  // Threshold 0.009: 0.005 and 0.0089 are below.
  EXPECT_DOUBLE_EQ(SparsityBelow(w, 0.01), 0.4);
  EXPECT_DOUBLE_EQ(SparsityBelow(std::vector<double>{}, 0.01), 0.0);
}

TEST(AttentionTest, ChannelMaxMedianRatio) {
  // 2 rows x 4 columns; column mean |x| = 1, 2, 3, 10 -> median 2.5, max 10 -> 4.
  const std::vector<float> x = {1, -2, 3, 10,   -1, 2, -3, -10};
  EXPECT_DOUBLE_EQ(ChannelMaxMedianRatio(x, 2, 4), 4.0);
  // Odd column count: median is the middle one.
  const std::vector<float> y = {1, 2, 6};
  EXPECT_DOUBLE_EQ(ChannelMaxMedianRatio(y, 1, 3), 3.0);
}

TEST(AttentionTest, ZipfSlopeRecoversExponent) {
  std::vector<double> acc;
  for (int r = 1; r <= 200; ++r) acc.push_back(5.0 * std::pow(r, -1.3));
  // Order must not matter.
  std::swap(acc[0], acc[150]);
  EXPECT_NEAR(ZipfSlope(acc, 1, 200), -1.3, 1e-9);
  EXPECT_NEAR(ZipfSlope(acc, 2, 50), -1.3, 1e-9);
  EXPECT_EQ(ZipfSlope(std::vector<double>{1.0}, 1, 10), 0.0);
}

TEST(AttentionTest, PercentileAndMeanStd) {
  std::vector<double> v = {5, 1, 3, 2, 4};
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 3.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 5.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(Percentile(v, 25), 2.0);
  EXPECT_DOUBLE_EQ(Percentile({1, 2}, 99), 1.99);
  const std::vector<double> s = {2, 4, 4, 4, 5, 5, 7, 9};
  const MeanStd ms = ComputeMeanStd(s);
  EXPECT_DOUBLE_EQ(ms.mean, 5.0);
  EXPECT_NEAR(ms.std, std::sqrt(32.0 / 7.0), 1e-12);
  EXPECT_EQ(ComputeMeanStd(std::vector<double>{3.0}).std, 0.0);
}

}  // namespace
}  // namespace kvtier::tools
