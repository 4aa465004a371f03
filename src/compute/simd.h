// f32 vector kernels behind a table chosen once from CPUID (internal to compute/).
#pragma once

#include <cstdint>

namespace larql::compute {

struct SimdKernels {
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  float (*dot)(const float* x, const float* y, int64_t n);
  /// y[i] = exp(x[i] - shift) (Cephes expf polynomial, ~1 ulp; 0 below about -87.3, +inf
  /// above 88). Each y[i] depends on x[i] alone, never on its position (tails run the same
  /// vector code), so batching cannot change a value.
  void (*exp_shifted)(const float* x, float shift, float* y, int64_t n);
  /// out[i] = gelu_tanh(gate[i]) * up[i], gelu_tanh(x) computed as x / (1 + exp(-2u)),
  /// u = sqrt(2/pi) (x + 0.044715 x^3) (the same function: 0.5 (1 + tanh u) = 1 / (1 + e^-2u)).
  /// Position-independent like exp_shifted.
  void (*gelu_tanh_mul)(const float* gate, const float* up, float* out, int64_t n);
  /// out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + exp(-x)) with the same exp.
  /// Position-independent like exp_shifted.
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);
  /// sum x[i]^2 in double (a fixed order for a given n).
  double (*sum_squares)(const float* x, int64_t n);
  /// y[i] = (x[i] * s) * w[i] (two float roundings, as the scalar expression).
  void (*scale_mul)(const float* x, float s, const float* w, float* y, int64_t n);
  /// sum x[i] in double (a fixed order for a given n).
  double (*sum)(const float* x, int64_t n);
  /// max x[i], n >= 1 (exact: any order gives the same value).
  float (*max)(const float* x, int64_t n);
  /// y[i] = x[i] * s.
  void (*scale)(const float* x, float s, float* y, int64_t n);
  /// The index the scalar loop `best = 0; if (x[i] > x[best]) best = i` gives, n >= 1: the first
  /// index of the largest value, NaNs never chosen (unless x[0] is NaN: then 0).
  int64_t (*argmax)(const float* x, int64_t n);
  /// out[r] = dot(x + r * n, y, n) for r < rows, each bit for bit as `dot` (y loaded once).
  void (*dot_rows)(const float* x, int64_t rows, const float* y, int64_t n, float* out);
  /// y + r * n += a[r] * x for r < rows, each as `axpy` (x loaded once).
  void (*axpy_rows)(const float* a, const float* x, float* y, int64_t rows, int64_t n);
  /// y[t * ldy + r] = sum_i x[t * k + i] w[r * k + i] for t < n, r < rows. Each element in
  /// dot_avx2's order (simd.cc's gemm_dot_scalar emulates it), never depending on n, rows or
  /// where it falls in a tile: a token's result does not depend on the other tokens of the batch.
  void (*gemm_nt)(const float* x, int64_t n, const float* w, int64_t rows, int64_t k, float* y, int64_t ldy);
  /// y[t * ldy + i] += sum_o a[t * lda + o] w[o * ldw + i] for t < n, i < cols, the sum over
  /// o = 0..rows-1 in order with one fused multiply-add each (per element, the same chain
  /// whatever n or the tile).
  void (*gemm_nn_acc)(const float* a, int64_t lda, int64_t n, const float* w, int64_t ldw, int64_t rows, int64_t cols, float* y,
                      int64_t ldy);
};

/// AVX-512 versions of SimdKernels' gemm_nt / gemm_nn_acc (gemm_f32_avx512.cc), the same bits
/// per element; compute::gemm_f32_nt / gemm_f32_nn_acc use them when the active ISA is AVX-512.
struct GemmF32Kernels {
  decltype(SimdKernels::gemm_nt) nt;
  decltype(SimdKernels::gemm_nn_acc) nn_acc;
};
const GemmF32Kernels* gemm_f32_avx512();

/// The table for quant::active_isa() (read at each call): AVX2 at AVX2 or above, else scalar.
const SimdKernels& simd_kernels();
const SimdKernels& simd_kernels_scalar();
const SimdKernels* simd_kernels_avx2();  ///< nullptr if not compiled in

}  // namespace larql::compute
