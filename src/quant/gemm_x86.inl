// The tiled kernels of quant/gemm.h, written once and compiled per ISA: gemm_avx2.cc (maddubs +
// madd), gemm_avxvnni.cc and gemm_avx512vnni.cc (256-bit dpbusd, VEX or EVEX encoded). The
// including file defines LARQL_GEMM_VNNI (0/1), LARQL_GEMM_DPBUSD(acc, u8, s8) when VNNI, and
// LARQL_GEMV_ENTRY and (optionally) LARQL_GEMM_ENTRY: the exported functions' names; VNNI files
// also define LARQL_GEMM_DPWSSD(acc, a, b) (int16 pairs multiply-add into acc, for the K-quant gemv).
//
// Everything but the entry point lives in an anonymous namespace: the same templates compiled
// with different target flags must never be merged by the linker.
//
// Panel layout (kGemmRows = 8 rows): for each group of 4 consecutive elements c of a block, one
// 32-byte vector q[c] = [row0 e4c..e4c+3, row1 e4c..e4c+3, ..., row7 ...]. A 4-byte broadcast of
// the activation's elements 4c..4c+3 times q[c] gives, after the pair sums, one int32 lane per
// row. Weights are stored as unsigned bytes (Q4_0: q in [0, 15], Q5_0: [0, 31], Q8_0 under VNNI:
// w + 128; the offset is removed exactly with the activation block sums) except Q8_0 under AVX2,
// which keeps signed bytes and uses the sign trick of the row kernel.
//
// int16 bounds (AVX2 maddubs, activations in [-127, 127]): a pair sum is at most 2*31*127 = 7874
// for Q5_0 (4 chunks summed: 31496), 2*15*127 = 3810 for Q4_K (8 chunks: 30480), 2*63*127 =
// 16002 for Q6_K (2 chunks: 32004), all below 32767.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/blocks.h"
#include "quant/gemm.h"

#ifndef LARQL_GEMV_ROWS  // weight rows per decode micro-kernel call
#define LARQL_GEMV_ROWS 4
#endif
#ifndef LARQL_GEMV_PREFETCH_GROUPS  // row groups ahead that the decode kernels prefetch (0: none)
#define LARQL_GEMV_PREFETCH_GROUPS 1
#endif

#ifndef LARQL_GEMM_DPBUSD  // AVX2: never called (every use sits behind `if constexpr (kVnni)`)
#define LARQL_GEMM_DPBUSD(acc, u, s) (acc)
#endif

