// CPU compute primitives against hand-derived values and naive double-precision references
// written from the formulas (RMSNorm: Zhang & Sennrich 2019; RoPE NeoX split-half: Su et al. 2021
// with HF rotate_half; GELU-tanh: Hendrycks & Gimpel 2016).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "compute/ops.h"
#include "compute/tensor.h"
#include "quant/quant.h"
#include "util/dtype.h"
#include "util/error.h"

namespace larql {
namespace {

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// ---------------------------------------------------------------- RMSNorm

TEST(Ops, RmsNormHandCase) {
  // x = (3, 4): mean(x^2) = 12.5, rms = sqrt(12.5 + eps).
  const float x[2] = {3.0f, 4.0f};
  const float w[2] = {1.0f, 2.0f};
  float y[2];
  compute::rmsnorm(x, w, y, 2, 0.0f);
  const double r = std::sqrt(12.5);
  EXPECT_NEAR(y[0], 3.0 / r, 1e-6);
  EXPECT_NEAR(y[1], 2.0 * 4.0 / r, 1e-6);
  // eps matters for tiny inputs: x = (0, 0, 0, 1e-4), eps = 1e-6 -> 1e-4 / sqrt(2.5e-9 + 1e-6).
  const float x2[4] = {0, 0, 0, 1e-4f};
  const float w2[4] = {1, 1, 1, 1};
  float y2[4];
  compute::rmsnorm(x2, w2, y2, 4, 1e-6f);
  EXPECT_NEAR(y2[3], 1e-4 / std::sqrt(2.5e-9 + 1e-6), 1e-5);
  EXPECT_EQ(y2[0], 0.0f);
}

TEST(Ops, RmsNormMatchesReferenceAndInPlace) {
  const int64_t n = 640;
  auto x = randn(n, 1, 3.0f);
  auto w = randn(n, 2, 0.2f);
  for (auto& v : w) v += 1.0f;
  std::vector<float> y(n);
  compute::rmsnorm(x.data(), w.data(), y.data(), n, 1e-6f);
  double ss = 0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], x[i] * inv * w[i], 1e-5 * (1 + std::abs(x[i] * inv * w[i])));
  std::vector<float> z = x;
  compute::rmsnorm(z.data(), w.data(), z.data(), n, 1e-6f);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[i], y[i]);
}

TEST(Ops, RmsNormRowsNormalisesEachRowSeparately) {
  // Two rows of 2 with very different scales; each is normalised on its own.
  float x[4] = {3, 4, 300, 400};
  const float w[2] = {1, 1};
  compute::rmsnorm_rows(x, w, 2, 2, 0.0f);
  const double r = std::sqrt(12.5);
  EXPECT_NEAR(x[0], 3 / r, 1e-6);
  EXPECT_NEAR(x[1], 4 / r, 1e-6);
  EXPECT_NEAR(x[2], 3 / r, 1e-6);
  EXPECT_NEAR(x[3], 4 / r, 1e-6);
}

// ---------------------------------------------------------------- RoPE

TEST(Ops, RopePositionZeroIsIdentity) {
  auto x = randn(3 * 16, 3);
  auto y = x;
  compute::rope_neox(y.data(), 3, 16, 0, 10000.0, 1.0);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i]);
}

TEST(Ops, RopeHandComputedPos1) {
  // head_dim 4, base 100: theta_0 = 1 rad, theta_1 = 100^(-1/2) = 0.1 rad. Pairs (0,2), (1,3).
  float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  compute::rope_neox(x, 1, 4, 1, 100.0, 1.0);
  const double c0 = std::cos(1.0), s0 = std::sin(1.0), c1 = std::cos(0.1), s1 = std::sin(0.1);
  EXPECT_NEAR(x[0], 1 * c0 - 3 * s0, 1e-6);
  EXPECT_NEAR(x[2], 1 * s0 + 3 * c0, 1e-6);
  EXPECT_NEAR(x[1], 2 * c1 - 4 * s1, 1e-6);
  EXPECT_NEAR(x[3], 2 * s1 + 4 * c1, 1e-6);
}

