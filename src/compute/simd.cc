#include "compute/simd.h"

#include "quant/quant.h"

namespace larql::compute {
namespace {

void axpy_scalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
float dot_scalar(const float* x, const float* y, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

const SimdKernels kScalar{axpy_scalar, dot_scalar};

}  // namespace

const SimdKernels& simd_kernels_scalar() { return kScalar; }

const SimdKernels& simd_kernels() {
  static const SimdKernels* k = [] {
    const SimdKernels* avx2 = simd_kernels_avx2();
    if (avx2 != nullptr && quant::active_isa() >= quant::Isa::AVX2) return avx2;
    return &kScalar;
  }();
  return *k;
}

}  // namespace larql::compute
