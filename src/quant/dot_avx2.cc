// AVX2 + FMA + F16C vec_dot kernels (compiled with -mavx2 -mfma -mf16c -mbmi2; only called
// after quant.cc's CPUID check). The integer pipelines follow ggml-cpu/arch/x86/quants.c:
// u8 x s8 pairs through _mm256_maddubs_epi16, pairs to int32 through _mm256_madd_epi16, then one
// float FMA per block with the product of the two block scales. Integer block sums are exact, so
// results differ from the scalar reference only by float summation order.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/kernels.h"

namespace larql::quant::detail {
namespace {

inline float f16(uint16_t h) { return _cvtsh_ss(h); }

inline float hsum_float_8(__m256 x) {
  __m128 res = _mm256_extractf128_ps(x, 1);
  res = _mm_add_ps(res, _mm256_castps256_ps128(x));
  res = _mm_add_ps(res, _mm_movehl_ps(res, res));
  res = _mm_add_ss(res, _mm_movehdup_ps(res));
  return _mm_cvtss_f32(res);
}

// 16 packed bytes -> 32 bytes: low nibbles in bytes 0..15, high nibbles in bytes 16..31.
// Broadcast-load + blend instead of ggml's insert keeps it off the shuffle port.
inline __m256i bytes_from_nibbles_32(const uint8_t* rsi) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rsi)));
  return _mm256_and_si256(_mm256_blend_epi32(v, _mm256_srli_epi16(v, 4), 0xF0), _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, 0xFF where the bit is set.
inline __m256i bytes_from_bits_32(const uint8_t* x) {
  uint32_t x32;
  std::memcpy(&x32, x, sizeof(uint32_t));
  const __m256i shuf_mask = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                              0x0101010101010101, 0x0000000000000000);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x32)), shuf_mask);
  const __m256i bit_mask = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe);
  bytes = _mm256_or_si256(bytes, bit_mask);
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