namespace larql::quant::detail {
namespace {

constexpr bool kVnni = LARQL_GEMM_VNNI != 0;
constexpr int kNt = 4;  // activation rows per micro-kernel call

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline void store256(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
inline __m256i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
inline float f16(uint16_t h) { return _cvtsh_ss(h); }

// 32-bit lane c of in[r] -> lane r of in[c].
inline void transpose8x8(__m256i v[8]) {
  const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
  const __m256i t4 = _mm256_unpacklo_epi32(v[4], v[5]), t5 = _mm256_unpackhi_epi32(v[4], v[5]);
  const __m256i t6 = _mm256_unpacklo_epi32(v[6], v[7]), t7 = _mm256_unpackhi_epi32(v[6], v[7]);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
  const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
  const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
  v[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
  v[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
  v[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
  v[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
  v[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
  v[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
  v[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
  v[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

// 16 packed bytes -> 32 bytes: low nibbles (elements 0..15), then high nibbles (16..31).
inline __m256i nibbles_32(const uint8_t* p) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_blend_epi32(v, _mm256_srli_epi16(v, 4), 0xF0), _mm256_set1_epi8(0x0F));
}
// 32 bits -> 32 bytes, 0xFF where the bit is set.
inline __m256i bits_32(const uint8_t* x) {
  uint32_t x32;
  std::memcpy(&x32, x, sizeof(uint32_t));
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  const __m256i bytes = _mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x32)), shuf),
                                        _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

// ---- 32-element blocks (Q4_0, Q5_0, Q8_0) ---------------------------------------------------

struct PanelB32 {
  uint8_t q[8][32];
  float d[8];
};

// Unsigned bytes of one block and the offset that was added to make them unsigned.
inline __m256i bytes_of(const BlockQ4_0& b) { return nibbles_32(b.qs); }
inline __m256i bytes_of(const BlockQ5_0& b) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  // The 5th bits as a byte mask: one masked add instead of bits_32's broadcast, shuffle and compare.
  uint32_t qh;
  std::memcpy(&qh, b.qh, sizeof(qh));
  const __m256i lo = nibbles_32(b.qs);
  return _mm256_mask_add_epi8(lo, static_cast<__mmask32>(qh), lo, _mm256_set1_epi8(16));
#else
  return _mm256_or_si256(nibbles_32(b.qs), _mm256_and_si256(bits_32(b.qh), _mm256_set1_epi8(16)));
#endif
}
inline __m256i bytes_of(const BlockQ8_0& b) {
  const __m256i q = load256(b.qs);
  return kVnni ? _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80))) : q;
}
template <typename Block> constexpr int offset_of();
template <> constexpr int offset_of<BlockQ4_0>() { return 8; }
template <> constexpr int offset_of<BlockQ5_0>() { return 16; }
template <> constexpr int offset_of<BlockQ8_0>() { return kVnni ? 128 : 0; }

template <typename Block>
void pack_b32(const uint8_t* const rows[8], int64_t nb, PanelB32* out) {
  for (int64_t b = 0; b < nb; ++b) {
    __m256i v[8];
    for (int r = 0; r < 8; ++r) {
      const Block& blk = reinterpret_cast<const Block*>(rows[r])[b];
      v[r] = bytes_of(blk);
      out[b].d[r] = f16(blk.d);
    }
    transpose8x8(v);
    for (int c = 0; c < 8; ++c) store256(out[b].q[c], v[c]);
  }
}

// NT activation rows from t0 against one panel. kSigned: Q8_0 weights as signed bytes (AVX2).
template <int NT, bool kSigned>
void mk_b32(const PanelB32* P, int64_t nb, const GemmActs& a, int64_t t0, int off, float* out[NT]) {
  const uint8_t* ar[NT];
  const float* ad[NT];
  const int32_t* as[NT];
  for (int t = 0; t < NT; ++t) {
    ar[t] = a.rows + static_cast<size_t>(t0 + t) * a.row_bytes + 2;  // + 2: skip d, at qs
    ad[t] = a.scale + (t0 + t) * nb;
    as[t] = a.sum + (t0 + t) * nb;
  }
  __m256 acc[NT][4];
  for (int t = 0; t < NT; ++t)
    for (int k = 0; k < 4; ++k) acc[t][k] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  auto block = [&](int64_t b, int k) __attribute__((always_inline)) {
    const PanelB32& p = P[b];
    const size_t ab = static_cast<size_t>(b) * sizeof(BlockQ8_0);
    __m256i s[NT];
    if constexpr (kVnni) {
      for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
      for (int c = 0; c < 8; ++c) {
        const __m256i w = load256(p.q[c]);
        for (int t = 0; t < NT; ++t) s[t] = LARQL_GEMM_DPBUSD(s[t], w, bcast32(ar[t] + ab + 4 * c));
      }
    } else if constexpr (!kSigned) {
      for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        __m256i s16[NT];
        for (int t = 0; t < NT; ++t) s16[t] = _mm256_setzero_si256();
        for (int c = 4 * h; c < 4 * h + 4; ++c) {
          const __m256i w = load256(p.q[c]);
          for (int t = 0; t < NT; ++t)
            s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(w, bcast32(ar[t] + ab + 4 * c)));
        }
        for (int t = 0; t < NT; ++t) s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(s16[t], ones));
      }
    } else {
      for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
      for (int c = 0; c < 8; ++c) {
        const __m256i w = load256(p.q[c]);
        const __m256i aw = _mm256_sign_epi8(w, w);
        for (int t = 0; t < NT; ++t) {
          const __m256i prod = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast32(ar[t] + ab + 4 * c), w));
          s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(prod, ones));
        }
      }
    }
    const __m256 dw = _mm256_loadu_ps(p.d);
    for (int t = 0; t < NT; ++t) {
      __m256i is = s[t];
      if (off != 0) is = _mm256_sub_epi32(is, _mm256_set1_epi32(off * as[t][b]));
      acc[t][k] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(ad[t][b])), _mm256_cvtepi32_ps(is), acc[t][k]);
    }
  };
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    block(b, 0);
    block(b + 1, 1);
    block(b + 2, 2);
    block(b + 3, 3);
  }
  if (b < nb) block(b, 0);
  if (b + 1 < nb) block(b + 1, 1);
  if (b + 2 < nb) block(b + 2, 2);
  for (int t = 0; t < NT; ++t)
    _mm256_storeu_ps(out[t], _mm256_add_ps(_mm256_add_ps(acc[t][0], acc[t][2]), _mm256_add_ps(acc[t][1], acc[t][3])));
}

// ---- Q4_K ------------------------------------------------------------------------------------

// One super-block of 8 rows. sc: per sub-block j, AVX2: the scale as an int16 pair (sc, sc) per
// row (for madd); VNNI: the scale as int32 per row (for mullo). mins[p]: int16 pairs
// (m_2p, m_2p+1) per row. d, dmin: the f16 super-block scales as f32.
struct PanelQ4K {
  uint8_t q[8][8][32];
  int32_t sc[8][8];
  int16_t mins[4][16];
  float d[8], dmin[8];
};

inline int32_t scale_lane(int s) {
  return kVnni ? s : static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(s)) * 0x10001u);
}

