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

namespace larql::quant {
namespace {

// The 4-row kernel must give, for each activation row, exactly the single-row kernel's float.
TEST(VecDot4, BitIdenticalToSingleRow) {
  const VecDot4Fn dot4 = vec_dot4_fn(DType::Q8_0);
  if (dot4 == nullptr) GTEST_SKIP() << "no 4-row kernel on this CPU/ISA";
  const VecDotFn dot = vec_dot_fn(DType::Q8_0);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int64_t n : {32, 96, 128, 640, 2048}) {
    const size_t rb = *row_bytes(DType::Q8_0, n);
    std::vector<float> x(n);
    std::vector<uint8_t> w(rb), act(4 * rb);
    for (auto& v : x) v = nd(rng);
    quantize_row(DType::Q8_0, x.data(), w.data(), n);
    for (int t = 0; t < 4; ++t) {
      for (auto& v : x) v = nd(rng);
      quantize_row(DType::Q8_0, x.data(), act.data() + t * rb, n);
    }
    const void* a4[4] = {act.data(), act.data() + rb, act.data() + 2 * rb, act.data() + 3 * rb};
    float out[4];
    dot4(n, w.data(), a4, out);
    for (int t = 0; t < 4; ++t) EXPECT_EQ(out[t], dot(n, w.data(), a4[t])) << "n=" << n << " row " << t;
  }
}

}  // namespace
}  // namespace larql::quant