// Signed int8 x int8 dot of 32 lanes into 8 int32 partial sums (abs/sign trick: maddubs needs
// one unsigned operand). x = -128 is fine (|x| = 128 as u8); y must be in [-127, 127], which the
// Q8_0/Q8_K activation quantisers guarantee.
inline __m256i mul_sum_i8_pairs(__m256i x, __m256i y) {
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
  const __m256i dot = _mm256_maddubs_epi16(ax, sy);
  return _mm256_madd_epi16(_mm256_set1_epi16(1), dot);
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Sum of 8 int32 lanes (exact, wrapping like the scalar int sums).
inline int32_t hsum_i32_8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}
inline int32_t hsum_i32_4(__m128i s) {
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

// ---- float weights x f32 activations -------------------------------------------------------

float dot_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
  float s = hsum_float_8(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

// 8 f16 -> 8 f32.
inline __m256 load_f16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// 8 bf16 -> 8 f32 (bf16 is the upper half of an f32).
inline __m256 load_bf16x8(const uint8_t* p) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

template <bool kBf16>
float dot_half(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const float*>(a);
  auto load = [](const uint8_t* p) { return kBf16 ? load_bf16x8(p) : load_f16x8(p); };
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(load(x + 2 * i), _mm256_loadu_ps(y + i), acc0);
    acc1 = _mm256_fmadd_ps(load(x + 2 * (i + 8)), _mm256_loadu_ps(y + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(load(x + 2 * (i + 16)), _mm256_loadu_ps(y + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(load(x + 2 * (i + 24)), _mm256_loadu_ps(y + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load(x + 2 * i), _mm256_loadu_ps(y + i), acc0);
  float s = hsum_float_8(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, x + 2 * i, 2);
    float v;
    if (kBf16) {
      const uint32_t u = static_cast<uint32_t>(h) << 16;
      std::memcpy(&v, &u, 4);
    } else {
      v = f16(h);
    }
    s += v * y[i];
  }
  return s;
}

// ---- 32-element blocks x Q8_0 --------------------------------------------------------------

// Per-block int32 partial sums (8 lanes) of weight block . activation block. Q4_0/Q5_0 use the
// unsigned form: q in [0, 15] / [0, 31] times y through maddubs directly, minus offset * y (also
// through maddubs), which needs no sign fix-ups; int16 pair sums stay below 2*31*127 + 2*16*127.
inline __m256i block_dot_q4_0(const BlockQ4_0& b, __m256i y) {
  const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(bytes_from_nibbles_32(b.qs), y),
                                     _mm256_maddubs_epi16(_mm256_set1_epi8(8), y));
  return _mm256_madd_epi16(_mm256_set1_epi16(1), p);
}
inline __m256i block_dot_q5_0(const BlockQ5_0& b, __m256i y) {
  const __m256i q = _mm256_or_si256(bytes_from_nibbles_32(b.qs),
                                    _mm256_and_si256(bytes_from_bits_32(b.qh), _mm256_set1_epi8(16)));
  const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, y),
                                     _mm256_maddubs_epi16(_mm256_set1_epi8(16), y));
  return _mm256_madd_epi16(_mm256_set1_epi16(1), p);
}
inline __m256i block_dot_q8_0(const BlockQ8_0& b, __m256i y) { return mul_sum_i8_pairs(load256(b.qs), y); }

// Four f16 scales -> 4 floats; packed in a general register so only one vector move is needed.
inline __m128 f16x4(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
  const uint64_t v = uint64_t(a) | uint64_t(b) << 16 | uint64_t(c) << 32 | uint64_t(d) << 48;
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(v)));
}

// Four blocks per iteration: their 8-lane int32 partial sums are reduced to 4 block sums with
// three hadds and the 4 scale products are converted together, so the float work is one 4-wide
// FMA per 4 blocks. Float order (shared with the tiled kernels of quant/gemm.h, which must match
// it bit for bit): block b goes to accumulator b mod 4 as fma(d_x * d_y, float(isum_b), acc);
// the result is (acc0 + acc2) + (acc1 + acc3). (With the unsigned Q4_0/Q5_0 forms and the nibble broadcast this measured
// +23% (Q8_0), +25% (Q5_0), +33% (Q4_0) over ggml's one-FMA-per-block structure on an EPYC.)
template <typename Block, __m256i (*BlockDot)(const Block&, __m256i)>
float dot_q_x_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const int64_t nb = n / QK8_0;
  __m128 acc4 = _mm_setzero_ps();
  int64_t ib = 0;
  for (; ib + 3 < nb; ib += 4) {
    const __m128 dx = f16x4(x[ib].d, x[ib + 1].d, x[ib + 2].d, x[ib + 3].d);
    const __m128 dy = f16x4(y[ib].d, y[ib + 1].d, y[ib + 2].d, y[ib + 3].d);
    const __m256i s0 = BlockDot(x[ib], load256(y[ib].qs));
    const __m256i s1 = BlockDot(x[ib + 1], load256(y[ib + 1].qs));
    const __m256i s2 = BlockDot(x[ib + 2], load256(y[ib + 2].qs));
    const __m256i s3 = BlockDot(x[ib + 3], load256(y[ib + 3].qs));
    // Lane k of each 128-bit half of t: half of block k's sum; adding the halves completes it.
    const __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(s0, s1), _mm256_hadd_epi32(s2, s3));
    const __m128i sums = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    acc4 = _mm_fmadd_ps(_mm_mul_ps(dx, dy), _mm_cvtepi32_ps(sums), acc4);
  }
  if (ib < nb) {
    // Blocks left over (nb not a multiple of 4): block ib + k still goes to accumulator k.
    alignas(16) float lanes[4];
    _mm_store_ps(lanes, acc4);
    for (int k = 0; ib + k < nb; ++k)
      lanes[k] = std::fma(f16(x[ib + k].d) * f16(y[ib + k].d),
                          static_cast<float>(hsum_i32_8(BlockDot(x[ib + k], load256(y[ib + k].qs)))), lanes[k]);
    acc4 = _mm_load_ps(lanes);
  }
  acc4 = _mm_add_ps(acc4, _mm_movehl_ps(acc4, acc4));
  acc4 = _mm_add_ss(acc4, _mm_movehdup_ps(acc4));
  return _mm_cvtss_f32(acc4);
}

// ---- K-quants x Q8_K -----------------------------------------------------------------------