[[maybe_unused]] void pack_q4k(const uint8_t* const rows[8], int64_t nsb, PanelQ4K* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < nsb; ++i) {
    PanelQ4K& p = out[i];
    for (int j = 0; j < 8; ++j) {
      __m256i v[8];
      for (int r = 0; r < 8; ++r) {
        const __m256i bits = load256(reinterpret_cast<const BlockQ4K*>(rows[r])[i].qs + 32 * (j / 2));
        v[r] = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(bits, 4) : bits, m4);
      }
      transpose8x8(v);
      for (int c = 0; c < 8; ++c) store256(p.q[j][c], v[c]);
    }
    for (int r = 0; r < 8; ++r) {
      const BlockQ4K& blk = reinterpret_cast<const BlockQ4K*>(rows[r])[i];
      uint8_t sc[8], m[8];
      for (int j = 0; j < 8; ++j) get_scale_min_k4(j, blk.scales, &sc[j], &m[j]);
      for (int j = 0; j < 8; ++j) p.sc[j][r] = scale_lane(sc[j]);
      for (int q = 0; q < 4; ++q) {
        p.mins[q][2 * r] = m[2 * q];
        p.mins[q][2 * r + 1] = m[2 * q + 1];
      }
      p.d[r] = f16(blk.d);
      p.dmin[r] = f16(blk.dmin);
    }
  }
}

template <int NT>
void mk_q4k(const PanelQ4K* P, int64_t nsb, const GemmActs& a, int64_t t0, float* out[NT]) {
  const BlockQ8K* ay[NT];
  for (int t = 0; t < NT; ++t)
    ay[t] = reinterpret_cast<const BlockQ8K*>(a.rows + static_cast<size_t>(t0 + t) * a.row_bytes);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nsb; ++i) {
    const PanelQ4K& p = P[i];
    __m256i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      __m256i s[NT];
      for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
      for (int c = 0; c < 8; ++c) {
        const __m256i w = load256(p.q[j][c]);
        for (int t = 0; t < NT; ++t) {
          const __m256i x = bcast32(ay[t][i].qs + 32 * j + 4 * c);
          if constexpr (kVnni) {
            s[t] = LARQL_GEMM_DPBUSD(s[t], w, x);
          } else {
            s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(w, x));
          }
        }
      }
      const __m256i sc = load256(p.sc[j]);
      for (int t = 0; t < NT; ++t)
        sumi[t] = _mm256_add_epi32(sumi[t], kVnni ? _mm256_mullo_epi32(s[t], sc) : _mm256_madd_epi16(s[t], sc));
    }
    const __m256 d = _mm256_loadu_ps(p.d), dmin = _mm256_loadu_ps(p.dmin);
    const __m256i m0 = load256(p.mins[0]), m1 = load256(p.mins[1]);
    const __m256i m2 = load256(p.mins[2]), m3 = load256(p.mins[3]);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8K& y = ay[t][i];
      // bs[j] = bsums[2j] + bsums[2j+1]: the activation sum over sub-block j.
      const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums)),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums + 8)));
      __m256i summ = _mm256_madd_epi16(m0, _mm256_set1_epi32(_mm_extract_epi32(bs, 0)));
      summ = _mm256_add_epi32(summ, _mm256_madd_epi16(m1, _mm256_set1_epi32(_mm_extract_epi32(bs, 1))));
      summ = _mm256_add_epi32(summ, _mm256_madd_epi16(m2, _mm256_set1_epi32(_mm_extract_epi32(bs, 2))));
      summ = _mm256_add_epi32(summ, _mm256_madd_epi16(m3, _mm256_set1_epi32(_mm_extract_epi32(bs, 3))));
      const __m256 yd = _mm256_set1_ps(y.d);
      // Reference order: sumf += (y.d * d) * sumi - (y.d * dmin) * summ.
      const __m256 v = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(yd, d), _mm256_cvtepi32_ps(sumi[t])),
                                     _mm256_mul_ps(_mm256_mul_ps(yd, dmin), _mm256_cvtepi32_ps(summ)));
      acc[t] = _mm256_add_ps(acc[t], v);
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out[t], acc[t]);
}

// ---- Q6_K ------------------------------------------------------------------------------------

// One super-block of 8 rows: q in [0, 63] for 16 groups of 16 (4 chunks each); sc per group as
// in PanelQ4K; scp[p]: int16 pairs (sc_2p, sc_2p+1) per row for the -32 offset term.
struct PanelQ6K {
  uint8_t q[16][4][32];
  int32_t sc[16][8];
  int16_t scp[8][16];
  float d[8];
};

// Elements 32m .. 32m+31 of a Q6_K block as bytes in [0, 63] (layout: dequantize_row_q6_K).
inline __m256i q6_bytes(const BlockQ6K& b, int m) {
  const int h = m / 4, k = m % 4;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  const __m256i lo = load256(b.ql + 64 * h + 32 * (k % 2));
  const __m256i hi = load256(b.qh + 32 * h);
  const __m256i low4 = _mm256_and_si256(k < 2 ? lo : _mm256_srli_epi16(lo, 4), m4);
  const __m256i high2 = _mm256_and_si256(_mm256_srli_epi16(hi, 2 * k), m2);
  return _mm256_or_si256(low4, _mm256_slli_epi16(high2, 4));
}

