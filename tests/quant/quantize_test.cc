// Quantisers: hand cases for the activation formats (ggml quantize_row_q8_0_ref /
// quantize_row_q8_K_ref rounding rules) and quantise -> dequantise round trips within each
// format's step size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/quant.h"
#include "util/dtype.h"
#include "util/error.h"

namespace larql::quant {
namespace {

std::vector<uint8_t> quant(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> b(*row_bytes(t, x.size()));
  quantize_row(t, x.data(), b.data(), static_cast<int64_t>(x.size()));
  return b;
}

std::vector<float> roundtrip(DType t, const std::vector<float>& x) {
  const auto b = quant(t, x);
  std::vector<float> y(x.size());
  dequantize_row(t, b.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f, float offset = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng) + offset;
  return v;
}

// Q8_0 with absmax 127: d = 1 exactly (f16 0x3C00), q = roundf(x) -- ties away from zero.
TEST(Quantize, Q8_0HandBlock) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;   // -> 3 (roundf, not banker's)
  x[2] = -2.5f;  // -> -3
  x[3] = 3.49f;  // -> 3
  x[4] = -126.6f;  // -> -127
  const auto b = quant(DType::Q8_0, x);
  EXPECT_EQ(b[0], 0x00);
  EXPECT_EQ(b[1], 0x3C);
  const auto* q = reinterpret_cast<const int8_t*>(&b[2]);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], 3);
  EXPECT_EQ(q[2], -3);
  EXPECT_EQ(q[3], 3);
  EXPECT_EQ(q[4], -127);
  EXPECT_EQ(q[5], 0);
}

TEST(Quantize, Q8_0ZeroBlock) {
  const auto b = quant(DType::Q8_0, std::vector<float>(32, 0.0f));
  for (uint8_t v : b) EXPECT_EQ(v, 0);
}

// Q8_K: iscale = -127 / (signed absmax); q = nearest_int (ties to even); d = 1 / iscale;
// bsums[g] = sum of q over elements 16g..16g+15. Layout: f32 d, i8 qs[256], i16 bsums[16].
TEST(Quantize, Q8_KHandBlock) {
  std::vector<float> x(256, 0.0f);
  x[0] = -127.0f;  // signed max negative -> iscale = 1, d = 1
  x[1] = 2.5f;     // -> 2 (ties to even)
  x[2] = 3.5f;     // -> 4
  x[3] = -2.5f;    // -> -2
  x[17] = 100.2f;  // -> 100, group 1
  const auto b = quant(DType::Q8_K, x);
  float d;
  std::memcpy(&d, &b[0], 4);
  EXPECT_EQ(d, 1.0f);
  const auto* q = reinterpret_cast<const int8_t*>(&b[4]);
  EXPECT_EQ(q[0], -127);
  EXPECT_EQ(q[1], 2);
  EXPECT_EQ(q[2], 4);
  EXPECT_EQ(q[3], -2);
  EXPECT_EQ(q[17], 100);
  int16_t bs[16];
  std::memcpy(bs, &b[260], 32);
  EXPECT_EQ(bs[0], -127 + 2 + 4 - 2);
  EXPECT_EQ(bs[1], 100);
  for (int g = 2; g < 16; ++g) EXPECT_EQ(bs[g], 0);

  // Positive signed max: iscale = -1, so d = -1 and the quants flip sign (as in ggml).
  std::vector<float> x2(256, 0.0f);
  x2[5] = 127.0f;
  x2[6] = -10.0f;
  const auto b2 = quant(DType::Q8_K, x2);
  std::memcpy(&d, &b2[0], 4);
  EXPECT_EQ(d, -1.0f);
  EXPECT_EQ(static_cast<int8_t>(b2[4 + 5]), -127);
  EXPECT_EQ(static_cast<int8_t>(b2[4 + 6]), 10);
}

// Q4_0 (ggml ref): d = max / -8 with max the signed absmax; q = min(15, trunc(x/d + 8.5)).
TEST(Quantize, Q4_0HandBlock) {
  std::vector<float> x(32, 0.0f);
  x[0] = -4.0f;  // max = -4 -> d = 0.5 -> q = trunc(-8 + 8.5) = 0
  x[1] = 4.0f;   // 4/0.5 = 8 -> trunc(16.5) = 16 -> clamped 15
  x[16] = 1.0f;  // 2 + 8.5 -> 10 (high nibble of qs[0])
  const auto b = quant(DType::Q4_0, x);
  EXPECT_EQ(b[0] | (b[1] << 8), 0x3800);  // 0.5
  EXPECT_EQ(b[2], 0 | (10 << 4));
  EXPECT_EQ(b[3] & 15, 15);
  EXPECT_EQ(b[4] & 15, 8);  // zero -> 8
}

struct RoundTripCase {
  DType type;
  size_t n;
};

class RoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