TEST(Ops, RopeAdjacentHandComputedPos1) {
  // head_dim 4, base 100: theta_0 = 1 rad, theta_1 = 100^(-1/2) = 0.1 rad. Pairs (0,1), (2,3)
  // (Llama: x'[2i] = x[2i] cos - x[2i+1] sin, x'[2i+1] = x[2i] sin + x[2i+1] cos).
  float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  compute::rope_adjacent(x, 1, 4, 1, 100.0, 1.0);
  const double c0 = std::cos(1.0), s0 = std::sin(1.0), c1 = std::cos(0.1), s1 = std::sin(0.1);
  EXPECT_NEAR(x[0], 1 * c0 - 2 * s0, 1e-6);
  EXPECT_NEAR(x[1], 1 * s0 + 2 * c0, 1e-6);
  EXPECT_NEAR(x[2], 3 * c1 - 4 * s1, 1e-6);
  EXPECT_NEAR(x[3], 3 * s1 + 4 * c1, 1e-6);
}

TEST(Ops, RopeAdjacentTwoHeadsScaledAndBeyondTheTable) {
  // Two heads of dim 2 (one pair each, i = 0 -> theta = pos * freq_scale), at a position the
  // per-thread table does not hold (>= 8192): angle 10000 * 0.5 = 5000 rad.
  float x[4] = {1, 0, 0, 1};
  compute::rope_adjacent(x, 2, 2, 10000, 10000.0, 0.5);
  EXPECT_NEAR(x[0], std::cos(5000.0), 1e-5);
  EXPECT_NEAR(x[1], std::sin(5000.0), 1e-5);
  EXPECT_NEAR(x[2], -std::sin(5000.0), 1e-5);
  EXPECT_NEAR(x[3], std::cos(5000.0), 1e-5);
}

TEST(Ops, AddBiasRows) {
  float x[6] = {1, 2, 3, 4, 5, 6};
  const float b[3] = {10, 20, 30};
  compute::add_bias_rows(x, b, 2, 3);
  const float want[6] = {11, 22, 33, 14, 25, 36};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(x[i], want[i]);
}

TEST(Ops, RopeMultipleHeadsAndScaling) {
  // Two heads of dim 2 (one pair each), position 3, base anything (i = 0 -> theta = pos),
  // freq_scale 0.5 -> angle 1.5.
  float x[4] = {1, 0, 0, 1};
  compute::rope_neox(x, 2, 2, 3, 10000.0, 0.5);
  EXPECT_NEAR(x[0], std::cos(1.5), 1e-6);
  EXPECT_NEAR(x[1], std::sin(1.5), 1e-6);
  EXPECT_NEAR(x[2], -std::sin(1.5), 1e-6);
  EXPECT_NEAR(x[3], std::cos(1.5), 1e-6);
}

TEST(Ops, RopeMatchesReferenceAtLargePosition) {
  const int64_t d = 256, heads = 2, pos = 4321;
  const double base = 1e6;
  auto x = randn(heads * d, 4);
  auto y = x;
  compute::rope_neox(y.data(), heads, d, pos, base, 0.125);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i) {
      const double th = pos * 0.125 * std::pow(base, -2.0 * i / d);
      const double a = x[h * d + i], b = x[h * d + i + d / 2];
      EXPECT_NEAR(y[h * d + i], a * std::cos(th) - b * std::sin(th), 2e-5);
      EXPECT_NEAR(y[h * d + i + d / 2], a * std::sin(th) + b * std::cos(th), 2e-5);
    }
}

TEST(Ops, RopeDotDependsOnlyOnRelativePosition) {
  const int64_t d = 64;
  const auto q0 = randn(d, 5), k0 = randn(d, 6);
  auto dot_at = [&](int64_t pq, int64_t pk) {
    auto q = q0, k = k0;
    compute::rope_neox(q.data(), 1, d, pq, 10000.0, 1.0);
    compute::rope_neox(k.data(), 1, d, pk, 10000.0, 1.0);
    double s = 0;
    for (int64_t i = 0; i < d; ++i) s += static_cast<double>(q[i]) * k[i];
    return s;
  };
  const double a = dot_at(7, 3), b = dot_at(104, 100), c = dot_at(4, 0);
  EXPECT_NEAR(a, b, 1e-3);
  EXPECT_NEAR(a, c, 1e-3);
  // ... and it does depend on the distance (the test could fail).
  EXPECT_GT(std::abs(a - dot_at(8, 3)), 1e-2);
}

