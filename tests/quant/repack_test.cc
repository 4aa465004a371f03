// repack_to_q8_0 must be lossless: the Q8_0 row dequantises to exactly the original values
// (checked against the scalar dequantiser of the source format), and dot products agree.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "quant/quant.h"
#include "util/dtype.h"

namespace larql::quant {
namespace {

class RepackTest : public ::testing::TestWithParam<DType> {};

TEST_P(RepackTest, LosslessAndSameDot) {
  const DType t = GetParam();
  constexpr int64_t n = 640;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n), a(n);
  for (auto& v : x) v = nd(rng);
  for (auto& v : a) v = nd(rng);
  std::vector<uint8_t> src(*row_bytes(t, n)), q8(*row_bytes(DType::Q8_0, n)), act(*row_bytes(DType::Q8_0, n));
  quantize_row(t, x.data(), src.data(), n);
  ASSERT_TRUE(repack_to_q8_0(t, src.data(), q8.data(), n));
  std::vector<float> want(n), got(n);
  dequantize_row(t, src.data(), want.data(), n);
  dequantize_row(DType::Q8_0, q8.data(), got.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(want[i], got[i]) << "element " << i;
  quantize_row(DType::Q8_0, a.data(), act.data(), n);
  EXPECT_NEAR(vec_dot_ref(t, n, src.data(), act.data()), vec_dot_ref(DType::Q8_0, n, q8.data(), act.data()), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Formats, RepackTest, ::testing::Values(DType::Q4_0, DType::Q5_0));

TEST(Repack, OtherTypesRefused) {
  std::vector<uint8_t> buf(1024);
  EXPECT_FALSE(repack_to_q8_0(DType::Q4_K, buf.data(), buf.data(), 256));
}

}  // namespace
}  // namespace larql::quant
