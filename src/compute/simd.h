// f32 vector kernels behind a table chosen once from CPUID (internal to compute/).
#pragma once

#include <cstdint>

namespace larql::compute {

struct SimdKernels {
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  float (*dot)(const float* x, const float* y, int64_t n);
};

const SimdKernels& simd_kernels();
const SimdKernels& simd_kernels_scalar();
const SimdKernels* simd_kernels_avx2();  ///< nullptr if not compiled in

}  // namespace larql::compute