// ---------------------------------------------------------------- softmax

TEST(Ops, SoftmaxHandCase) {
  float x[3] = {1.0f, 2.0f, 3.0f};
  compute::softmax(x, 3);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(x[0], std::exp(1.0) / z, 1e-6);
  EXPECT_NEAR(x[1], std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(x[2], std::exp(3.0) / z, 1e-6);
}

TEST(Ops, SoftmaxIsStableForLargeValues) {
  float x[3] = {1000.0f, 1000.0f, -1000.0f};
  compute::softmax(x, 3);
  EXPECT_NEAR(x[0], 0.5, 1e-6);
  EXPECT_NEAR(x[1], 0.5, 1e-6);
  EXPECT_EQ(x[2], 0.0f);
  float one[1] = {-5e30f};
  compute::softmax(one, 1);
  EXPECT_EQ(one[0], 1.0f);
  auto r = randn(1000, 7, 10.0f);
  compute::softmax(r.data(), 1000);
  double s = 0;
  for (float v : r) {
    EXPECT_GE(v, 0.0f);
    s += v;
  }
  EXPECT_NEAR(s, 1.0, 1e-5);
  compute::softmax(nullptr, 0);  // no-op
}

// ---------------------------------------------------------------- GELU

double gelu_ref(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

TEST(Ops, GeluTanh) {
  EXPECT_EQ(compute::gelu_tanh(0.0f), 0.0f);
  // By hand: x=1: tanh(0.7978845608 * 1.044715) = tanh(0.8335) = 0.68238 -> 0.84119.
  EXPECT_NEAR(compute::gelu_tanh(1.0f), 0.841192, 1e-5);
  EXPECT_NEAR(compute::gelu_tanh(-1.0f), -0.158808, 1e-5);
  EXPECT_NEAR(compute::gelu_tanh(3.0f), 2.996363, 1e-5);
  for (double x : {1.0, -1.0, 3.0, -3.0, 0.5, -0.25, 10.0, -10.0})
    EXPECT_NEAR(compute::gelu_tanh(static_cast<float>(x)), gelu_ref(x), 1e-6 * (1 + std::abs(x))) << x;
  const float g[3] = {1.0f, -1.0f, 3.0f}, u[3] = {2.0f, 3.0f, -1.0f};
  float o[3];
  compute::gelu_tanh_mul(g, u, o, 3);
  EXPECT_NEAR(o[0], 2 * gelu_ref(1.0), 1e-5);
  EXPECT_NEAR(o[1], 3 * gelu_ref(-1.0), 1e-5);
  EXPECT_NEAR(o[2], -gelu_ref(3.0), 1e-5);
}

// The vectorised GELU against the double formula over a wide range (relative, with an absolute
// floor for the tiny negative tail, where x / (1 + e^-2u) keeps full relative accuracy anyway).
TEST(Ops, GeluTanhMulMatchesDoubleFormula) {
  std::vector<float> g, u;
  for (double x = -20.0; x <= 20.0; x += 0.0137) {
    g.push_back(static_cast<float>(x));
    u.push_back(1.0f);
  }
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 1e4f, -1e4f, 3e38f, -3e38f}) {
    g.push_back(x);
    u.push_back(1.0f);
  }
  std::vector<float> o(g.size());
  compute::gelu_tanh_mul(g.data(), u.data(), o.data(), static_cast<int64_t>(g.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    // gelu_ref's 1 + tanh(u) cancels for x < -9 in double too; x / (1 + e^-2u) is the same
    // function without the cancellation.
    const double x = g[i], u = std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x);
    const double want = std::abs(x) > 1e3 ? (x > 0 ? x : 0.0) : x / (1.0 + std::exp(-2.0 * u));
    // exp(-2u) inherits the float rounding of its argument: relative |2u| * 2^-24 more.
    ASSERT_NEAR(o[i], want, (1e-6 + std::abs(2 * u) * 1.2e-7) * std::abs(want) + 1e-30) << "x=" << g[i];
    ASSERT_TRUE(std::isfinite(o[i])) << g[i];
  }
}

