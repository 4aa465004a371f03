// vec_dot: (1) against the dequantised weight . dequantised activation in double, (2) every SIMD
// kernel against the scalar reference on random blocks, (3) dispatch and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/quant.h"
#include "util/dtype.h"
#include "util/error.h"
#include "util/half.h"

namespace larql::quant {
namespace {

// Float-summation bound for a dot whose exact value is an integer combination of block sums:
// |got - exact| <= kRelTol * sum_i (2 max|w|) |a_i|. The factor 2 covers K-quant rows where
// d*sc*q and dmin*m are each up to max|w| and cancel. eps(f32) * (#blocks summed) is ~3e-6 here.
constexpr double kRelTol = 1e-5;

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// Random bytes with every f16 scale field replaced by a sane value, so all quant bit patterns
// (including int8 -128 and negative Q6_K scales) are exercised without NaN/inf scales.
std::vector<uint8_t> random_blocks(DType t, int64_t n, uint32_t seed) {
  const auto& info = dtype_info(t);
  std::vector<uint8_t> b(*row_bytes(t, n));
  std::mt19937 rng(seed);
  for (auto& v : b) v = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> ud(-0.05f, 0.05f);
  auto put = [&](size_t off) {
    const uint16_t h = f32_to_f16(ud(rng));
    std::memcpy(&b[off], &h, 2);
  };
  const size_t nb = b.size() / info.type_size;
  for (size_t i = 0; i < nb; ++i) {
    const size_t o = i * info.type_size;
    switch (t) {
      case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: put(o); break;
      case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: put(o); put(o + 2); break;
      case DType::Q6_K: put(o + 208); break;
      default: break;
    }
  }
  if (t == DType::F16 || t == DType::BF16) {
    const auto x = randn(n, seed);
    quantize_row(t, x.data(), b.data(), n);
  } else if (t == DType::F32) {
    const auto x = randn(n, seed);
    std::memcpy(b.data(), x.data(), b.size());
  }
  return b;
}

struct Act {
  std::vector<uint8_t> bytes;  // in vec_dot_type(w)
  std::vector<float> deq;      // its dequantised values
};

Act make_act(DType w, int64_t n, uint32_t seed) {
  const auto x = randn(n, seed + 1000);
  const DType at = vec_dot_type(w);
  Act a;
  a.bytes.resize(*row_bytes(at, n));
  quantize_row(at, x.data(), a.bytes.data(), n);
  a.deq.resize(n);
  dequantize_row(at, a.bytes.data(), a.deq.data(), n);
  return a;
}

struct Expect {
  double exact;  // dequantised weight . dequantised activation, in double
  double tol;
};

Expect expected(DType w, int64_t n, const std::vector<uint8_t>& wb, const Act& a) {
  std::vector<float> wd(n);
  dequantize_row(w, wb.data(), wd.data(), n);
  double s = 0, wmax = 0, asum = 0;
  for (int64_t i = 0; i < n; ++i) {
    s += double(wd[i]) * a.deq[i];
    wmax = std::max(wmax, std::fabs(double(wd[i])));
    asum += std::fabs(double(a.deq[i]));
  }
  return {s, kRelTol * 2 * wmax * asum + 1e-30};
}

struct DotCase {
  DType type;
  int64_t n;
};

class VecDot : public ::testing::TestWithParam<DotCase> {};

TEST_P(VecDot, ScalarMatchesDequantisedDot) {
  const auto [t, n] = GetParam();
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    const auto wb = random_blocks(t, n, seed);
    const auto a = make_act(t, n, seed);
    const auto e = expected(t, n, wb, a);
    EXPECT_NEAR(vec_dot_ref(t, n, wb.data(), a.bytes.data()), e.exact, e.tol) << "seed " << seed;
  }
}

TEST_P(VecDot, EveryIsaMatchesScalar) {
  const auto [t, n] = GetParam();
  for (Isa isa : {Isa::AVX2, Isa::AVX512}) {
    if (static_cast<int>(isa) > static_cast<int>(detect_isa())) {
      std::printf("note: %s kernels not checked: not selected by detect_isa() on this CPU\n", isa_name(isa));
      continue;
    }
    const VecDotFn f = vec_dot_fn(t, isa);
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      const auto wb = random_blocks(t, n, seed);
      const auto a = make_act(t, n, seed);
      const auto e = expected(t, n, wb, a);
      const double ref = vec_dot_ref(t, n, wb.data(), a.bytes.data());
      const double got = f(n, wb.data(), a.bytes.data());
      EXPECT_NEAR(got, ref, e.tol) << isa_name(isa) << " seed " << seed;
      EXPECT_NEAR(got, e.exact, e.tol) << isa_name(isa) << " seed " << seed;
    }
  }
}

