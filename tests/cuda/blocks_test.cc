// The CUDA backend's weight layouts, checked on the CPU (no GPU needed): every type's repacked
// row, decoded unit by unit with the very functions the kernels use (cuda/blocks.h), equals GGML's
// dequantisation of the original blocks (quant::dequantize_row, itself checked against ggml).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cuda/blocks.h"
#include "quant/quant.h"
#include "util/dtype.h"
#include "util/half.h"

namespace larql::cuda {
namespace {

template <DType T>
void check_type(int64_t cols, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> src(static_cast<size_t>(cols));
  for (auto& v : src) v = nd(rng) * 0.05f;
  src[3] = 0.9f;  // an outlier, so K-quant scales differ between sub-blocks
  std::vector<uint8_t> gguf(*row_bytes(T, static_cast<uint64_t>(cols)));
  if (T == DType::F32) {
    std::memcpy(gguf.data(), src.data(), gguf.size());
  } else if (T == DType::F16) {
    for (int64_t i = 0; i < cols; ++i) {
      const uint16_t h = f32_to_f16(src[static_cast<size_t>(i)]);
      std::memcpy(gguf.data() + i * 2, &h, 2);
    }
  } else if (T == DType::BF16) {
    for (int64_t i = 0; i < cols; ++i) {
      const uint16_t h = f32_to_bf16(src[static_cast<size_t>(i)]);
      std::memcpy(gguf.data() + i * 2, &h, 2);
    }
  } else {
    quant::quantize_row(T, src.data(), gguf.data(), cols);
  }
  std::vector<float> want(static_cast<size_t>(cols));
  quant::dequantize_row(T, gguf.data(), want.data(), cols);

  const size_t bytes = device_row_bytes(T, cols);
  ASSERT_EQ(bytes % 16, 0u) << dtype_name(T);
  std::vector<uint8_t> dev(bytes + 16, 0xAB);  // a guard after the row
  repack_row(T, gguf.data(), cols, dev.data());
  for (size_t i = bytes; i < dev.size(); ++i) ASSERT_EQ(dev[i], 0xAB) << "repack wrote past the row";
  alignas(16) std::vector<float> got(static_cast<size_t>(cols));
  for (int64_t u = 0; u < cols / kUnit; ++u) decode_unit<T>(dev.data(), cols, u, got.data() + u * kUnit);
  for (int64_t i = 0; i < cols; ++i)
    ASSERT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)])
        << dtype_name(T) << " value " << i << " of " << cols;
  // The GEMV's eighths of a unit: the same values.
  for (int64_t u = 0; u < cols / kUnit; ++u)
    for (int p = 0; p < 4; ++p) {
      float w8[8];
      decode8<T>(dev.data(), cols, u, p, w8);
      for (int i = 0; i < 8; ++i)
        ASSERT_EQ(w8[i], want[static_cast<size_t>(u * kUnit + p * 8 + i)])
            << dtype_name(T) << " unit " << u << " eighth " << p << " value " << i;
    }
}

TEST(CudaBlocks, EveryTypeDecodesAsGgml) {
  for (int64_t cols : {256, 640, 2560}) {
    check_type<DType::F32>(cols, 1);
    check_type<DType::F16>(cols, 2);
    check_type<DType::BF16>(cols, 3);
    check_type<DType::Q8_0>(cols, 4);
    check_type<DType::Q5_0>(cols, 5);
  }
  for (int64_t cols : {256, 2560, 10240}) {
    check_type<DType::Q4_K>(cols, 6);
    check_type<DType::Q6_K>(cols, 7);
  }
}

TEST(CudaBlocks, HalfConversionIsExact) {
  // Every f16 bit pattern converts as util/half.h does (the CPU's conversion).
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = half_to_float(static_cast<uint16_t>(h)), b = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << h;
    } else {
      EXPECT_EQ(a, b) << h;
    }
  }
}

TEST(CudaBlocks, SupportedTypes) {
  EXPECT_TRUE(device_supports(DType::Q4_K));
  EXPECT_TRUE(device_supports(DType::Q6_K));
  EXPECT_FALSE(device_supports(DType::Q5_K));
  EXPECT_FALSE(device_supports(DType::Q4_0));
}

}  // namespace
}  // namespace larql::cuda