[[maybe_unused]] void pack_q6k(const uint8_t* const rows[8], int64_t nsb, PanelQ6K* out) {
  for (int64_t i = 0; i < nsb; ++i) {
    PanelQ6K& p = out[i];
    for (int m = 0; m < 8; ++m) {
      __m256i v[8];
      for (int r = 0; r < 8; ++r) v[r] = q6_bytes(reinterpret_cast<const BlockQ6K*>(rows[r])[i], m);
      transpose8x8(v);
      // Chunk cc of elements 32m.. is group 2m + cc / 4, chunk cc % 4: q[2m][0..7] in memory.
      for (int c = 0; c < 8; ++c) store256(p.q[2 * m + c / 4][c % 4], v[c]);
    }
    for (int r = 0; r < 8; ++r) {
      const BlockQ6K& blk = reinterpret_cast<const BlockQ6K*>(rows[r])[i];
      for (int g = 0; g < 16; ++g) p.sc[g][r] = scale_lane(blk.scales[g]);
      for (int q = 0; q < 8; ++q) {
        p.scp[q][2 * r] = blk.scales[2 * q];
        p.scp[q][2 * r + 1] = blk.scales[2 * q + 1];
      }
      p.d[r] = f16(blk.d);
    }
  }
}

template <int NT>
void mk_q6k(const PanelQ6K* P, int64_t nsb, const GemmActs& a, int64_t t0, float* out[NT]) {
  const BlockQ8K* ay[NT];
  for (int t = 0; t < NT; ++t)
    ay[t] = reinterpret_cast<const BlockQ8K*>(a.rows + static_cast<size_t>(t0 + t) * a.row_bytes);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nsb; ++i) {
    const PanelQ6K& p = P[i];
    __m256i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
    for (int g = 0; g < 16; ++g) {
      const __m256i sc = load256(p.sc[g]);
      if constexpr (kVnni) {
        __m256i s[NT];
        for (int t = 0; t < NT; ++t) s[t] = _mm256_setzero_si256();
        for (int c = 0; c < 4; ++c) {
          const __m256i w = load256(p.q[g][c]);
          for (int t = 0; t < NT; ++t) s[t] = LARQL_GEMM_DPBUSD(s[t], w, bcast32(ay[t][i].qs + 16 * g + 4 * c));
        }
        for (int t = 0; t < NT; ++t) sumi[t] = _mm256_add_epi32(sumi[t], _mm256_mullo_epi32(s[t], sc));
      } else {
        for (int h = 0; h < 2; ++h) {
          const __m256i w0 = load256(p.q[g][2 * h]), w1 = load256(p.q[g][2 * h + 1]);
          for (int t = 0; t < NT; ++t) {
            const int8_t* x = ay[t][i].qs + 16 * g + 8 * h;
            const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, bcast32(x)),
                                                 _mm256_maddubs_epi16(w1, bcast32(x + 4)));
            sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(s16, sc));
          }
        }
      }
    }
    const __m256 d = _mm256_loadu_ps(p.d);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8K& y = ay[t][i];
      // sum_g sc_g * bsum_g: bsums[2p], bsums[2p+1] are one int32 lane.
      __m256i o = _mm256_setzero_si256();
      for (int q = 0; q < 8; ++q) o = _mm256_add_epi32(o, _mm256_madd_epi16(load256(p.scp[q]), bcast32(y.bsums + 2 * q)));
      const __m256i isum = _mm256_sub_epi32(sumi[t], _mm256_slli_epi32(o, 5));
      // Reference order: sumf += (d * y.d) * sumi.
      acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(y.d)), _mm256_cvtepi32_ps(isum)));
    }
  }
  for (int t = 0; t < NT; ++t) _mm256_storeu_ps(out[t], acc[t]);
}

// ---- decode: one weight row at a time against prepared activations ---------------------------

// Integer partial sums (8 lanes) of one weight block against one activation block, before the
// offset correction: sum (q + offset) * y for the unsigned forms, sum w * y for signed Q8_0.
inline __m256i block_sums(const BlockQ4_0& b, const uint8_t* y) {
  if constexpr (kVnni) return LARQL_GEMM_DPBUSD(_mm256_setzero_si256(), bytes_of(b), load256(y));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(bytes_of(b), load256(y)), _mm256_set1_epi16(1));
}
inline __m256i block_sums(const BlockQ5_0& b, const uint8_t* y) {
  if constexpr (kVnni) return LARQL_GEMM_DPBUSD(_mm256_setzero_si256(), bytes_of(b), load256(y));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(bytes_of(b), load256(y)), _mm256_set1_epi16(1));
}
inline __m256i block_sums(const BlockQ8_0& b, const uint8_t* y) {
  if constexpr (kVnni) return LARQL_GEMM_DPBUSD(_mm256_setzero_si256(), bytes_of(b), load256(y));
  const __m256i x = load256(b.qs);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(load256(y), x)),
                           _mm256_set1_epi16(1));
}

inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

inline uint64_t f16x4_bits(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
  return uint64_t(a) | uint64_t(b) << 16 | uint64_t(c) << 32 | uint64_t(d) << 48;
}

