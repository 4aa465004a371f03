// The real model's weights through the dot kernels: for sampled rows of every tensor, each ISA's
// vec_dot equals the dequantised row . dequantised activation (in double) within kRelTol.
// Dequantisation itself is checked against the `gguf` package in tests/python/test_dequant.py.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "formats/gguf.h"
#include "quant/quant.h"
#include "testlib/paths.h"
#include "util/dtype.h"

namespace larql::quant {
namespace {

constexpr double kRelTol = 1e-5;  // see vec_dot_test.cc

TEST(RealModel, SampledRowsEveryIsaMatchesDequantisedDot) {
  LARQL_REQUIRE_MODEL(path);
  const auto file = GgufFile::open(path);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  int checked = 0;
  for (const auto& t : file->tensors()) {
    if (t.dims.size() != 2) continue;
    const int64_t n = static_cast<int64_t>(t.row_length());
    const size_t rb = *row_bytes(t.type, n);
    std::vector<float> x(n), wd(n), ad(n);
    for (auto& v : x) v = nd(rng);
    const DType at = vec_dot_type(t.type);
    std::vector<uint8_t> act(*row_bytes(at, n));
    quantize_row(at, x.data(), act.data(), n);
    dequantize_row(at, act.data(), ad.data(), n);
    for (uint64_t r : {uint64_t(0), t.n_rows() / 2, t.n_rows() - 1}) {
      const uint8_t* row = t.data + r * rb;
      dequantize_row(t.type, row, wd.data(), n);
      double exact = 0, wmax = 0, asum = 0;
      for (int64_t i = 0; i < n; ++i) {
        exact += double(wd[i]) * ad[i];
        wmax = std::max(wmax, std::fabs(double(wd[i])));
        asum += std::fabs(double(ad[i]));
      }
      const double tol = kRelTol * 2 * wmax * asum;
      for (Isa isa : {Isa::Scalar, Isa::AVX2, Isa::AVX512}) {
        if (static_cast<int>(isa) > static_cast<int>(detect_isa())) continue;
        EXPECT_NEAR(vec_dot_fn(t.type, isa)(n, row, act.data()), exact, tol)
            << t.name << " row " << r << " " << isa_name(isa);
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace larql::quant
