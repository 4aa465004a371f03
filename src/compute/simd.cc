#include "compute/simd.h"

#include <algorithm>
#include <cmath>

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

// Scalar versions: the same formulas through libm (not bit-identical to the AVX2 ones, but each
// element depends on its input alone).
void exp_shifted_scalar(const float* x, float shift, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float z = x[i] - shift;
    y[i] = z > 88.0f ? INFINITY : std::exp(std::max(-88.0f, z));
  }
}
void gelu_tanh_mul_scalar(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float m2u = -2.0f * 0.7978845608028654f * (x + 0.044715f * x * x * x);
    out[i] = x / (1.0f + (m2u > 88.0f ? INFINITY : std::exp(m2u))) * up[i];
  }
}

void silu_mul_scalar(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float mx = -gate[i];
    out[i] = gate[i] / (1.0f + (mx > 88.0f ? INFINITY : std::exp(mx))) * up[i];
  }
}

double sum_squares_scalar(const float* x, int64_t n) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return ss;
}
void scale_mul_scalar(const float* x, float s, const float* w, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s * w[i];
}

double sum_scalar(const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}
float max_scalar(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  return m;
}
void scale_scalar(const float* x, float s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}
void dot_rows_scalar(const float* x, int64_t rows, const float* y, int64_t n, float* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = dot_scalar(x + r * n, y, n);
}
void axpy_rows_scalar(const float* a, const float* x, float* y, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) axpy_scalar(a[r], x, y + r * n, n);
}
// dot_avx2's order (simd_avx2.cc), emulated: lanes 0-7 sum elements i..i+7 of each whole 16
// with one fma each, lanes 8-15 elements i+8..i+15, a last 8 goes to lanes 0-7; lanes j and j+8
// are added, then pairwise (j + j+4, j + j+2, 0 + 1); the tail is a plain multiply and add.
float gemm_dot_scalar(const float* x, const float* w, int64_t k) {
  float lo[8] = {0, 0, 0, 0, 0, 0, 0, 0}, hi[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 16 <= k; i += 16)
    for (int j = 0; j < 8; ++j) {
      lo[j] = std::fma(x[i + j], w[i + j], lo[j]);
      hi[j] = std::fma(x[i + 8 + j], w[i + 8 + j], hi[j]);
    }
  if (i + 8 <= k) {
    for (int j = 0; j < 8; ++j) lo[j] = std::fma(x[i + j], w[i + j], lo[j]);
    i += 8;
  }
  for (int j = 0; j < 8; ++j) lo[j] += hi[j];
  for (int j = 0; j < 4; ++j) lo[j] += lo[j + 4];
  for (int j = 0; j < 2; ++j) lo[j] += lo[j + 2];
  float s = lo[0] + lo[1];
  for (; i < k; ++i) s += x[i] * w[i];
  return s;
}
void gemm_nt_scalar(const float* x, int64_t n, const float* w, int64_t rows, int64_t k, float* y, int64_t ldy) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) y[t * ldy + r] = gemm_dot_scalar(x + t * k, w + r * k, k);
}
void gemm_nn_acc_scalar(const float* a, int64_t lda, int64_t n, const float* w, int64_t ldw, int64_t rows, int64_t cols, float* y,
                        int64_t ldy) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < cols; ++i) {
      float acc = y[t * ldy + i];
      for (int64_t o = 0; o < rows; ++o) acc = std::fma(a[t * lda + o], w[o * ldw + i], acc);
      y[t * ldy + i] = acc;
    }
}
int64_t argmax_scalar(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

const SimdKernels kScalar{axpy_scalar,        dot_scalar, exp_shifted_scalar, gelu_tanh_mul_scalar, silu_mul_scalar,
                          sum_squares_scalar, scale_mul_scalar, sum_scalar,   max_scalar,
                          scale_scalar,       argmax_scalar,    dot_rows_scalar, axpy_rows_scalar,
                          gemm_nt_scalar,     gemm_nn_acc_scalar};

}  // namespace

const SimdKernels& simd_kernels_scalar() { return kScalar; }

const SimdKernels& simd_kernels() {
  // Read at every call (one relaxed load): the table follows quant::set_isa like every other
  // kernel family, never a choice frozen at the first call.
  static const SimdKernels* const avx2 = simd_kernels_avx2();
  if (avx2 != nullptr && quant::active_isa() >= quant::Isa::AVX2) return *avx2;
  return kScalar;
}

const char* simd_variant() { return &simd_kernels() == &kScalar ? "scalar" : "avx2"; }

}  // namespace larql::compute