// Software prefetch for the decode kernels. A gemv step reads R neighbouring rows side by side,
// which to the hardware prefetchers looks like R interleaved streams: on AMD Zen 4 their reads
// then fall from 24-29 GB/s (one row at a time) to ~10 GB/s per core, and prefetching each row's
// own lines a fixed distance ahead does not help (measured: 10 GB/s). What does is one stream of
// software prefetches in address order: while a group of R rows (R x row_bytes contiguous bytes)
// is computed, the group LARQL_GEMV_PREFETCH_GROUPS ahead is prefetched line by line, spread
// evenly over the group's steps (26-28 GB/s for R = 4 and rows of 680-1680 bytes on that
// machine). `step()` is called once per kernel step; an empty GroupPrefetch does nothing (the
// later tokens of a batch, whose group is already in L1).
class GroupPrefetch {
 public:
  GroupPrefetch() = default;
  GroupPrefetch(const void* group, size_t group_bytes, int64_t steps) {
    if constexpr (LARQL_GEMV_PREFETCH_GROUPS > 0) {
      p_ = static_cast<const char*>(group) + group_bytes * LARQL_GEMV_PREFETCH_GROUPS;
      end_ = p_ + group_bytes;
      const size_t lines = (group_bytes + 63) / 64;
      per_step_ = (lines + static_cast<size_t>(std::max<int64_t>(1, steps)) - 1) / static_cast<size_t>(std::max<int64_t>(1, steps));
    }
  }
  void step() {
    for (size_t i = 0; i < per_step_ && p_ < end_; ++i, p_ += 64) _mm_prefetch(p_, _MM_HINT_T0);
  }

 private:
  const char* p_ = nullptr;
  const char* end_ = nullptr;
  size_t per_step_ = 0;
};

// R rows (R even) against one activation row: out[r] = the row kernel's result for x[r], bit for
// bit (dot_avx2.cc dot_q_x_q8_0's float order, with the activation scales already in f32 and the
// weights' offset removed through the block sums). Per 4 blocks the R x 4 block sums are reduced
// with hadds and two rows share one 256-bit float step: lanes 0..3 are row 2p's accumulators 0..3,
// lanes 4..7 row 2p+1's, so the per-lane float operations are the row kernel's 4-wide ones.
template <typename Block, int R>
void gemv_rows(const Block* const x[R], int64_t nb, const uint8_t* aq, const float* ad, const int32_t* as,
               float* out, GroupPrefetch pf) {
  static_assert(R % 2 == 0, "rows go in pairs");
  constexpr int kOff = offset_of<Block>();
  constexpr int kShift = kOff == 128 ? 7 : kOff == 16 ? 4 : 3;
  __m256 acc[R / 2];
  for (int p = 0; p < R / 2; ++p) acc[p] = _mm256_setzero_ps();
  int64_t ib = 0;
  for (; ib + 3 < nb; ib += 4) {
    const uint8_t* y = aq + ib * sizeof(BlockQ8_0);
    __m256i h[R];
    pf.step();
    for (int r = 0; r < R; ++r) {
      const __m256i s0 = block_sums(x[r][ib], y);
      const __m256i s1 = block_sums(x[r][ib + 1], y + sizeof(BlockQ8_0));
      const __m256i s2 = block_sums(x[r][ib + 2], y + 2 * sizeof(BlockQ8_0));
      const __m256i s3 = block_sums(x[r][ib + 3], y + 3 * sizeof(BlockQ8_0));
      h[r] = _mm256_hadd_epi32(_mm256_hadd_epi32(s0, s1), _mm256_hadd_epi32(s2, s3));
    }
    const __m256 dy = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(ad + ib));
    [[maybe_unused]] __m256i off;
    if constexpr (kOff != 0)
      off = _mm256_slli_epi32(
          _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(as + ib))), kShift);
    for (int p = 0; p < R / 2; ++p) {
      const __m256i a = h[2 * p], b = h[2 * p + 1];
      __m256i sums = _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
      if constexpr (kOff != 0) sums = _mm256_sub_epi32(sums, off);
      const Block* x0 = x[2 * p] + ib;
      const Block* x1 = x[2 * p + 1] + ib;
      const __m128i dh = _mm_set_epi64x(static_cast<long long>(f16x4_bits(x1[0].d, x1[1].d, x1[2].d, x1[3].d)),
                                        static_cast<long long>(f16x4_bits(x0[0].d, x0[1].d, x0[2].d, x0[3].d)));
      acc[p] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtph_ps(dh), dy), _mm256_cvtepi32_ps(sums), acc[p]);
    }
  }
  alignas(32) float lanes[R][4];
  for (int p = 0; p < R / 2; ++p) _mm256_store_ps(lanes[2 * p], acc[p]);
  for (int r = 0; r < R; ++r) {
    // Blocks left over (nb not a multiple of 4): block ib + k still goes to accumulator k.
    for (int k = 0; ib + k < nb; ++k) {
      const int64_t b = ib + k;
      const int32_t isum = hsum_i32(block_sums(x[r][b], aq + b * sizeof(BlockQ8_0))) - kOff * as[b];
      lanes[r][k] = std::fma(f16(x[r][b].d) * ad[b], static_cast<float>(isum), lanes[r][k]);
    }
    out[r] = (lanes[r][0] + lanes[r][2]) + (lanes[r][1] + lanes[r][3]);
  }
}