// Per-block error bound of each quantiser (derivations in src/quant/quantize_ref.cc):
//   Q8_0: d/2 + f16 rounding of d (d = amax/127)      Q4_0: d = amax/8   Q5_0: d = amax/16
//   Q8_K: |d|/2                                         F16: 2^-11 relative, BF16: 2^-8 relative
//   Q4_K/Q5_K: max sub-block step + max min / 63        Q6_K: the largest group step amax/31
double block_bound(DType t, const float* x, size_t bs) {
  float amax = 0;
  for (size_t i = 0; i < bs; ++i) amax = std::max(amax, std::fabs(x[i]));
  switch (t) {
    case DType::Q8_0: return amax / 127.0 * (0.5 + 1e-3) + amax * 1e-3;
    case DType::Q8_K: return amax / 127.0 * (0.5 + 1e-4);
    case DType::Q4_0: return amax / 8.0 * (1 + 1e-3);
    case DType::Q5_0: return amax / 16.0 * (1 + 1e-3);
    case DType::Q6_K: return amax / 31.0 * (1 + 1e-2);
    case DType::Q4_K:
    case DType::Q5_K: {
      const int nmax = t == DType::Q4_K ? 15 : 31;
      double max_scale = 0, max_min = 0;
      for (size_t j = 0; j < bs / 32; ++j) {
        float lo = x[32 * j], hi = x[32 * j];
        for (int l = 0; l < 32; ++l) {
          lo = std::min(lo, x[32 * j + l]);
          hi = std::max(hi, x[32 * j + l]);
        }
        lo = std::min(lo, 0.0f);
        max_scale = std::max(max_scale, double(hi - lo) / nmax);
        max_min = std::max(max_min, double(-lo));
      }
      return (max_scale + max_min / 63.0) * (1 + 1e-2);
    }
    default: return 0;
  }
}

TEST_P(RoundTrip, WithinStep) {
  const auto [t, n] = GetParam();
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    // seed 3 adds an offset so K-quant mins are exercised with all-positive sub-blocks.
    const auto x = randn(n, seed, seed == 2 ? 0.02f : 1.0f, seed == 3 ? 3.0f : 0.0f);
    const auto y = roundtrip(t, x);
    const size_t bs = dtype_info(t).block_size;
    for (size_t i = 0; i < n; ++i) {
      double bound;
      if (t == DType::F16)  // half an ulp; subnormals below 2^-14 have a fixed step of 2^-24
        bound = std::max(std::fabs(x[i]) * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
      else if (t == DType::BF16) bound = std::fabs(x[i]) * std::ldexp(1.0, -8);
      else if (t == DType::F32) bound = 0;
      else bound = block_bound(t, &x[i / bs * bs], bs);
      ASSERT_LE(std::fabs(double(y[i]) - x[i]), bound)
          << dtype_name(t) << " seed " << seed << " element " << i << " x=" << x[i];
    }
  }
}

// The bound is meaningful: a round trip with the wrong format's decoder is far off.
TEST(Quantize, RoundTripBoundDetectsLayoutError) {
  const auto x = randn(256, 7);
  const auto b = quant(DType::Q4_K, x);
  std::vector<float> y(256);
  dequantize_row(DType::Q4_K, b.data(), y.data(), 256);
  std::vector<float> shuffled(y);
  std::swap_ranges(shuffled.begin(), shuffled.begin() + 32, shuffled.begin() + 32);
  double worst = 0;
  for (int i = 0; i < 256; ++i) worst = std::max(worst, std::fabs(double(shuffled[i]) - x[i]));
  EXPECT_GT(worst, block_bound(DType::Q4_K, x.data(), 256));
}

INSTANTIATE_TEST_SUITE_P(
    Formats, RoundTrip,
    ::testing::Values(RoundTripCase{DType::F32, 512}, RoundTripCase{DType::F16, 512},
                      RoundTripCase{DType::BF16, 512}, RoundTripCase{DType::Q8_0, 640},
                      RoundTripCase{DType::Q4_0, 640}, RoundTripCase{DType::Q5_0, 640},
                      RoundTripCase{DType::Q8_K, 1024}, RoundTripCase{DType::Q4_K, 1024},
                      RoundTripCase{DType::Q5_K, 1024}, RoundTripCase{DType::Q6_K, 1024}),
    [](const auto& info) { return std::string(dtype_name(info.param.type)); });

// The SIMD activation quantisers must produce the scalar reference's bytes exactly: random rows
// at several scales, rows whose scaled values sit exactly on .5 ties (roundf rounds away from
// zero, Q8_K's nearest_int to even), zero rows, and +a / -a both reaching the absmax (the first
// one sets Q8_K's sign).
TEST(Quantize, SimdActivationQuantisersEqualReference) {
  if (detect_isa() < Isa::AVX2) GTEST_SKIP() << "no AVX2";
  std::vector<std::vector<float>> rows;
  std::mt19937 rng(17);
  for (float scale : {1e-3f, 1.0f, 37.0f, 1e4f}) {
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> r(512);
    for (auto& v : r) v = nd(rng);
    rows.push_back(r);
  }
  {  // Q8_0: amax 127 -> id 1, so k + 0.5 stays a tie; Q8_K: max 127 -> iscale -1.
    std::vector<float> r(512);
    for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<float>(static_cast<int>(i % 254) - 127) + 0.5f;
    for (size_t b = 0; b < r.size(); b += 32) r[b] = 127.0f;
    rows.push_back(r);
    for (size_t b = 0; b < r.size(); b += 32) r[b] = -127.0f;
    rows.push_back(r);
  }
  rows.push_back(std::vector<float>(512, 0.0f));
  {
    std::vector<float> r(512, 0.25f);
    r[3] = -2.0f;
    r[7] = 2.0f;  // both reach amax; -2 comes first
    r[300] = 2.0f;
    r[301] = -2.0f;
    rows.push_back(r);
  }
  const Isa saved = active_isa();
  for (DType t : {DType::Q8_0, DType::Q8_K}) {
    for (size_t k = 0; k < rows.size(); ++k) {
      set_isa(Isa::Scalar);
      const auto ref = quant(t, rows[k]);
      set_isa(saved);
      const auto got = quant(t, rows[k]);
      EXPECT_EQ(got, ref) << dtype_name(t) << " row " << k;
    }
  }
}

TEST(Quantize, Errors) {
  float x[64] = {};
  uint8_t out[64];
  try {
    quantize_row(DType::Q4_1, x, out, 32);
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
  }
  try {
    quantize_row(DType::Q8_0, x, out, 31);
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  }
}

}  // namespace
}  // namespace larql::quant
