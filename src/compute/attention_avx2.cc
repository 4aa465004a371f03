// AVX2 attend_chunk (compute/attention.h): the K and V rows are loaded once for all the query
// heads of a group; per head the float operations are exactly those of dot_f32 / axpy (AVX2).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "compute/attention.h"
#include "compute/attention_prefetch.h"
#include "compute/ops.h"

namespace larql::compute::detail {
namespace {

// dot_avx2's final reduction (n a multiple of 16).
inline float reduce(__m256 s0, __m256 s1) {
  s0 = _mm256_add_ps(s0, s1);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

template <int NQ>
void scores_nq(const float* q, int64_t hd, const float* k, const float* v, int64_t m, int64_t stride, float scale,
               float cap, float* scores, int64_t ld) {
  for (int64_t j = 0; j < std::min(m, kAhead); ++j) prefetch_row<3>(k, j, stride, hd);
  for (int64_t j = 0; j < m; ++j) {
    prefetch_key(k, v, stride, hd, j);
    const float* kj = k + j * stride;
    __m256 s0[NQ], s1[NQ];
    for (int h = 0; h < NQ; ++h) s0[h] = s1[h] = _mm256_setzero_ps();
    for (int64_t i = 0; i < hd; i += 16) {
      const __m256 k0 = _mm256_loadu_ps(kj + i), k1 = _mm256_loadu_ps(kj + i + 8);
      for (int h = 0; h < NQ; ++h) {
        s0[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * hd + i), k0, s0[h]);
        s1[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * hd + i + 8), k1, s1[h]);
      }
    }
    for (int h = 0; h < NQ; ++h) {
      float s = reduce(s0[h], s1[h]) * scale;
      if (cap > 0) s = cap * std::tanh(s / cap);
      scores[h * ld + j] = s;
    }
  }
}

// out_h = sum_j p_hj v_j; keys in tiles that stay in L1 while the head_dim is walked 16 at a time.
template <int NQ>
void pv_nq(const float* p, int64_t ld, int64_t m, const float* v, int64_t stride, int64_t hd, float* out) {
  constexpr int64_t kTile = 32;
  for (int64_t j0 = 0; j0 < m; j0 += kTile) {
    const int64_t j1 = std::min(m, j0 + kTile);
    for (int64_t d = 0; d < hd; d += 16) {
      __m256 a0[NQ], a1[NQ];
      for (int h = 0; h < NQ; ++h) {
        a0[h] = j0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(out + h * hd + d);
        a1[h] = j0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(out + h * hd + d + 8);
      }
      for (int64_t j = j0; j < j1; ++j) {
        const __m256 v0 = _mm256_loadu_ps(v + j * stride + d), v1 = _mm256_loadu_ps(v + j * stride + d + 8);
        for (int h = 0; h < NQ; ++h) {
          const __m256 pj = _mm256_broadcast_ss(p + h * ld + j);
          a0[h] = _mm256_fmadd_ps(pj, v0, a0[h]);
          a1[h] = _mm256_fmadd_ps(pj, v1, a1[h]);
        }
      }
      for (int h = 0; h < NQ; ++h) {
        _mm256_storeu_ps(out + h * hd + d, a0[h]);
        _mm256_storeu_ps(out + h * hd + d + 8, a1[h]);
      }
    }
  }
}

#include "compute/attention_chunk.inl"

}  // namespace

void attend_chunk_avx2(const float* q, int64_t n_q, const float* k, const float* v, int64_t m, int64_t stride,
                       int64_t hd, float scale, float cap, float* scores, AttnPartial part) {
  chunk_heads(q, n_q, k, v, m, stride, hd, scale, cap, scores, part);
}

}  // namespace larql::compute::detail
