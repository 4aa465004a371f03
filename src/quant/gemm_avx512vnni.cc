// Tiled kernels (quant/gemm.h) for AVX-512 VNNI (F/BW/VL/DQ + VNNI: Ice Lake, Sapphire Rapids,
// Zen 4): 512-bit dpbusd over 16-row panels, 4 activation rows per call with 22 of the 32 zmm
// registers (no spills). The decode kernel (gemv) is the shared 256-bit one with the EVEX dpbusd
// and dpwssd (and 32 ymm registers).
// Bit-identical to the AVX2 kernels: the same exact integer block sums, and per output lane the
// same float operations in the same order.
// GCC 12 flags the self-initialised _mm512_undefined_* inside its own intrinsics headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define LARQL_GEMM_VNNI 1
#define LARQL_GEMM_DPBUSD(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#define LARQL_GEMV_ENTRY gemv_avx512vnni
#define LARQL_GEMM_DPWSSD(acc, a, b) _mm256_dpwssd_epi32(acc, a, b)
#include "quant/gemm_x86.inl"

namespace larql::quant::detail {
namespace {

constexpr int kZRows = 16;

inline __m512i bcast32z(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Two 8-row transposes side by side: vector c of a 16-row panel is [rows 0..7 | rows 8..15].
template <typename RowVec>
void pack16(RowVec&& row_vec, uint8_t* dst_c0, size_t stride) {
  for (int half = 0; half < 2; ++half) {
    __m256i v[8];
    for (int r = 0; r < 8; ++r) v[r] = row_vec(8 * half + r);
    transpose8x8(v);
    for (int c = 0; c < 8; ++c) store256(dst_c0 + c * stride + 32 * half, v[c]);
  }
}

// ---- 32-element blocks ----

struct PanelZ32 {
  uint8_t q[8][64];
  float d[16];
};

template <typename Block>
void pack_z32(const uint8_t* const rows[16], int64_t nb, PanelZ32* out) {
  for (int64_t b = 0; b < nb; ++b) {
    pack16([&](int r) { return bytes_of(reinterpret_cast<const Block*>(rows[r])[b]); }, out[b].q[0], 64);
    for (int r = 0; r < 16; ++r) out[b].d[r] = f16(reinterpret_cast<const Block*>(rows[r])[b].d);
  }
}

template <int NT>
void mk_z32(const PanelZ32* P, int64_t nb, const GemmActs& a, int64_t t0, int off, float* out[NT]) {
  const uint8_t* ar[NT];
  const float* ad[NT];
  const int32_t* as[NT];
  for (int t = 0; t < NT; ++t) {
    ar[t] = a.rows + static_cast<size_t>(t0 + t) * a.row_bytes + 2;
    ad[t] = a.scale + (t0 + t) * nb;
    as[t] = a.sum + (t0 + t) * nb;
  }
  __m512 acc[NT][4];
  for (int t = 0; t < NT; ++t)
    for (int k = 0; k < 4; ++k) acc[t][k] = _mm512_setzero_ps();
  auto block = [&](int64_t b, int k) __attribute__((always_inline)) {
    const PanelZ32& p = P[b];
    const size_t ab = static_cast<size_t>(b) * sizeof(BlockQ8_0);
    __m512i s[NT];
    for (int t = 0; t < NT; ++t) s[t] = _mm512_setzero_si512();
    for (int c = 0; c < 8; ++c) {
      const __m512i w = _mm512_loadu_si512(p.q[c]);
      for (int t = 0; t < NT; ++t) s[t] = _mm512_dpbusd_epi32(s[t], w, bcast32z(ar[t] + ab + 4 * c));
    }
    const __m512 dw = _mm512_loadu_ps(p.d);
    for (int t = 0; t < NT; ++t) {
      const __m512i is = _mm512_sub_epi32(s[t], _mm512_set1_epi32(off * as[t][b]));
      acc[t][k] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(ad[t][b])), _mm512_cvtepi32_ps(is), acc[t][k]);
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
    _mm512_storeu_ps(out[t], _mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][2]), _mm512_add_ps(acc[t][1], acc[t][3])));
}

// ---- Q4_K ----

