// AVX2+FMA f32 kernels; only called when CPUID reports AVX2 (see simd.cc).
#include <immintrin.h>

#include <cmath>

#include "compute/simd.h"

namespace larql::compute {
namespace {

void axpy_avx2(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

float dot_avx2(const float* x, const float* y, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), s0);
  s0 = _mm256_add_ps(s0, s1);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  float s = _mm_cvtss_f32(h);
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

// Up to 4 rows of x against one y: per row the accumulators, steps and reduction of dot_avx2,
// so each result is dot_avx2's bits; y's loads are shared.
template <int R>
void dot_rows_n(const float* x, const float* y, int64_t n, float* out) {
  __m256 s0[R], s1[R];
  for (int r = 0; r < R; ++r) s0[r] = s1[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 y0 = _mm256_loadu_ps(y + i), y1 = _mm256_loadu_ps(y + i + 8);
    for (int r = 0; r < R; ++r) {
      s0[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * n + i), y0, s0[r]);
      s1[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * n + i + 8), y1, s1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    int64_t j = i;
    __m256 a = s0[r];
    for (; j + 8 <= n; j += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * n + j), _mm256_loadu_ps(y + j), a);
    a = _mm256_add_ps(a, s1[r]);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    float s = _mm_cvtss_f32(h);
    for (; j < n; ++j) s += x[r * n + j] * y[j];
    out[r] = s;
  }
}
void dot_rows_avx2(const float* x, int64_t rows, const float* y, int64_t n, float* out) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) dot_rows_n<4>(x + r * n, y, n, out + r);
  for (; r < rows; ++r) out[r] = dot_avx2(x + r * n, y, n);
}
// Per row exactly axpy_avx2 (one fma per element, the scalar tail the same); x's loads shared.
void axpy_rows_avx2(const float* a, const float* x, float* y, int64_t rows, int64_t n) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const __m256 a0 = _mm256_set1_ps(a[r]), a1 = _mm256_set1_ps(a[r + 1]), a2 = _mm256_set1_ps(a[r + 2]),
                 a3 = _mm256_set1_ps(a[r + 3]);
    float *y0 = y + r * n, *y1 = y0 + n, *y2 = y1 + n, *y3 = y2 + n;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      _mm256_storeu_ps(y0 + i, _mm256_fmadd_ps(a0, v, _mm256_loadu_ps(y0 + i)));
      _mm256_storeu_ps(y1 + i, _mm256_fmadd_ps(a1, v, _mm256_loadu_ps(y1 + i)));
      _mm256_storeu_ps(y2 + i, _mm256_fmadd_ps(a2, v, _mm256_loadu_ps(y2 + i)));
      _mm256_storeu_ps(y3 + i, _mm256_fmadd_ps(a3, v, _mm256_loadu_ps(y3 + i)));
    }
    for (; i < n; ++i) {
      y0[i] += a[r] * x[i];
      y1[i] += a[r + 1] * x[i];
      y2[i] += a[r + 2] * x[i];
      y3[i] += a[r + 3] * x[i];
    }
  }
  for (; r < rows; ++r) axpy_avx2(a[r], x, y + r * n, n);
}