// Rearranges the 12 packed scale bytes into 8 scales (bytes 0..7) then 8 mins (bytes 8..15).
// Source: ggml-cpu quants.c (kmask1..3 / utmp shuffle).
inline __m256i k4_mins_and_scales(const uint8_t* scales) {
  constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
  uint32_t utmp[4];
  std::memcpy(utmp, scales, 12);
  utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
  const uint32_t uaux = utmp[1] & kmask1;
  utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
  utmp[2] = uaux;
  utmp[0] &= kmask1;
  return _mm256_cvtepu8_epi16(_mm_set_epi32(static_cast<int>(utmp[3]), static_cast<int>(utmp[2]),
                                            static_cast<int>(utmp[1]), static_cast<int>(utmp[0])));
}

// sum_j m_j * (bsums[2j] + bsums[2j+1]) as 4 int32 partial sums.
inline __m128i k4_min_products(__m256i mins_and_scales, const int16_t* bsums) {
  const __m256i q8sums = load256(bsums);
  const __m128i q8s = _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0),
                                     _mm256_extracti128_si256(q8sums, 1));
  return _mm_madd_epi16(_mm256_extracti128_si256(mins_and_scales, 1), q8s);
}

// int16 scale k (of 8) broadcast to all 16 lanes; `scales` holds the 8 scales in both halves.
inline __m256i broadcast_scale16(__m256i scales, int k) {
  return _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>(((2 * k + 1) << 8) | (2 * k))));
}

// K-quant float order: the scalar reference's (dot_ref.cc), per super-block
// sumf += d * float(sumi) - dmin * float(summ), with exact integer sumi/summ; so these kernels,
// the tiled kernels of quant/gemm.h and the reference agree bit for bit.
float dot_q4_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4K*>(w);
  const auto* y = static_cast<const BlockQ8K*>(a);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = y[i].d * f16(x[i].d);
    const float dmin = y[i].d * f16(x[i].dmin);
    const __m256i mins_and_scales = k4_mins_and_scales(x[i].scales);
    const int32_t summ = hsum_i32_4(k4_min_products(mins_and_scales, y[i].bsums));
    const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
    const __m256i scales = _mm256_set_m128i(sc128, sc128);
    const uint8_t* q4 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < QK_K / 64; ++j) {
      const __m256i scale_l = broadcast_scale16(scales, 2 * j + 0);
      const __m256i scale_h = broadcast_scale16(scales, 2 * j + 1);
      const __m256i q4bits = load256(q4);
      q4 += 32;
      const __m256i q4l = _mm256_and_si256(q4bits, m4);
      const __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
      const __m256i q8l = load256(q8);
      q8 += 32;
      const __m256i q8h = load256(q8);
      q8 += 32;
      const __m256i p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q4l, q8l));
      const __m256i p16h = _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q4h, q8h));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16l, p16h));
    }
    sumf += d * static_cast<float>(hsum_i32_8(sumi)) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

float dot_q5_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5K*>(w);
  const auto* y = static_cast<const BlockQ8K*>(a);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i mone = _mm256_set1_epi8(1);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = y[i].d * f16(x[i].d);
    const float dmin = y[i].d * f16(x[i].dmin);
    const __m256i mins_and_scales = k4_mins_and_scales(x[i].scales);
    const int32_t summ = hsum_i32_4(k4_min_products(mins_and_scales, y[i].bsums));
    const __m128i sc128 = _mm256_extracti128_si256(mins_and_scales, 0);
    const __m256i scales = _mm256_set_m128i(sc128, sc128);
    const __m256i hbits = load256(x[i].qh);
    const uint8_t* q5 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    __m256i sumi = _mm256_setzero_si256();
    __m256i hmask = mone;
    for (int j = 0; j < QK_K / 64; ++j) {
      const __m256i scale_0 = broadcast_scale16(scales, 2 * j + 0);
      const __m256i scale_1 = broadcast_scale16(scales, 2 * j + 1);
      const __m256i q5bits = load256(q5);
      q5 += 32;
      // 5th bit: (qh & hmask) != 0 -> 16, via compare instead of a variable shift.
      const __m256i h0 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, hmask), hmask),
                                          _mm256_set1_epi8(16));
      hmask = _mm256_slli_epi16(hmask, 1);
      const __m256i h1 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, hmask), hmask),
                                          _mm256_set1_epi8(16));
      hmask = _mm256_slli_epi16(hmask, 1);
      const __m256i q5_0 = _mm256_add_epi8(_mm256_and_si256(q5bits, m4), h0);
      const __m256i q5_1 = _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(q5bits, 4), m4), h1);
      const __m256i q8_0 = load256(q8);
      q8 += 32;
      const __m256i q8_1 = load256(q8);
      q8 += 32;
      const __m256i p16_0 = _mm256_madd_epi16(scale_0, _mm256_maddubs_epi16(q5_0, q8_0));
      const __m256i p16_1 = _mm256_madd_epi16(scale_1, _mm256_maddubs_epi16(q5_1, q8_1));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16_0, p16_1));
    }
    sumf += d * static_cast<float>(hsum_i32_8(sumi)) - dmin * static_cast<float>(summ);
  }
  return sumf;
}