// A real-valued case: quantised random weights and activations give a dot close to the f32 dot
// (sanity that the quantisation noise, not a layout error, is all that separates them).
TEST_P(VecDot, CloseToFloatDot) {
  const auto [t, n] = GetParam();
  if (t == DType::Q4_1 || t == DType::Q5_1) GTEST_SKIP() << "no quantiser for this type";
  const auto w = randn(n, 11), x = randn(n, 12);
  std::vector<uint8_t> wb(*row_bytes(t, n));
  quantize_row(t, w.data(), wb.data(), n);
  const DType at = vec_dot_type(t);
  std::vector<uint8_t> ab(*row_bytes(at, n));
  quantize_row(at, x.data(), ab.data(), n);
  double exact = 0;
  for (int64_t i = 0; i < n; ++i) exact += double(w[i]) * x[i];
  // Noise: sum of n products of independent errors; 4-bit formats have step ~ amax/8 ~ 0.4.
  const double tol = 0.25 * std::sqrt(double(n)) * (t == DType::Q4_0 || t == DType::Q4_K ? 1.0 : 0.5);
  EXPECT_NEAR(vec_dot(t, n, wb.data(), ab.data()), exact, tol);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, VecDot,
    ::testing::Values(DotCase{DType::F32, 1000}, DotCase{DType::F16, 1000}, DotCase{DType::BF16, 1000},
                      DotCase{DType::Q4_0, 640}, DotCase{DType::Q4_1, 640}, DotCase{DType::Q5_0, 640},
                      DotCase{DType::Q5_1, 640}, DotCase{DType::Q8_0, 640}, DotCase{DType::Q8_0, 32},
                      DotCase{DType::Q8_0, 224}, DotCase{DType::Q5_0, 96}, DotCase{DType::Q4_0, 160},
                      DotCase{DType::Q5_0, 2048}, DotCase{DType::Q4_K, 1024},
                      DotCase{DType::Q5_K, 2048}, DotCase{DType::Q6_K, 2048}, DotCase{DType::Q6_K, 256}),
    [](const auto& info) {
      return std::string(dtype_name(info.param.type)) + "_" + std::to_string(info.param.n);
    });

// Hand case: Q8_0 weight q = 1..32 with d = 0.5, activation q = 2 with d = 0.25:
// dot = sum_j (0.5 j)(0.25 * 2) = 0.25 * 528 = 132.
TEST(VecDotHand, Q8_0) {
  uint8_t w[34], a[34];
  const uint16_t dw = 0x3800, da = 0x3400;
  std::memcpy(w, &dw, 2);
  std::memcpy(a, &da, 2);
  for (int j = 0; j < 32; ++j) {
    w[2 + j] = static_cast<uint8_t>(j + 1);
    a[2 + j] = 2;
  }
  EXPECT_EQ(vec_dot_ref(DType::Q8_0, 32, w, a), 132.0f);
  EXPECT_EQ(vec_dot(DType::Q8_0, 32, w, a), 132.0f);
}

TEST(VecDotDispatch, TypesAndIsa) {
  EXPECT_EQ(vec_dot_type(DType::Q4_0), DType::Q8_0);
  EXPECT_EQ(vec_dot_type(DType::Q5_0), DType::Q8_0);
  EXPECT_EQ(vec_dot_type(DType::Q8_0), DType::Q8_0);
  EXPECT_EQ(vec_dot_type(DType::Q4_K), DType::Q8_K);
  EXPECT_EQ(vec_dot_type(DType::Q5_K), DType::Q8_K);
  EXPECT_EQ(vec_dot_type(DType::Q6_K), DType::Q8_K);
  EXPECT_EQ(vec_dot_type(DType::Q4_1), DType::F32);
  EXPECT_EQ(vec_dot_type(DType::F16), DType::F32);
  const Isa before = active_isa();
  set_isa(Isa::AVX512);
  EXPECT_LE(static_cast<int>(active_isa()), static_cast<int>(detect_isa()));
  set_isa(Isa::Scalar);
  EXPECT_EQ(active_isa(), Isa::Scalar);
  EXPECT_EQ(vec_dot_fn(DType::Q8_0), vec_dot_fn(DType::Q8_0, Isa::Scalar));
  set_isa(before);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    EXPECT_GE(static_cast<int>(detect_isa()), static_cast<int>(Isa::AVX2));
  }
}

TEST(VecDotDispatch, Errors) {
  uint8_t buf[512] = {};
  try {
    vec_dot(DType::Q4_0, 33, buf, buf);
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  }
  try {
    vec_dot(DType::Q2_K, 256, buf, buf);
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("Q2_K"), std::string::npos) << e.what();
  }
  // An id outside every table must not alias slot 0 (F32).
  EXPECT_THROW(vec_dot_fn(static_cast<DType>(1000)), Error);
  EXPECT_THROW(vec_dot_fn(static_cast<DType>(20)), Error);
}

}  // namespace
}  // namespace larql::quant