struct PanelZQ4K {
  uint8_t q[8][8][64];
  int32_t sc[8][16];
  int16_t mins[4][32];
  float d[16], dmin[16];
};

void pack_zq4k(const uint8_t* const rows[16], int64_t nsb, PanelZQ4K* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < nsb; ++i) {
    PanelZQ4K& p = out[i];
    for (int j = 0; j < 8; ++j)
      pack16(
          [&](int r) {
            const __m256i bits = load256(reinterpret_cast<const BlockQ4K*>(rows[r])[i].qs + 32 * (j / 2));
            return _mm256_and_si256(j % 2 ? _mm256_srli_epi16(bits, 4) : bits, m4);
          },
          p.q[j][0], 64);
    for (int r = 0; r < 16; ++r) {
      const BlockQ4K& blk = reinterpret_cast<const BlockQ4K*>(rows[r])[i];
      uint8_t sc[8], m[8];
      for (int j = 0; j < 8; ++j) get_scale_min_k4(j, blk.scales, &sc[j], &m[j]);
      for (int j = 0; j < 8; ++j) p.sc[j][r] = sc[j];
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
void mk_zq4k(const PanelZQ4K* P, int64_t nsb, const GemmActs& a, int64_t t0, float* out[NT]) {
  const BlockQ8K* ay[NT];
  for (int t = 0; t < NT; ++t)
    ay[t] = reinterpret_cast<const BlockQ8K*>(a.rows + static_cast<size_t>(t0 + t) * a.row_bytes);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nsb; ++i) {
    const PanelZQ4K& p = P[i];
    __m512i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      __m512i s[NT];
      for (int t = 0; t < NT; ++t) s[t] = _mm512_setzero_si512();
      for (int c = 0; c < 8; ++c) {
        const __m512i w = _mm512_loadu_si512(p.q[j][c]);
        for (int t = 0; t < NT; ++t) s[t] = _mm512_dpbusd_epi32(s[t], w, bcast32z(ay[t][i].qs + 32 * j + 4 * c));
      }
      const __m512i sc = _mm512_loadu_si512(p.sc[j]);
      for (int t = 0; t < NT; ++t) sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(s[t], sc));
    }
    const __m512 d = _mm512_loadu_ps(p.d), dmin = _mm512_loadu_ps(p.dmin);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8K& y = ay[t][i];
      const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums)),
                                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums + 8)));
      __m512i summ = _mm512_setzero_si512();
      alignas(16) int32_t pairs[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(pairs), bs);
      for (int q = 0; q < 4; ++q)
        summ = _mm512_add_epi32(summ, _mm512_madd_epi16(_mm512_loadu_si512(p.mins[q]), _mm512_set1_epi32(pairs[q])));
      const __m512 yd = _mm512_set1_ps(y.d);
      const __m512 v = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(yd, d), _mm512_cvtepi32_ps(sumi[t])),
                                     _mm512_mul_ps(_mm512_mul_ps(yd, dmin), _mm512_cvtepi32_ps(summ)));
      acc[t] = _mm512_add_ps(acc[t], v);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out[t], acc[t]);
}

// ---- Q6_K ----

struct PanelZQ6K {
  uint8_t q[16][4][64];
  int32_t sc[16][16];
  int16_t scp[8][32];
  float d[16];
};

void pack_zq6k(const uint8_t* const rows[16], int64_t nsb, PanelZQ6K* out) {
  for (int64_t i = 0; i < nsb; ++i) {
    PanelZQ6K& p = out[i];
    for (int m = 0; m < 8; ++m)
      pack16([&](int r) { return q6_bytes(reinterpret_cast<const BlockQ6K*>(rows[r])[i], m); }, p.q[2 * m][0], 64);
    for (int r = 0; r < 16; ++r) {
      const BlockQ6K& blk = reinterpret_cast<const BlockQ6K*>(rows[r])[i];
      for (int g = 0; g < 16; ++g) p.sc[g][r] = blk.scales[g];
      for (int q = 0; q < 8; ++q) {
        p.scp[q][2 * r] = blk.scales[2 * q];
        p.scp[q][2 * r + 1] = blk.scales[2 * q + 1];
      }
      p.d[r] = f16(blk.d);
    }
  }
}