// gemm_nt: tiles of R rows of w by T tokens of x, per pair dot_avx2's two 8-lane accumulators
// (elements i..i+7 and i+8..i+15 of each 16, then a last 8 into the first), its reduction and its
// scalar tail: each element is dot_avx2's bits, whatever tile it falls in.
template <int R, int T>
void gemm_nt_tile(const float* x, const float* w, int64_t k, float* y, int64_t ldy) {
  __m256 lo[R][T], hi[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) lo[r][t] = hi[r][t] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(w + r * k + i);
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + t * k + i);
      for (int r = 0; r < R; ++r) lo[r][t] = _mm256_fmadd_ps(xv, wv[r], lo[r][t]);
    }
    for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(w + r * k + i + 8);
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + t * k + i + 8);
      for (int r = 0; r < R; ++r) hi[r][t] = _mm256_fmadd_ps(xv, wv[r], hi[r][t]);
    }
  }
  const bool eight = i + 8 <= k;
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) {
      __m256 a = lo[r][t];
      if (eight) a = _mm256_fmadd_ps(_mm256_loadu_ps(x + t * k + i), _mm256_loadu_ps(w + r * k + i), a);
      a = _mm256_add_ps(a, hi[r][t]);
      __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
      h = _mm_add_ps(h, _mm_movehl_ps(h, h));
      h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
      float sum = _mm_cvtss_f32(h);
      for (int64_t j = i + (eight ? 8 : 0); j < k; ++j) sum += x[t * k + j] * w[r * k + j];
      y[t * ldy + r] = sum;
    }
}
template <int R>
void gemm_nt_rows(const float* x, int64_t n, const float* w, int64_t k, float* y, int64_t ldy) {
  int64_t t = 0;
  for (; t + 2 <= n; t += 2) gemm_nt_tile<R, 2>(x + t * k, w, k, y + t * ldy, ldy);
  for (; t < n; ++t) gemm_nt_tile<R, 1>(x + t * k, w, k, y + t * ldy, ldy);
}
void gemm_nt_avx2(const float* x, int64_t n, const float* w, int64_t rows, int64_t k, float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + 3 <= rows; r += 3) gemm_nt_rows<3>(x, n, w + r * k, k, y + r, ldy);
  for (; r < rows; ++r) gemm_nt_rows<1>(x, n, w + r * k, k, y + r, ldy);
}
// gemm_nn_acc: tiles of T tokens by 16 columns (T 2 x 8-lane accumulators), o in order.
template <int T>
void gemm_nn_tile16(const float* a, int64_t lda, const float* w, int64_t ldw, int64_t rows, float* y, int64_t ldy) {
  __m256 acc[T][2];
  for (int t = 0; t < T; ++t) {
    acc[t][0] = _mm256_loadu_ps(y + t * ldy);
    acc[t][1] = _mm256_loadu_ps(y + t * ldy + 8);
  }
  for (int64_t o = 0; o < rows; ++o) {
    const __m256 w0 = _mm256_loadu_ps(w + o * ldw), w1 = _mm256_loadu_ps(w + o * ldw + 8);
    for (int t = 0; t < T; ++t) {
      const __m256 av = _mm256_broadcast_ss(a + t * lda + o);
      acc[t][0] = _mm256_fmadd_ps(av, w0, acc[t][0]);
      acc[t][1] = _mm256_fmadd_ps(av, w1, acc[t][1]);
    }
  }
  for (int t = 0; t < T; ++t) {
    _mm256_storeu_ps(y + t * ldy, acc[t][0]);
    _mm256_storeu_ps(y + t * ldy + 8, acc[t][1]);
  }
}
template <int T>
void gemm_nn_cols(const float* a, int64_t lda, const float* w, int64_t ldw, int64_t rows, int64_t cols, float* y, int64_t ldy) {
  int64_t i = 0;
  for (; i + 16 <= cols; i += 16) gemm_nn_tile16<T>(a, lda, w + i, ldw, rows, y + i, ldy);
  for (int t = 0; t < T; ++t)
    for (int64_t j = i; j < cols; ++j) {
      float acc = y[t * ldy + j];
      for (int64_t o = 0; o < rows; ++o) acc = std::fma(a[t * lda + o], w[o * ldw + j], acc);
      y[t * ldy + j] = acc;
    }
}
void gemm_nn_acc_avx2(const float* a, int64_t lda, int64_t n, const float* w, int64_t ldw, int64_t rows, int64_t cols, float* y,
                      int64_t ldy) {
  int64_t t = 0;
  for (; t + 6 <= n; t += 6) gemm_nn_cols<6>(a + t * lda, lda, w, ldw, rows, cols, y + t * ldy, ldy);
  for (; t < n; ++t) gemm_nn_cols<1>(a + t * lda, lda, w, ldw, rows, cols, y + t * ldy, ldy);
}

// Cephes expf (S. L. Moshier, cephes/single/expf.c): exp(x) = 2^n exp(r), n = round(x log2 e),
// r = x - n ln 2 with ln 2 in two parts, exp(r) by a degree-7 polynomial. ~1 ulp on the range.
// Results: 0 below about -87.3 (no denormals), +inf above 88.
inline __m256 exp256(__m256 x_in) {
  const __m256 hi = _mm256_set1_ps(88.0f);
  const __m256 x = _mm256_min_ps(_mm256_max_ps(x_in, _mm256_set1_ps(-88.0f)), hi);
  const __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_blendv_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), _mm256_set1_ps(INFINITY),
                          _mm256_cmp_ps(x_in, hi, _CMP_GT_OQ));
}

// Runs f on 8 lanes at a time; the tail goes through an 8-lane buffer so that every element
// sees exactly the same instructions wherever it sits.
template <typename F>
inline void map8(int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) f(i, 8);
  if (i < n) f(i, static_cast<int>(n - i));
}
inline __m256 load_part(const float* p, int k) {
  if (k == 8) return _mm256_loadu_ps(p);
  alignas(32) float b[8] = {};
  for (int j = 0; j < k; ++j) b[j] = p[j];
  return _mm256_load_ps(b);
}
inline void store_part(float* p, __m256 v, int k) {
  if (k == 8) return _mm256_storeu_ps(p, v);
  alignas(32) float b[8];
  _mm256_store_ps(b, v);
  for (int j = 0; j < k; ++j) p[j] = b[j];
}

