// AVX-512 gemm_nt / gemm_nn_acc for compute::gemm_f32_nt / gemm_f32_nn_acc (ops.h), called only
// when the active ISA is AVX-512. The same float operations per element as the AVX2 table's
// (simd_avx2.cc): a zmm accumulator's lanes 0-7 are dot_avx2's first 8-lane accumulator and lanes
// 8-15 its second (as attention_avx512.cc), reduced in its order; gemm_nn_acc's per-element fma
// chain over o does not depend on the vector width. So every table gives the same bits.
// GCC 12 flags the self-initialised _mm512_undefined_* inside its own intrinsics headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "compute/simd.h"

namespace larql::compute {
namespace {

template <int R, int T>
void nt_tile(const float* x, const float* w, int64_t k, float* y, int64_t ldy) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_ps(w + r * k + i);
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_loadu_ps(x + t * k + i);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(xv, wv[r], acc[r][t]);
    }
  }
  const bool eight = i + 8 <= k;
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) {
      __m256 a = _mm512_castps512_ps256(acc[r][t]);
      if (eight) a = _mm256_fmadd_ps(_mm256_loadu_ps(x + t * k + i), _mm256_loadu_ps(w + r * k + i), a);
      a = _mm256_add_ps(a, _mm512_extractf32x8_ps(acc[r][t], 1));
      __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
      h = _mm_add_ps(h, _mm_movehl_ps(h, h));
      h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
      float sum = _mm_cvtss_f32(h);
      for (int64_t j = i + (eight ? 8 : 0); j < k; ++j) sum += x[t * k + j] * w[r * k + j];
      y[t * ldy + r] = sum;
    }
}
template <int R>
void nt_rows(const float* x, int64_t n, const float* w, int64_t k, float* y, int64_t ldy) {
  int64_t t = 0;
  for (; t + 6 <= n; t += 6) nt_tile<R, 6>(x + t * k, w, k, y + t * ldy, ldy);
  for (; t < n; ++t) nt_tile<R, 1>(x + t * k, w, k, y + t * ldy, ldy);
}
void gemm_nt_avx512(const float* x, int64_t n, const float* w, int64_t rows, int64_t k, float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) nt_rows<4>(x, n, w + r * k, k, y + r, ldy);
  for (; r < rows; ++r) nt_rows<1>(x, n, w + r * k, k, y + r, ldy);
}

// T tokens by 32 columns (two zmm each), o in order.
template <int T>
void nn_tile32(const float* a, int64_t lda, const float* w, int64_t ldw, int64_t rows, float* y, int64_t ldy) {
  __m512 acc[T][2];
  for (int t = 0; t < T; ++t) {
    acc[t][0] = _mm512_loadu_ps(y + t * ldy);
    acc[t][1] = _mm512_loadu_ps(y + t * ldy + 16);
  }
  for (int64_t o = 0; o < rows; ++o) {
    const __m512 w0 = _mm512_loadu_ps(w + o * ldw), w1 = _mm512_loadu_ps(w + o * ldw + 16);
    for (int t = 0; t < T; ++t) {
      const __m512 av = _mm512_set1_ps(a[t * lda + o]);
      acc[t][0] = _mm512_fmadd_ps(av, w0, acc[t][0]);
      acc[t][1] = _mm512_fmadd_ps(av, w1, acc[t][1]);
    }
  }
  for (int t = 0; t < T; ++t) {
    _mm512_storeu_ps(y + t * ldy, acc[t][0]);
    _mm512_storeu_ps(y + t * ldy + 16, acc[t][1]);
  }
}
template <int T>
void nn_cols(const float* a, int64_t lda, const float* w, int64_t ldw, int64_t rows, int64_t cols, float* y, int64_t ldy) {
  int64_t i = 0;
  for (; i + 32 <= cols; i += 32) nn_tile32<T>(a, lda, w + i, ldw, rows, y + i, ldy);
  for (int t = 0; t < T; ++t)
    for (int64_t j = i; j < cols; ++j) {
      float acc = y[t * ldy + j];
      for (int64_t o = 0; o < rows; ++o) acc = std::fma(a[t * lda + o], w[o * ldw + j], acc);
      y[t * ldy + j] = acc;
    }
}
void gemm_nn_acc_avx512(const float* a, int64_t lda, int64_t n, const float* w, int64_t ldw, int64_t rows, int64_t cols, float* y,
                        int64_t ldy) {
  int64_t t = 0;
  for (; t + 12 <= n; t += 12) nn_cols<12>(a + t * lda, lda, w, ldw, rows, cols, y + t * ldy, ldy);
  for (; t < n; ++t) nn_cols<1>(a + t * lda, lda, w, ldw, rows, cols, y + t * ldy, ldy);
}

const GemmF32Kernels kAvx512{gemm_nt_avx512, gemm_nn_acc_avx512};

}  // namespace

const GemmF32Kernels* gemm_f32_avx512() { return &kAvx512; }

}  // namespace larql::compute