template <typename Block>
void gemv_b32(int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1, const GemmActs& a,
              float* y, int64_t ldy) {
  constexpr int R = LARQL_GEMV_ROWS;
  const int64_t nb = cols / QK8_0;
  auto row = [&](int64_t r) { return reinterpret_cast<const Block*>(w_data + static_cast<size_t>(r) * w_row_bytes); };
  // Rows outer, tokens inner: a group's rows stay in L1 while every activation row passes.
  auto tokens = [&](auto nrows, const Block* const* x, int64_t r, int valid) {
    constexpr int N = decltype(nrows)::value;
    for (int64_t t = 0; t < a.n; ++t) {
      float o[N];
      const GroupPrefetch pf = t == 0 ? GroupPrefetch(x[0], N * w_row_bytes, nb / 4) : GroupPrefetch();
      gemv_rows<Block, N>(x, nb, a.rows + static_cast<size_t>(t) * a.row_bytes + 2, a.scale + t * nb,
                          a.sum + t * nb, o, pf);
      std::memcpy(y + t * ldy + r, o, sizeof(float) * static_cast<size_t>(valid));
    }
  };
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    const Block* x[R];
    for (int i = 0; i < R; ++i) x[i] = row(r + i);
    tokens(std::integral_constant<int, R>{}, x, r, R);
  }
  for (; r < r1; r += 2) {  // the last rows in pairs; an odd last row is computed twice
    const Block* x[2] = {row(r), row(std::min(r + 1, r1 - 1))};
    tokens(std::integral_constant<int, 2>{}, x, r, static_cast<int>(std::min<int64_t>(2, r1 - r)));
  }
}

// ---- decode: K-quants, 4 weight rows per step -------------------------------------------------

// acc + madd(sc, p16): one dpwssd under VNNI. Exact int32 either way (wrapping like the scalar sums).
inline __m256i madd_acc(__m256i acc, __m256i p16, __m256i sc) {
#ifdef LARQL_GEMM_DPWSSD
  return LARQL_GEMM_DPWSSD(acc, sc, p16);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(sc, p16));
#endif
}
// [sum of v0's lanes, ..., sum of v3's lanes].
inline __m128i hsum4_i32(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
  const __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
  return _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}
inline __m128i hsum4_i32(__m128i v0, __m128i v1, __m128i v2, __m128i v3) {
  return _mm_hadd_epi32(_mm_hadd_epi32(v0, v1), _mm_hadd_epi32(v2, v3));
}

// Q4_K: the 12 packed scale bytes -> 8 scales (bytes 0..7) then 8 mins (8..15) as int16
// (ggml-cpu quants.c's kmask shuffle, as dot_avx2.cc).
inline __m256i q4k_mins_and_scales(const uint8_t* scales) {
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
inline __m256i scale16(__m256i scales, int k) {  // int16 scale k of 8, in all 16 lanes
  return _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>(((2 * k + 1) << 8) | (2 * k))));
}
inline __m128 f16x4_ps(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(f16x4_bits(a, b, c, d))));
}

// Four rows against one Q8_K activation row. Per row and super-block the exact integer sums of
// dot_avx2.cc dot_q4_k, then its float step sumf += d * float(sumi) - dmin * float(summ) (d =
// y.d * f16(x.d), dmin = y.d * f16(x.dmin)), done for the 4 rows in the 4 lanes of one vector:
// per lane the same operations in the same order, so each result equals the row kernel's bits.
void gemv_q4k_rows(const BlockQ4K* const x[4], int64_t nsb, const BlockQ8K* y, float out[4], GroupPrefetch pf) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m128 acc = _mm_setzero_ps();
  for (int64_t i = 0; i < nsb; ++i) {
    const BlockQ8K& yb = y[i];
    const __m256i q8sums = load256(yb.bsums);
    const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(q8sums), _mm256_extracti128_si256(q8sums, 1));
    __m256i sumi[4], scales[4];
    __m128i summ[4];
    pf.step();
    for (int r = 0; r < 4; ++r) {
      const __m256i ms = q4k_mins_and_scales(x[r][i].scales);
      summ[r] = _mm_madd_epi16(_mm256_extracti128_si256(ms, 1), q8s);
      const __m128i sc = _mm256_castsi256_si128(ms);
      scales[r] = _mm256_set_m128i(sc, sc);
      sumi[r] = _mm256_setzero_si256();
    }
    for (int j = 0; j < QK_K / 64; ++j) {
      const __m256i q8l = load256(yb.qs + 64 * j), q8h = load256(yb.qs + 64 * j + 32);
      for (int r = 0; r < 4; ++r) {
        const __m256i q4 = load256(x[r][i].qs + 32 * j);
        const __m256i q4l = _mm256_and_si256(q4, m4), q4h = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
        sumi[r] = madd_acc(sumi[r], _mm256_maddubs_epi16(q4l, q8l), scale16(scales[r], 2 * j));
        sumi[r] = madd_acc(sumi[r], _mm256_maddubs_epi16(q4h, q8h), scale16(scales[r], 2 * j + 1));
      }
    }
    const __m128 yd = _mm_set1_ps(yb.d);
    const __m128 d = _mm_mul_ps(yd, f16x4_ps(x[0][i].d, x[1][i].d, x[2][i].d, x[3][i].d));
    const __m128 dmin = _mm_mul_ps(yd, f16x4_ps(x[0][i].dmin, x[1][i].dmin, x[2][i].dmin, x[3][i].dmin));
    const __m128 si = _mm_cvtepi32_ps(hsum4_i32(sumi[0], sumi[1], sumi[2], sumi[3]));
    const __m128 sm = _mm_cvtepi32_ps(hsum4_i32(summ[0], summ[1], summ[2], summ[3]));
    acc = _mm_add_ps(acc, _mm_sub_ps(_mm_mul_ps(d, si), _mm_mul_ps(dmin, sm)));
  }
  _mm_storeu_ps(out, acc);
}

