// AVX2 activation quantisers (Q8_0, Q8_K), bit-identical to the scalar references in
// quantize_ref.cc (tested): the same float operations per element, roundf's ties-away-from-zero
// and nearest_int's ties-to-even reproduced exactly.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/kernels.h"
#include "util/half.h"

namespace larql::quant::detail {
namespace {

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// roundf (half away from zero) for |v| < 2^23: trunc, then +-1 where the dropped fraction is
// at least one half (v - trunc(v) is exact).
inline __m256 round_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 half = _mm256_cmp_ps(abs8(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
  return _mm256_add_ps(t, _mm256_and_ps(half, one));
}

// 32 int32 (four vectors, in order) -> 32 int8 (values already in [-128, 127]).
inline __m256i pack32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  const __m256i p = _mm256_packs_epi16(ab, cd);
  // packs interleave 128-bit lanes: dwords come out as a0 b0 c0 d0 a1 b1 c1 d1 (4 bytes each).
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void q8_0_avx2(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
    __m256 v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
    const float amax = hmax8(_mm256_max_ps(_mm256_max_ps(abs8(v[0]), abs8(v[1])), _mm256_max_ps(abs8(v[2]), abs8(v[3]))));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(round_away(_mm256_mul_ps(v[k], vid)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), pack32(q[0], q[1], q[2], q[3]));
  }
}

void q8_k_avx2(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < QK_K; j += 8) m = _mm256_max_ps(m, abs8(_mm256_loadu_ps(x + j)));
    const float amax = hmax8(m);
    if (!amax) {
      y[i].d = 0.0f;
      std::memset(y[i].qs, 0, QK_K);
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    // The reference keeps the first element reaching amax (its sign sets the scale's sign).
    float max = 0.0f;
    for (int j = 0; j < QK_K; ++j)
      if (std::fabs(x[j]) == amax) {
        max = x[j];
        break;
      }
    const float iscale = -127.f / max;
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i cap = _mm256_set1_epi32(127);
    for (int j = 0; j < QK_K; j += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k)  // cvtps rounds to nearest even, as nearest_int does
        q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 8 * k))), cap);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + j), pack32(q[0], q[1], q[2], q[3]));
    }
    // bsums: 16 sums of 16 quants.
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int g = 0; g < QK_K / 16; g += 2) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs + 16 * g));
      // maddubs(1, q): pair sums; madd: quad sums (int32 x 8: 4 per 16-byte group).
      const __m256i s32 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
      alignas(32) int32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s32);
      y[i].bsums[g] = static_cast<int16_t>(lanes[0] + lanes[1] + lanes[2] + lanes[3]);
      y[i].bsums[g + 1] = static_cast<int16_t>(lanes[4] + lanes[5] + lanes[6] + lanes[7]);
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace

QuantFn avx2_quant_fn(DType t) {
  switch (t) {
    case DType::Q8_0: return q8_0_avx2;
    case DType::Q8_K: return q8_k_avx2;
    default: return nullptr;
  }
}

}  // namespace larql::quant::detail