void exp_shifted_avx2(const float* x, float shift, float* y, int64_t n) {
  const __m256 s = _mm256_set1_ps(shift);
  map8(n, [&](int64_t i, int k) { store_part(y + i, exp256(_mm256_sub_ps(load_part(x + i, k), s)), k); });
}

void gelu_tanh_mul_avx2(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 c = _mm256_set1_ps(-2.0f * 0.7978845608028654f), a = _mm256_set1_ps(0.044715f);
  const __m256 one = _mm256_set1_ps(1.0f);
  map8(n, [&](int64_t i, int k) {
    const __m256 x = load_part(gate + i, k);
    // -2u = -2 sqrt(2/pi) (x + 0.044715 x^3)
    const __m256 m2u = _mm256_mul_ps(c, _mm256_fmadd_ps(_mm256_mul_ps(a, x), _mm256_mul_ps(x, x), x));
    const __m256 g = _mm256_div_ps(x, _mm256_add_ps(one, exp256(m2u)));
    store_part(out + i, _mm256_mul_ps(g, load_part(up + i, k)), k);
  });
}

void silu_mul_avx2(const float* gate, const float* up, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  map8(n, [&](int64_t i, int k) {
    const __m256 x = load_part(gate + i, k);
    const __m256 g = _mm256_div_ps(x, _mm256_add_ps(one, exp256(_mm256_xor_ps(x, sign))));
    store_part(out + i, _mm256_mul_ps(g, load_part(up + i, k)), k);
  });
}

// Four double accumulators of 4 lanes over 16 floats, then a fixed pairwise sum; scalar tail.
double sum_squares_avx2(const float* x, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd(), a2 = _mm256_setzero_pd(), a3 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256d x0 = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), x1 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    const __m256d x2 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 8)), x3 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 12));
    a0 = _mm256_fmadd_pd(x0, x0, a0);
    a1 = _mm256_fmadd_pd(x1, x1, a1);
    a2 = _mm256_fmadd_pd(x2, x2, a2);
    a3 = _mm256_fmadd_pd(x3, x3, a3);
  }
  const __m256d a = _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3));
  __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  double s = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  for (; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

void scale_mul_avx2(const float* x, float s, const float* w, float* y, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
  for (; i < n; ++i) y[i] = x[i] * s * w[i];
}

// Two double accumulators of 4 lanes over 8 floats, then a fixed pairwise sum; scalar tail.
double sum_avx2(const float* x, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm_loadu_ps(x + i)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)));
  }
  const __m256d a = _mm256_add_pd(a0, a1);
  __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  double s = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  for (; i < n; ++i) s += x[i];
  return s;
}

float max_avx2(const float* x, int64_t n) {
  float m = x[0];
  int64_t i = 0;
  if (n >= 8) {
    __m256 v = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) v = _mm256_max_ps(v, _mm256_loadu_ps(x + i));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    m = _mm_cvtss_f32(h);
  }
  for (; i < n; ++i) m = m < x[i] ? x[i] : m;
  return m;
}

void scale_avx2(const float* x, float s, float* y, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
  for (; i < n; ++i) y[i] = x[i] * s;
}

// Two passes: the largest value (NaNs skipped: max_ps returns its second operand, the running
// maximum, when the new value is NaN), then the first index holding it (a NaN never compares
// equal). The same index as the scalar loop, ±0 included (both passes treat them as equal and
// the scalar loop keeps the first). Decode's greedy step over a 262,144-entry vocabulary.
int64_t argmax_avx2(const float* x, int64_t n) {
  if (n < 16 || x[0] != x[0]) {  // short, or x[0] is NaN (the scalar loop then never moves)
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (x[i] > x[best]) best = i;
    return best;
  }
  __m256 m0 = _mm256_set1_ps(x[0]), m1 = m0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
  }
  __m256 v = _mm256_max_ps(m0, m1);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  float m = _mm_cvtss_f32(h);
  for (int64_t j = i; j < n; ++j) m = x[j] > m ? x[j] : m;
  const __m256 vm = _mm256_set1_ps(m);
  for (i = 0; i + 8 <= n; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
    if (mask != 0) return i + __builtin_ctz(static_cast<unsigned>(mask));
  }
  for (; i < n; ++i)
    if (x[i] == m) return i;
  return 0;  // not reached: m is one of the values
}

const SimdKernels kAvx2{axpy_avx2,        dot_avx2,       exp_shifted_avx2, gelu_tanh_mul_avx2, silu_mul_avx2,
                        sum_squares_avx2, scale_mul_avx2, sum_avx2,         max_avx2,
                        scale_avx2,       argmax_avx2,    dot_rows_avx2, axpy_rows_avx2,
                        gemm_nt_avx2,     gemm_nn_acc_avx2};

}  // namespace

const SimdKernels* simd_kernels_avx2() { return &kAvx2; }

}  // namespace larql::compute