// 16 bytes: scale 2k repeated 8 times, then scale 2k+1 repeated 8 times.
inline __m128i q6_scale_shuffle(int k) {
  const char a = static_cast<char>(2 * k), b = static_cast<char>(2 * k + 1);
  return _mm_set_epi8(b, b, b, b, b, b, b, b, a, a, a, a, a, a, a, a);
}

// Four rows of Q6_K: per row the exact integer sum of dot_avx2.cc dot_q6_k (the -32 offset taken
// through the activation's block sums: sum_g sc_g * 32 * bsum_g), then sumf += (f16(x.d) * y.d) *
// float(sumi) per lane as in gemv_q4k_rows.
void gemv_q6k_rows(const BlockQ6K* const x[4], int64_t nsb, const BlockQ8K* y, float out[4], GroupPrefetch pf) {
  const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3);
  __m128 acc = _mm_setzero_ps();
  for (int64_t i = 0; i < nsb; ++i) {
    const BlockQ8K& yb = y[i];
    const __m256i bsums = load256(yb.bsums);
    __m256i sumi[4];
    __m128i scales[4];
    pf.step();
    for (int r = 0; r < 4; ++r) {
      scales[r] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[r][i].scales));
      sumi[r] = _mm256_madd_epi16(_mm256_cvtepi8_epi16(scales[r]), bsums);  // sum_g sc_g * bsum_g
      sumi[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sumi[r], 5));
    }
    for (int j = 0; j < QK_K / 128; ++j) {
      const int8_t* q8 = yb.qs + 128 * j;
      const __m256i q8k[4] = {load256(q8), load256(q8 + 32), load256(q8 + 64), load256(q8 + 96)};
      for (int r = 0; r < 4; ++r) {
        const uint8_t* ql = x[r][i].ql + 64 * j;
        const __m256i q4bits1 = load256(ql), q4bits2 = load256(ql + 32);
        const __m256i q4bitsH = load256(x[r][i].qh + 32 * j);
        const __m256i q6[4] = {
            _mm256_or_si256(_mm256_and_si256(q4bits1, m4), _mm256_slli_epi16(_mm256_and_si256(q4bitsH, m2), 4)),
            _mm256_or_si256(_mm256_and_si256(q4bits2, m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 2), m2), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits1, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 4), m2), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4bits2, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q4bitsH, 6), m2), 4)),
        };
        for (int k = 0; k < 4; ++k) {
          const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales[r], q6_scale_shuffle(4 * j + k)));
          sumi[r] = madd_acc(sumi[r], _mm256_maddubs_epi16(q6[k], q8k[k]), sc);
        }
      }
    }
    const __m128 d = _mm_mul_ps(f16x4_ps(x[0][i].d, x[1][i].d, x[2][i].d, x[3][i].d), _mm_set1_ps(yb.d));
    acc = _mm_add_ps(acc, _mm_mul_ps(d, _mm_cvtepi32_ps(hsum4_i32(sumi[0], sumi[1], sumi[2], sumi[3]))));
  }
  _mm_storeu_ps(out, acc);
}

// Rows [r0, r1) four at a time; the last group repeats the final row where fewer than 4 are left.
template <typename Block, typename Rows4>
void gemv_k(int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1, const GemmActs& a,
            float* y, int64_t ldy, Rows4&& rows4) {
  const int64_t nsb = cols / QK_K;
  for (int64_t r = r0; r < r1; r += 4) {  // rows outer: the group stays in L1 across the tokens
    const Block* x[4];
    for (int i = 0; i < 4; ++i)
      x[i] = reinterpret_cast<const Block*>(w_data + static_cast<size_t>(std::min(r + i, r1 - 1)) * w_row_bytes);
    for (int64_t t = 0; t < a.n; ++t) {
      float o[4];
      const GroupPrefetch pf = t == 0 ? GroupPrefetch(x[0], 4 * w_row_bytes, nsb) : GroupPrefetch();
      rows4(x, nsb, reinterpret_cast<const BlockQ8K*>(a.rows + static_cast<size_t>(t) * a.row_bytes), o, pf);
      std::memcpy(y + t * ldy + r, o, sizeof(float) * static_cast<size_t>(std::min<int64_t>(4, r1 - r)));
    }
  }
}

// ---- driver ----------------------------------------------------------------------------------