// The vectorised SiLU-gated product against the double formula x / (1 + e^-x) * up (Elfwing et
// al. 2018), over a wide range and the extremes; and position independence as for GELU.
TEST(Ops, SiluMulMatchesDoubleFormula) {
  std::vector<float> g, u;
  for (double x = -100.0; x <= 100.0; x += 0.0371) {
    g.push_back(static_cast<float>(x));
    u.push_back(static_cast<float>(0.5 + std::fmod(std::abs(x), 1.0)));
  }
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 1e4f, -1e4f, 3e38f, -3e38f}) {
    g.push_back(x);
    u.push_back(1.0f);
  }
  std::vector<float> o(g.size());
  compute::silu_mul(g.data(), u.data(), o.data(), static_cast<int64_t>(g.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = g[i];
    const double want = (std::abs(x) > 1e3 ? (x > 0 ? x : 0.0) : x / (1.0 + std::exp(-x))) * u[i];
    // exp(-x) inherits the float rounding of x: relative |x| * 2^-24 more.
    ASSERT_NEAR(o[i], want, (1e-6 + std::abs(x) * 1.2e-7) * std::abs(want) + 1e-30) << "x=" << g[i];
    ASSERT_TRUE(std::isfinite(o[i])) << g[i];
    ASSERT_NEAR(compute::silu(g[i]) * u[i], want, (1e-6 + std::abs(x) * 1.2e-7) * std::abs(want) + 1e-30) << g[i];
  }
  const auto base = randn(40, 23, 4.0f);
  std::vector<float> ones(base.size(), 1.0f), ref(base.size());
  compute::silu_mul(base.data(), ones.data(), ref.data(), static_cast<int64_t>(base.size()));
  for (int64_t off = 0; off < 9; ++off)
    for (int64_t n = 1; n + off <= static_cast<int64_t>(base.size()); n += 5) {
      std::vector<float> out(static_cast<size_t>(n));
      compute::silu_mul(base.data() + off, ones.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], ref[off + i]) << off << " " << n << " " << i;
    }
}

// Each output depends on its own inputs only: the same value anywhere in a vector of any length
// (SIMD body or tail) gives the same bits. Batched and one-token FFNs rely on it.
TEST(Ops, ElementwiseKernelsArePositionIndependent) {
  const auto base = randn(40, 21, 3.0f);
  std::vector<float> ref_g(base.size()), ref_e(base.size()), ones(base.size(), 1.0f);
  compute::gelu_tanh_mul(base.data(), ones.data(), ref_g.data(), static_cast<int64_t>(base.size()));
  for (int64_t off = 0; off < 9; ++off)
    for (int64_t n = 1; n + off <= static_cast<int64_t>(base.size()); n += 5) {
      std::vector<float> out(static_cast<size_t>(n));
      compute::gelu_tanh_mul(base.data() + off, ones.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], ref_g[off + i]) << off << " " << n << " " << i;
    }
  // softmax over a prefix: exp values identical, only the normaliser differs.
  std::vector<float> a(base.begin(), base.begin() + 13), b(base.begin(), base.begin() + 8);
  compute::softmax(a.data(), 13);
  compute::softmax(b.data(), 8);
  double sa = 0, sb = 0;
  for (float v : a) sa += v;
  for (float v : b) sb += v;
  EXPECT_NEAR(sa, 1.0, 1e-6);
  EXPECT_NEAR(sb, 1.0, 1e-6);
}

TEST(Ops, SoftmaxMatchesDoubleReference) {
  const auto x = randn(777, 31, 4.0f);
  std::vector<float> y = x;
  compute::softmax(y.data(), static_cast<int64_t>(y.size()));
  double m = -1e300, z = 0;
  for (float v : x) m = std::max(m, double(v));
  for (float v : x) z += std::exp(double(v) - m);
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(double(x[i]) - m) / z;
    // exp's ~1 ulp plus the rounding of x - max in float (relative |x - max| * 2^-24).
    ASSERT_NEAR(y[i], want, (3e-7 + (m - x[i]) * 6e-8) * want + 1e-30) << i;
  }
}

// ---------------------------------------------------------------- axpy / dot

