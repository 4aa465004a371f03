// AVX-512 attend_chunk (compute/attention.h): 4 heads x 4 keys of q.k per pass with one zmm
// accumulator per pair (lanes 0-7 are dot_f32's first 8-lane accumulator, lanes 8-15 its second,
// reduced in its order), and e.v for 4 heads x 64 dimensions per pass: per head the float
// operations are exactly those of dot_f32 / axpy (AVX2), so results equal the AVX2 kernel's.
// GCC 12 flags the self-initialised _mm512_undefined_* inside its own intrinsics headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "compute/attention.h"
#include "compute/attention_prefetch.h"
#include "compute/ops.h"

namespace larql::compute::detail {
namespace {

// dot_avx2's reduction of its two 8-lane accumulators (here the two halves of one zmm).
inline float reduce(__m512 acc) {
  const __m256 s0 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

template <int NQ, int NK>
inline void scores_tile(const float* q, int64_t hd, const float* k, int64_t stride, float scale, float cap,
                        float* scores, int64_t ld, int64_t j0) {
  __m512 acc[NQ][NK];
  for (int h = 0; h < NQ; ++h)
    for (int j = 0; j < NK; ++j) acc[h][j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < hd; i += 16) {
    __m512 kv[NK];
    for (int j = 0; j < NK; ++j) kv[j] = _mm512_loadu_ps(k + (j0 + j) * stride + i);
    for (int h = 0; h < NQ; ++h) {
      const __m512 qv = _mm512_loadu_ps(q + h * hd + i);
      for (int j = 0; j < NK; ++j) acc[h][j] = _mm512_fmadd_ps(qv, kv[j], acc[h][j]);
    }
  }
  for (int h = 0; h < NQ; ++h)
    for (int j = 0; j < NK; ++j) {
      float s = reduce(acc[h][j]) * scale;
      if (cap > 0) s = cap * std::tanh(s / cap);
      scores[h * ld + j0 + j] = s;
    }
}

template <int NQ>
void scores_nq(const float* q, int64_t hd, const float* k, const float* v, int64_t m, int64_t stride, float scale,
               float cap, float* scores, int64_t ld) {
  for (int64_t j = 0; j < std::min(m, kAhead); ++j) prefetch_row<3>(k, j, stride, hd);
  int64_t j = 0;
  for (; j + 4 <= m; j += 4) {
    for (int64_t r = j; r < j + 4; ++r) prefetch_key(k, v, stride, hd, r);
    scores_tile<NQ, 4>(q, hd, k, stride, scale, cap, scores, ld, j);
  }
  for (; j < m; ++j) {
    prefetch_key(k, v, stride, hd, j);
    scores_tile<NQ, 1>(q, hd, k, stride, scale, cap, scores, ld, j);
  }
}

// out_h = sum_j p_hj v_j over a 32-key tile at a time, head_dim walked NC * 16 at a time.
template <int NQ, int NC>
inline void pv_chunk(const float* p, int64_t ld, int64_t j0, int64_t j1, const float* v, int64_t stride, int64_t hd,
                     int64_t d, float* out) {
  __m512 acc[NQ][NC];
  for (int h = 0; h < NQ; ++h)
    for (int c = 0; c < NC; ++c)
      acc[h][c] = j0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(out + h * hd + d + 16 * c);
  for (int64_t j = j0; j < j1; ++j) {
    __m512 vv[NC];
    for (int c = 0; c < NC; ++c) vv[c] = _mm512_loadu_ps(v + j * stride + d + 16 * c);
    for (int h = 0; h < NQ; ++h) {
      const __m512 pj = _mm512_set1_ps(p[h * ld + j]);
      for (int c = 0; c < NC; ++c) acc[h][c] = _mm512_fmadd_ps(pj, vv[c], acc[h][c]);
    }
  }
  for (int h = 0; h < NQ; ++h)
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(out + h * hd + d + 16 * c, acc[h][c]);
}

template <int NQ>
void pv_nq(const float* p, int64_t ld, int64_t m, const float* v, int64_t stride, int64_t hd, float* out) {
  constexpr int64_t kTile = 32;
  for (int64_t j0 = 0; j0 < m; j0 += kTile) {
    const int64_t j1 = std::min(m, j0 + kTile);
    int64_t d = 0;
    for (; d + 64 <= hd; d += 64) pv_chunk<NQ, 4>(p, ld, j0, j1, v, stride, hd, d, out);
    for (; d < hd; d += 16) pv_chunk<NQ, 1>(p, ld, j0, j1, v, stride, hd, d, out);
  }
}

#include "compute/attention_chunk.inl"

}  // namespace

void attend_chunk_avx512(const float* q, int64_t n_q, const float* k, const float* v, int64_t m, int64_t stride,
                         int64_t hd, float scale, float cap, float* scores, AttnPartial part) {
  chunk_heads(q, n_q, k, v, m, stride, hd, scale, cap, scores, part);
}

}  // namespace larql::compute::detail