// Runs MK<NT> over every activation row of [0, a.n), NT at a time, then the remainder.
// Outputs go to y[t * ldy + row0 .. + nr); a short panel (nr < 8) goes through a bounce buffer.
template <int kRows = 8, typename Fn>
void over_tokens(const GemmActs& a, float* y, int64_t ldy, int64_t row0, int nr, Fn&& mk) {
  alignas(64) float bounce[kNt][kRows];
  auto outs = [&](int64_t t0, int nt, float* o[kNt]) {
    for (int t = 0; t < nt; ++t) o[t] = nr == kRows ? y + (t0 + t) * ldy + row0 : bounce[t];
  };
  auto flush = [&](int64_t t0, int nt) {
    if (nr == kRows) return;
    for (int t = 0; t < nt; ++t) std::memcpy(y + (t0 + t) * ldy + row0, bounce[t], sizeof(float) * nr);
  };
  int64_t t = 0;
  float* o[kNt];
  for (; t + kNt <= a.n; t += kNt) {
    outs(t, kNt, o);
    mk(std::integral_constant<int, kNt>{}, t, o);
    flush(t, kNt);
  }
  const int rest = static_cast<int>(a.n - t);
  outs(t, rest, o);
  if (rest == 3) mk(std::integral_constant<int, 3>{}, t, o);
  if (rest == 2) mk(std::integral_constant<int, 2>{}, t, o);
  if (rest == 1) mk(std::integral_constant<int, 1>{}, t, o);
  flush(t, rest);
}

template <typename Panel>
Panel* panel_scratch(int64_t count) {
  struct alignas(64) Line {
    uint8_t b[64];
  };
  thread_local std::vector<Line> buf;
  const size_t need = (static_cast<size_t>(count) * sizeof(Panel) + 63) / 64;
  if (buf.size() < need) buf.resize(need);
  return reinterpret_cast<Panel*>(buf.data());
}

template <typename Block>
void run_b32(int64_t cols, const uint8_t* const rows[8], const GemmActs& a, float* y, int64_t ldy, int64_t row0, int nr) {
  const int64_t nb = cols / QK8_0;
  PanelB32* P = panel_scratch<PanelB32>(nb);
  pack_b32<Block>(rows, nb, P);
  constexpr bool kSigned = !kVnni && offset_of<Block>() == 0;
  over_tokens(a, y, ldy, row0, nr, [&](auto nt, int64_t t0, float** o) {
    mk_b32<decltype(nt)::value, kSigned>(P, nb, a, t0, offset_of<Block>(), o);
  });
}

}  // namespace

void LARQL_GEMV_ENTRY(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
                      const GemmActs& a, float* y, int64_t ldy) {
  switch (w) {
    case DType::Q4_0: return gemv_b32<BlockQ4_0>(cols, w_data, w_row_bytes, r0, r1, a, y, ldy);
    case DType::Q5_0: return gemv_b32<BlockQ5_0>(cols, w_data, w_row_bytes, r0, r1, a, y, ldy);
    case DType::Q8_0: return gemv_b32<BlockQ8_0>(cols, w_data, w_row_bytes, r0, r1, a, y, ldy);
    case DType::Q4_K: return gemv_k<BlockQ4K>(cols, w_data, w_row_bytes, r0, r1, a, y, ldy, gemv_q4k_rows);
    case DType::Q6_K: return gemv_k<BlockQ6K>(cols, w_data, w_row_bytes, r0, r1, a, y, ldy, gemv_q6k_rows);
    default: return;  // gemv_supported() is false for every other type
  }
}

#ifdef LARQL_GEMM_ENTRY
void LARQL_GEMM_ENTRY(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
                      const GemmActs& a, float* y, int64_t ldy) {
  for (int64_t p0 = r0; p0 < r1; p0 += 8) {
    const int nr = static_cast<int>(std::min<int64_t>(8, r1 - p0));
    const uint8_t* rows[8];
    for (int r = 0; r < 8; ++r) rows[r] = w_data + static_cast<size_t>(p0 + std::min(r, nr - 1)) * w_row_bytes;
    switch (w) {
      case DType::Q4_0: run_b32<BlockQ4_0>(cols, rows, a, y, ldy, p0, nr); break;
      case DType::Q5_0: run_b32<BlockQ5_0>(cols, rows, a, y, ldy, p0, nr); break;
      case DType::Q8_0: run_b32<BlockQ8_0>(cols, rows, a, y, ldy, p0, nr); break;
      case DType::Q4_K: {
        const int64_t nsb = cols / QK_K;
        PanelQ4K* P = panel_scratch<PanelQ4K>(nsb);
        pack_q4k(rows, nsb, P);
        over_tokens(a, y, ldy, p0, nr, [&](auto nt, int64_t t0, float** o) { mk_q4k<decltype(nt)::value>(P, nsb, a, t0, o); });
        break;
      }
      case DType::Q6_K: {
        const int64_t nsb = cols / QK_K;
        PanelQ6K* P = panel_scratch<PanelQ6K>(nsb);
        pack_q6k(rows, nsb, P);
        over_tokens(a, y, ldy, p0, nr, [&](auto nt, int64_t t0, float** o) { mk_q6k<decltype(nt)::value>(P, nsb, a, t0, o); });
        break;
      }
      default: return;  // gemm_supported() is false for every other type
    }
  }
}

#endif  // LARQL_GEMM_ENTRY

}  // namespace larql::quant::detail