// 16 bytes: scale 2k repeated 8 times, then scale 2k+1 repeated 8 times.
inline __m128i q6_scale_shuffle(int k) {
  const char a = static_cast<char>(2 * k), b = static_cast<char>(2 * k + 1);
  return _mm_set_epi8(b, b, b, b, b, b, b, b, a, a, a, a, a, a, a, a);
}

float dot_q6_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6K*>(w);
  const auto* y = static_cast<const BlockQ8K*>(a);
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const __m256i m2 = _mm256_set1_epi8(3);
  const __m256i m32s = _mm256_set1_epi8(32);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = f16(x[i].d) * y[i].d;
    const uint8_t* q4 = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* q8 = y[i].qs;
    const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales));
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0, is = 0; j < QK_K / 128; ++j, is += 4) {
      const __m256i q4bits1 = load256(q4);
      const __m256i q4bits2 = load256(q4 + 32);
      q4 += 64;
      const __m256i q4bitsH = load256(qh);
      qh += 32;
      const __m256i q4h_0 = _mm256_slli_epi16(_mm256_and_si256(q4bitsH, m2), 4);
      const __m256i q4h_1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 2), m2), 4);
      const __m256i q4h_2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 4), m2), 4);
      const __m256i q4h_3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 6), m2), 4);
      const __m256i q6[4] = {
          _mm256_or_si256(_mm256_and_si256(q4bits1, m4), q4h_0),
          _mm256_or_si256(_mm256_and_si256(q4bits2, m4), q4h_1),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits1, 4), m4), q4h_2),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits2, 4), m4), q4h_3),
      };
      for (int k = 0; k < 4; ++k) {
        const __m256i q8k = load256(q8 + 32 * k);
        // (q6 - 32) . q8 = q6 . q8 - 32 * sum(q8): maddubs needs the unsigned operand first.
        const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(q6[k], q8k),
                                             _mm256_maddubs_epi16(m32s, q8k));
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, q6_scale_shuffle(is + k)));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc, p16));
      }
      q8 += 128;
    }
    sumf += d * static_cast<float>(hsum_i32_8(sumi));
  }
  return sumf;
}

DotTable make_table() {
  DotTable t;
  auto set = [&](DType d, VecDotFn f) { t.dot[static_cast<int>(d)] = f; };
  set(DType::F32, dot_f32);
  set(DType::F16, dot_half<false>);
  set(DType::BF16, dot_half<true>);
  set(DType::Q4_0, dot_q_x_q8_0<BlockQ4_0, block_dot_q4_0>);
  set(DType::Q5_0, dot_q_x_q8_0<BlockQ5_0, block_dot_q5_0>);
  set(DType::Q8_0, dot_q_x_q8_0<BlockQ8_0, block_dot_q8_0>);
  set(DType::Q4_K, dot_q4_k);
  set(DType::Q5_K, dot_q5_k);
  set(DType::Q6_K, dot_q6_k);
  return t;
}

}  // namespace

const DotTable& avx2_dot_table() {
  static const DotTable t = make_table();
  return t;
}

}  // namespace larql::quant::detail