TEST(Ops, AxpyAndDot) {
  for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 33, 64, 100, 1027}) {
    auto x = randn(static_cast<size_t>(n), 8), y = randn(static_cast<size_t>(n), 9);
    double ref = 0;
    for (int64_t i = 0; i < n; ++i) ref += static_cast<double>(x[i]) * y[i];
    EXPECT_NEAR(compute::dot_f32(x.data(), y.data(), n), ref, 1e-4 * (1 + std::sqrt(static_cast<double>(n)))) << n;
    auto z = y;
    compute::axpy(-0.75f, x.data(), z.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(z[i], y[i] - 0.75 * x[i], 1e-6 * (1 + std::abs(y[i]) + std::abs(x[i]))) << n;
  }
}

// ---------------------------------------------------------------- matmul

struct QuantWeight {
  std::vector<uint8_t> bytes;
  TensorView view;
  std::vector<float> deq;  // dequantised weight, [rows, cols]
};

QuantWeight make_weight(DType t, int64_t rows, int64_t cols, uint64_t seed) {
  QuantWeight q;
  const auto w = randn(static_cast<size_t>(rows * cols), seed, 0.5f);
  const size_t rb = *row_bytes(t, static_cast<uint64_t>(cols));
  q.bytes.resize(rb * static_cast<size_t>(rows));
  q.deq.resize(w.size());
  for (int64_t r = 0; r < rows; ++r) {
    quant::quantize_row(t, w.data() + r * cols, q.bytes.data() + r * rb, cols);
    quant::dequantize_row(t, q.bytes.data() + r * rb, q.deq.data() + r * cols, cols);
  }
  q.view = TensorView{t, rows, cols, q.bytes.data(), rb};
  return q;
}

// The activation is quantised per block (Q8_0: 32 values, scale amax/127 stored as f16; Q8_K:
// 256 values, scale amax/128 in f32, values clamped to 127), so each activation is off by at most
// about one quantisation step amax_block/127. The dot product's error is bounded by
// sum_c |w_c| * step(c), plus f32 rounding.
double act_error_bound(DType act, const float* w, const float* x, int64_t cols) {
  if (act == DType::F32) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::abs(static_cast<double>(w[c]) * x[c]);
    return 1e-5 * s + 1e-6;
  }
  const int64_t block = act == DType::Q8_0 ? 32 : 256;
  double bound = 0, mag = 0;
  for (int64_t b = 0; b < cols; b += block) {
    double amax = 0;
    for (int64_t c = b; c < b + block; ++c) amax = std::max(amax, std::abs(static_cast<double>(x[c])));
    const double step = amax / 127.0;
    for (int64_t c = b; c < b + block; ++c) {
      bound += std::abs(w[c]) * step;
      mag += std::abs(static_cast<double>(w[c]) * x[c]);
    }
  }
  return bound + 1e-5 * mag + 1e-6;
}

class MatmulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTest, MatchesNaiveLoopOverDequantisedWeights) {
  const DType t = GetParam();
  const int64_t rows = 37, cols = 512, n_tokens = 3;  // rows not a multiple of the 16-row tile
  const QuantWeight q = make_weight(t, rows, cols, 11);
  const auto x = randn(static_cast<size_t>(n_tokens * cols), 12);
  const DType act = quant::vec_dot_type(t);
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    std::vector<float> y(static_cast<size_t>(n_tokens * rows), -12345.0f);
    compute::matmul(pool, q.view, x.data(), n_tokens, y.data());
    for (int64_t tk = 0; tk < n_tokens; ++tk)
      for (int64_t r = 0; r < rows; ++r) {
        const float* wr = q.deq.data() + r * cols;
        const float* xt = x.data() + tk * cols;
        double ref = 0;
        for (int64_t c = 0; c < cols; ++c) ref += static_cast<double>(wr[c]) * xt[c];
        const double bound = act_error_bound(act, wr, xt, cols);
        ASSERT_NEAR(y[tk * rows + r], ref, bound)
            << dtype_name(t) << " threads=" << threads << " token " << tk << " row " << r;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulTest,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0,
                                           DType::Q5_0, DType::Q4_K, DType::Q5_K, DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Ops, MatmulF32IsTight) {
  // A hand case: W = [[1, 2], [3, 4], [-1, 0.5]], X = [[1, 1], [2, -1]].
  const float w[6] = {1, 2, 3, 4, -1, 0.5f};
  const float x[4] = {1, 1, 2, -1};
  TensorView v{DType::F32, 3, 2, reinterpret_cast<const uint8_t*>(w), 2 * sizeof(float)};
  float y[6];
  ThreadPool pool(2);
  compute::matmul(pool, v, x, 2, y);
  const float expect[6] = {3, 7, -0.5f, 0, 2, -2.5f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], expect[i]) << i;
}

