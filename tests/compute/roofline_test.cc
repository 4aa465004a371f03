// compute/roofline: the probes run and report sane, positive numbers (timings are recorded in
// docs/BENCHMARKS.md, never asserted here).
#include <gtest/gtest.h>

#include <cmath>

#include "compute/roofline.h"
#include "quant/quant.h"

namespace larql {
namespace {

TEST(Roofline, ProbesReportPositiveFiniteRates) {
  ThreadPool pool(2);
  const double bw = compute::read_bandwidth(pool, size_t{8} << 20, 1);
  EXPECT_GT(bw, 0.0);
  EXPECT_TRUE(std::isfinite(bw));
  const compute::Int8Peak p = compute::int8_peak(pool, 0.01);
  if (quant::detect_isa() >= quant::Isa::AVX2) {
    EXPECT_GT(p.ops_per_s, 0.0);
    EXPECT_TRUE(p.isa == "avx2" || p.isa == "avx-vnni" || p.isa == "avx512-vnni") << p.isa;
  } else {
    EXPECT_EQ(p.isa, "scalar");
  }
}

}  // namespace
}  // namespace larql