template <int NT>
void mk_zq6k(const PanelZQ6K* P, int64_t nsb, const GemmActs& a, int64_t t0, float* out[NT]) {
  const BlockQ8K* ay[NT];
  for (int t = 0; t < NT; ++t)
    ay[t] = reinterpret_cast<const BlockQ8K*>(a.rows + static_cast<size_t>(t0 + t) * a.row_bytes);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nsb; ++i) {
    const PanelZQ6K& p = P[i];
    __m512i sumi[NT];
    for (int t = 0; t < NT; ++t) sumi[t] = _mm512_setzero_si512();
    for (int g = 0; g < 16; ++g) {
      __m512i s[NT];
      for (int t = 0; t < NT; ++t) s[t] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const __m512i w = _mm512_loadu_si512(p.q[g][c]);
        for (int t = 0; t < NT; ++t) s[t] = _mm512_dpbusd_epi32(s[t], w, bcast32z(ay[t][i].qs + 16 * g + 4 * c));
      }
      const __m512i sc = _mm512_loadu_si512(p.sc[g]);
      for (int t = 0; t < NT; ++t) sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(s[t], sc));
    }
    const __m512 d = _mm512_loadu_ps(p.d);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8K& y = ay[t][i];
      __m512i o = _mm512_setzero_si512();
      for (int q = 0; q < 8; ++q) o = _mm512_add_epi32(o, _mm512_madd_epi16(_mm512_loadu_si512(p.scp[q]), bcast32z(y.bsums + 2 * q)));
      const __m512i isum = _mm512_sub_epi32(sumi[t], _mm512_slli_epi32(o, 5));
      acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(y.d)), _mm512_cvtepi32_ps(isum)));
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out[t], acc[t]);
}

template <typename Block>
void run_z32(int64_t cols, const uint8_t* const rows[16], const GemmActs& a, float* y, int64_t ldy, int64_t row0,
             int nr) {
  const int64_t nb = cols / QK8_0;
  PanelZ32* P = panel_scratch<PanelZ32>(nb);
  pack_z32<Block>(rows, nb, P);
  over_tokens<kZRows>(a, y, ldy, row0, nr, [&](auto nt, int64_t t0, float** o) {
    mk_z32<decltype(nt)::value>(P, nb, a, t0, offset_of<Block>(), o);
  });
}

}  // namespace

void gemm_avx512vnni(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
                     const GemmActs& a, float* y, int64_t ldy) {
  for (int64_t p0 = r0; p0 < r1; p0 += kZRows) {
    const int nr = static_cast<int>(std::min<int64_t>(kZRows, r1 - p0));
    const uint8_t* rows[kZRows];
    for (int r = 0; r < kZRows; ++r) rows[r] = w_data + static_cast<size_t>(p0 + std::min(r, nr - 1)) * w_row_bytes;
    switch (w) {
      case DType::Q4_0: run_z32<BlockQ4_0>(cols, rows, a, y, ldy, p0, nr); break;
      case DType::Q5_0: run_z32<BlockQ5_0>(cols, rows, a, y, ldy, p0, nr); break;
      case DType::Q8_0: run_z32<BlockQ8_0>(cols, rows, a, y, ldy, p0, nr); break;
      case DType::Q4_K: {
        const int64_t nsb = cols / QK_K;
        PanelZQ4K* P = panel_scratch<PanelZQ4K>(nsb);
        pack_zq4k(rows, nsb, P);
        over_tokens<kZRows>(a, y, ldy, p0, nr, [&](auto nt, int64_t t0, float** o) {
          mk_zq4k<decltype(nt)::value>(P, nsb, a, t0, o);
        });
        break;
      }
      case DType::Q6_K: {
        const int64_t nsb = cols / QK_K;
        PanelZQ6K* P = panel_scratch<PanelZQ6K>(nsb);
        pack_zq6k(rows, nsb, P);
        over_tokens<kZRows>(a, y, ldy, p0, nr, [&](auto nt, int64_t t0, float** o) {
          mk_zq6k<decltype(nt)::value>(P, nsb, a, t0, o);
        });
        break;
      }
      default: return;  // gemm_supported() is false for every other type
    }
  }
}

}  // namespace larql::quant::detail