TEST(Ops, MatmulRejectsRowLengthNotMultipleOfActivationBlock) {
  // A Q8_0-shaped view with 48 columns cannot be multiplied (activations need blocks of 32).
  std::vector<uint8_t> bytes(34 * 4, 0);
  TensorView v{DType::Q8_0, 2, 48, bytes.data(), 68};
  std::vector<float> x(48, 1.0f), y(2);
  ThreadPool pool(1);
  try {
    compute::matmul(pool, v, x.data(), 1, y.data());
    FAIL() << "expected Error{Unsupported}";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
  }
}

[[noreturn]] void matmul_unsupported_child() {
  std::vector<uint8_t> bytes(84 * 64, 0);
  TensorView v{DType::Q2_K, 64, 256, bytes.data(), 84};
  std::vector<float> x(256, 1.0f), y(64);
  ThreadPool pool(4);
  int code = 3;
  try {
    compute::matmul(pool, v, x.data(), 1, y.data());
    code = 2;
  } catch (const Error& e) {
    code = e.kind() == ErrorKind::Unsupported ? 0 : 1;
  }
  // Give the workers time to finish their chunks (and to crash, if they throw).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::_Exit(code);
}

// ops.h: "Errors: Error{Unsupported} if W.type has no kernel." That must hold with a
// multi-threaded pool too (an exception escaping a worker thread would call std::terminate).
// Run in a child process so a crash fails this test only.
TEST(OpsDeathTest, MatmulUnsupportedTypeThrowsWithThreads) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(matmul_unsupported_child(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace larql

namespace larql {
namespace {

// dot_f32_rows / axpy_rows: each row bit for bit the single-row kernel (turbo-quant's attention
// relies on it to give the same scores whatever the grouping), for 1..6 rows (the 4-row step and
// the rest) and lengths with and without a scalar tail; and near a double dot product.
TEST(Ops, RowKernelsEqualTheSingleRowOnes) {
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t n : {16, 40, 256, 259}) {
    for (int64_t rows = 1; rows <= 6; ++rows) {
      std::vector<float> x(static_cast<size_t>(rows * n)), y(static_cast<size_t>(n)), a(static_cast<size_t>(rows));
      for (auto& v : x) v = nd(rng);
      for (auto& v : y) v = nd(rng);
      for (auto& v : a) v = nd(rng);
      std::vector<float> got(static_cast<size_t>(rows));
      compute::dot_f32_rows(x.data(), rows, y.data(), n, got.data());
      for (int64_t r = 0; r < rows; ++r) {
        const float want = compute::dot_f32(x.data() + r * n, y.data(), n);
        ASSERT_EQ(got[static_cast<size_t>(r)], want) << "n=" << n << " rows=" << rows << " r=" << r;
        double d = 0;
        for (int64_t i = 0; i < n; ++i) d += double(x[static_cast<size_t>(r * n + i)]) * y[static_cast<size_t>(i)];
        ASSERT_NEAR(got[static_cast<size_t>(r)], d, 1e-4 * n);
      }
      std::vector<float> acc(x), one(x);
      compute::axpy_rows(a.data(), y.data(), acc.data(), rows, n);
      for (int64_t r = 0; r < rows; ++r) compute::axpy(a[static_cast<size_t>(r)], y.data(), one.data() + r * n, n);
      ASSERT_EQ(acc, one) << "n=" << n << " rows=" << rows;
    }
  }
}

}  // namespace
}  // namespace larql

namespace larql {
namespace {

// gemm_f32_nt / gemm_f32_nn_acc (EditTail's f32 layers, LQL's slot choice): against a double
// product; each element the same bits whatever the batch (a token run alone or among others, at
// any place in the tiles) and on every ISA (scalar, AVX2, AVX-512: one order, simd.cc's), the
// nt form's element dot_f32's bits at AVX2; the accumulating form adds to what y held. Sizes with
// and without tails of the tiles, and a power-of-two width (the packed panels).
TEST(Ops, F32GemmsMatchADoubleProductAndDoNotDependOnTheBatch) {
  const quant::Isa saved = quant::active_isa();
  ThreadPool pool(2);
  for (auto [n, rows, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 7}, {5, 7, 40}, {13, 50, 259}, {8, 48, 256}, {7, 33, 2048}, {14, 9, 24}, {25, 70, 640}}) {
    const std::vector<float> x = randn(static_cast<size_t>(n * k), 31 + n), w = randn(static_cast<size_t>(rows * k), 32 + rows);
    const std::vector<float> a = randn(static_cast<size_t>(n * rows), 33 + k), y0 = randn(static_cast<size_t>(n * k), 34);
    std::vector<float> y_ref, acc_ref;
    for (quant::Isa isa : {quant::Isa::AVX2, quant::Isa::AVX512, quant::Isa::Scalar}) {
      if (isa > quant::detect_isa()) continue;
      quant::set_isa(isa);
      std::vector<float> y(static_cast<size_t>(n * rows));
      compute::gemm_f32_nt(pool, x.data(), n, w.data(), rows, k, y.data());
      std::vector<float> acc = y0;  // x's shape [n][k]: += a [n][rows] w [rows][k]
      compute::gemm_f32_nn_acc(pool, a.data(), n, w.data(), rows, k, acc.data());
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          double d = 0, mag = 0;
          for (int64_t i = 0; i < k; ++i) {
            d += double(x[static_cast<size_t>(t * k + i)]) * w[static_cast<size_t>(r * k + i)];
            mag += std::fabs(double(x[static_cast<size_t>(t * k + i)]) * w[static_cast<size_t>(r * k + i)]);
          }
          ASSERT_NEAR(y[static_cast<size_t>(t * rows + r)], d, 1e-6 * mag + 1e-6) << n << "x" << rows << "x" << k << " t=" << t << " r=" << r;
        }
        for (int64_t i = 0; i < k; ++i) {
          double d = y0[static_cast<size_t>(t * k + i)], mag = std::fabs(d);
          for (int64_t r = 0; r < rows; ++r) {
            d += double(a[static_cast<size_t>(t * rows + r)]) * w[static_cast<size_t>(r * k + i)];
            mag += std::fabs(double(a[static_cast<size_t>(t * rows + r)]) * w[static_cast<size_t>(r * k + i)]);
          }
          ASSERT_NEAR(acc[static_cast<size_t>(t * k + i)], d, 1e-6 * mag + 1e-6) << n << "x" << rows << "x" << k << " t=" << t << " i=" << i;
        }
      }
      // Each token alone gives its row of the batch bit for bit.
      for (int64_t t = 0; t < n; ++t) {
        std::vector<float> one(static_cast<size_t>(rows)), one_acc(y0.begin() + t * k, y0.begin() + (t + 1) * k);
        compute::gemm_f32_nt(pool, x.data() + t * k, 1, w.data(), rows, k, one.data());
        compute::gemm_f32_nn_acc(pool, a.data() + t * rows, 1, w.data(), rows, k, one_acc.data());
        ASSERT_TRUE(std::equal(one.begin(), one.end(), y.begin() + t * rows)) << "nt, token " << t << " of " << n;
        ASSERT_TRUE(std::equal(one_acc.begin(), one_acc.end(), acc.begin() + t * k)) << "nn, token " << t << " of " << n;
      }
      if (isa == quant::Isa::AVX2) {
        y_ref = y, acc_ref = acc;
        for (int64_t t = 0; t < n; ++t)
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_EQ(y[static_cast<size_t>(t * rows + r)], compute::dot_f32(x.data() + t * k, w.data() + r * k, k)) << "t=" << t << " r=" << r;
      } else if (!y_ref.empty()) {
        EXPECT_EQ(y, y_ref) << "ISA " << int(isa) << " and AVX2 differ (nt) at " << n << "x" << rows << "x" << k;
        EXPECT_EQ(acc, acc_ref) << "ISA " << int(isa) << " and AVX2 differ (nn) at " << n << "x" << rows << "x" << k;
      }
    }
  }
  quant::set_isa(saved);
}

}  // namespace
}  // namespace larql
