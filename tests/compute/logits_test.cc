// compute/logits.h: log-softmax, argmax, KL and top-k on hand-derived small cases; ties and the
// documented summation order.
#include "compute/logits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "util/error.h"

namespace larql::compute {
namespace {

TEST(LogSoftmax, HandDerived) {
  // [0, ln 2]: probabilities 1/3 and 2/3 (e^0 : e^ln2 = 1 : 2). ln 2 as f32 is off by ~3e-8.
  const float x[2] = {0.0f, static_cast<float>(std::log(2.0))};
  std::vector<double> out;
  log_softmax(x, 2, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NEAR(out[0], std::log(1.0 / 3.0), 1e-7);
  EXPECT_NEAR(out[1], std::log(2.0 / 3.0), 1e-7);
  // Equal logits: uniform, ln(1/4), whatever their size (the max shift keeps exp in range).
  const float big[4] = {1000.0f, 1000.0f, 1000.0f, 1000.0f};
  log_softmax(big, 4, out);
  for (double v : out) EXPECT_NEAR(v, std::log(0.25), 1e-12);
  const float tiny[4] = {-1000.0f, -1000.0f, -1000.0f, -1000.0f};
  log_softmax(tiny, 4, out);
  for (double v : out) EXPECT_NEAR(v, std::log(0.25), 1e-12);
  // One value: probability 1.
  const float one[1] = {-3.5f};
  log_softmax(one, 1, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], 0.0);
  // A far-below logit: exp underflows to 0 in the sum, so the top one keeps log-probability 0.
  const float apart[2] = {-1000.0f, 0.0f};
  log_softmax(apart, 2, out);
  EXPECT_EQ(out[1], 0.0);
  EXPECT_EQ(out[0], -1000.0);
}

TEST(LogSoftmax, IsTheDocumentedSumInDouble) {
  // The contract callers rely on bit for bit (accuracy, calibration, bench): x promoted to double,
  // m = max, s = sum exp(x - m) in index order, out = x - (m + ln s).
  std::vector<float> x(1000);
  uint32_t seed = 7;
  for (float& v : x) {
    seed = seed * 1664525u + 1013904223u;
    v = static_cast<float>(seed >> 8) / static_cast<float>(1u << 24) * 40.0f - 20.0f;
  }
  double m = x[0];
  for (float v : x) m = std::max(m, static_cast<double>(v));
  double s = 0;
  for (float v : x) s += std::exp(static_cast<double>(v) - m);
  const double lse = m + std::log(s);
  std::vector<double> out;
  log_softmax(x.data(), static_cast<int64_t>(x.size()), out);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(out[i], static_cast<double>(x[i]) - lse) << i;
}

TEST(LogSoftmax, EmptyInputIsAnError) {
  std::vector<double> out;
  EXPECT_THROW(log_softmax(nullptr, 0, out), Error);
}

TEST(Argmax, LargestAndFirstOnTies) {
  const float x[6] = {0.5f, 2.0f, -1.0f, 1.9f, 0.0f, 1.0f};
  EXPECT_EQ(argmax(x, 6), 1);
  const float ties[4] = {3.0f, 5.0f, 1.0f, 5.0f};
  EXPECT_EQ(argmax(ties, 4), 1);  // the lowest index among equal maxima
  const float all_equal[3] = {2.0f, 2.0f, 2.0f};
  EXPECT_EQ(argmax(all_equal, 3), 0);
  const float one[1] = {-7.0f};
  EXPECT_EQ(argmax(one, 1), 0);
  const double d[3] = {-1.0, -0.5, -0.5};
  EXPECT_EQ(argmax(d, 3), 1);
  // NaN, as documented: never chosen after index 0; at index 0 never replaced.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float with_nan[3] = {1.0f, nan, 2.0f};
  EXPECT_EQ(argmax(with_nan, 3), 2);
  const float nan_first[2] = {nan, 5.0f};
  EXPECT_EQ(argmax(nan_first, 2), 0);
  EXPECT_THROW(argmax(x, 0), Error);
}

// The vectorised argmax against the scalar definition (the first index of the largest value,
// NaN never chosen after index 0), on vectors long enough for its two passes and with the cases
// that differ between a max and a comparison: ties across vector lanes and the tail, +0 / -0,
// -inf everywhere, NaNs before and inside the maximum's block, NaN at index 0.
TEST(Argmax, VectorisedEqualsTheScalarLoop) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto scalar = [](const std::vector<float>& x) {
    int64_t best = 0;
    for (size_t i = 1; i < x.size(); ++i)
      if (x[i] > x[static_cast<size_t>(best)]) best = static_cast<int64_t>(i);
    return best;
  };
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  int checked = 0;
  for (int64_t n : {1, 7, 15, 16, 17, 31, 33, 100, 1000, 262144}) {
    for (int kind = 0; kind < 10; ++kind) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = std::round(u(rng));  // few distinct values: many ties
      std::uniform_int_distribution<int64_t> at(0, n - 1);
      if (kind == 1) std::fill(x.begin(), x.end(), -inf);
      if (kind == 2) {
        std::fill(x.begin(), x.end(), 0.0f);
        for (int k = 0; k < 5; ++k) x[static_cast<size_t>(at(rng))] = -0.0f;
      }
      if (kind == 3)
        for (int k = 0; k < 9; ++k) x[static_cast<size_t>(at(rng))] = nan;
      if (kind == 4) x[0] = nan;
      if (kind == 5) x[static_cast<size_t>(n - 1)] = 9.0f;  // the maximum in the scalar tail
      if (kind == 6 && n > 2) {
        x[static_cast<size_t>(n / 2)] = 9.0f;
        x[static_cast<size_t>(n / 2 - 1)] = nan;
      }
      if (kind == 7) x[static_cast<size_t>(at(rng))] = inf;
      if (kind == 8) x[static_cast<size_t>(n - 1)] = nan;  // the last element
      if (kind == 9 && n >= 16) x[static_cast<size_t>(n / 16 * 16 - 1)] = nan;  // the last vector's last lane
      ASSERT_EQ(argmax(x.data(), n), scalar(x)) << "n=" << n << " kind=" << kind;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 100);
}

std::vector<double> logs(std::vector<double> p) {
  for (double& v : p) v = std::log(v);
  return p;
}

TEST(Kl, HandDerived) {
  // KL([.5,.5] || [.25,.75]) = .5 ln(.5/.25) + .5 ln(.5/.75) = .5 ln 2 + .5 ln(2/3) = .5 ln(4/3).
  auto p = logs({0.5, 0.5}), q = logs({0.25, 0.75});
  EXPECT_NEAR(kl_nats(p.data(), q.data(), 2), 0.5 * std::log(4.0 / 3.0), 1e-12);
  // Not symmetric: KL([.25,.75] || [.5,.5]) = .25 ln .5 + .75 ln 1.5 = .75 ln 3 - ln 2.
  EXPECT_NEAR(kl_nats(q.data(), p.data(), 2), 0.75 * std::log(3.0) - std::log(2.0), 1e-12);
  // KL(P || P) = 0 exactly (every term is p * 0).
  auto r = logs({0.2, 0.3, 0.5});
  EXPECT_EQ(kl_nats(r.data(), r.data(), 3), 0.0);
  // A zero in P contributes nothing (0 ln 0 = 0), even where Q is 0 too: KL([1,0] || [.5,.5]) = ln 2.
  const double one[2] = {0.0, -INFINITY}, half[2] = {std::log(0.5), std::log(0.5)}, other[2] = {0.0, -INFINITY};
  EXPECT_NEAR(kl_nats(one, half, 2), std::log(2.0), 1e-12);
  EXPECT_EQ(kl_nats(one, other, 2), 0.0);
  // From logits: P = softmax([0, ln 2]) = [1/3, 2/3], Q = softmax([0, 0]) = [1/2, 1/2]:
  // KL = 1/3 ln(2/3) + 2/3 ln(4/3) = 5/3 ln 2 - ln 3.
  const float lp[2] = {0.0f, static_cast<float>(std::log(2.0))}, lq[2] = {0.0f, 0.0f};
  std::vector<double> a, b;
  log_softmax(lp, 2, a);
  log_softmax(lq, 2, b);
  EXPECT_NEAR(kl_nats(a.data(), b.data(), 2), 5.0 / 3.0 * std::log(2.0) - std::log(3.0), 1e-7);
  // f32 log-probabilities for P (a stored reference), promoted to double.
  const float pf[2] = {static_cast<float>(std::log(0.5)), static_cast<float>(std::log(0.5))};
  EXPECT_NEAR(kl_nats(pf, q.data(), 2), 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_THROW(kl_nats(p.data(), q.data(), 0), Error);
}

TEST(Kl, NeverNegative) {
  // Log-probabilities that do not quite normalise (rounding) can make the sum negative; the
  // result is clamped to 0. P = [.5, .5] against Q with q_i slightly above .5: sum p ln(p/q) < 0.
  const double p[2] = {std::log(0.5), std::log(0.5)}, q[2] = {std::log(0.5 + 1e-12), std::log(0.5 + 1e-12)};
  EXPECT_EQ(kl_nats(p, q, 2), 0.0);
}

TEST(TopK, LargestFirstTiesByLowerIndex) {
  const float x[6] = {0.5f, 2.0f, -1.0f, 1.9f, 0.0f, 1.0f};
  std::vector<Scored> out(100, Scored{9.0f, 99});  // a reused buffer: resized to k
  top_k(x, 6, 2, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].index, 1);
  EXPECT_EQ(out[0].value, 2.0f);
  EXPECT_EQ(out[1].index, 3);
  EXPECT_EQ(out[1].value, 1.9f);
  // k >= n: all of them, sorted.
  top_k(x, 6, 10, out);
  std::vector<int32_t> ids;
  for (const Scored& s : out) ids.push_back(s.index);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 5, 0, 4, 2}));
  // Ties: the lower index first, also across the k cut.
  const float ties[5] = {5.0f, 1.0f, 5.0f, 3.0f, 5.0f};
  top_k(ties, 5, 2, out);
  ids.clear();
  for (const Scored& s : out) ids.push_back(s.index);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 2}));
  top_k(ties, 5, 4, out);
  ids.clear();
  for (const Scored& s : out) ids.push_back(s.index);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 2, 4, 3}));
  top_k(x, 6, 1, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].index, argmax(x, 6));
  EXPECT_THROW(top_k(x, 6, 0, out), Error);
  EXPECT_THROW(top_k(x, 0, 1, out), Error);
}

// Against a full sort by the documented order, on vectors with many ties (values from a few
// levels) and on distinct values, for k across the range.
TEST(TopK, EqualsAFullSortByTheTotalOrder) {
  std::mt19937 rng(11);
  for (int levels : {3, 50, 0}) {
    for (int64_t n : {1, 7, 100, 5000}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x)
        v = levels ? static_cast<float>(rng() % levels) : std::uniform_real_distribution<float>(-30, 30)(rng);
      std::vector<int32_t> order(static_cast<size_t>(n));
      for (int32_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return x[static_cast<size_t>(a)] > x[static_cast<size_t>(b)] || (x[static_cast<size_t>(a)] == x[static_cast<size_t>(b)] && a < b);
      });
      for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{40}, n - 1, n, n + 3}) {
        if (k < 1) continue;
        std::vector<Scored> out;
        top_k(x.data(), n, k, out);
        ASSERT_EQ(static_cast<int64_t>(out.size()), std::min(k, n));
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_EQ(out[i].index, order[i]) << "levels " << levels << " n " << n << " k " << k << " rank " << i;
          ASSERT_EQ(out[i].value, x[static_cast<size_t>(order[i])]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace larql::compute
