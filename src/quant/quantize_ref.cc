// Scalar quantisers. Q8_0 / Q8_K (activation formats) and Q4_0 / Q5_0 follow
// ggml-quants.c quantize_row_*_ref exactly. Q4_K / Q5_K / Q6_K are simple min/max (or absmax)
// quantisers with the same block layout — not llama.cpp's error-minimising search — used to build
// synthetic test models. Round-trip error bounds are stated per function and pinned by tests.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/kernels.h"
#include "util/half.h"

namespace larql::quant::detail {
namespace {

void q_f32(const float* x, void* dst, int64_t n) {
  std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
}

void q_f16(const float* x, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_f16(x[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

void q_bf16(const float* x, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(x[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

// ggml quantize_row_q8_0_ref: d = amax/127, q = roundf(x/d) (ties away from zero).
void q_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / QK8_0; ++i) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[i * QK8_0 + j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < QK8_0; ++j)
      y[i].qs[j] = static_cast<int8_t>(std::roundf(x[i * QK8_0 + j] * id));
  }
}

// ggml quantize_row_q8_K_ref: scale from the signed absmax so it maps to -127; bsums per 16.
void q_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < QK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (!amax) {
      y[i].d = 0.0f;
      std::memset(y[i].qs, 0, QK_K);
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      x += QK_K;
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < QK_K; ++j) {
      const int v = nearest_int(iscale * x[j]);
      y[i].qs[j] = static_cast<int8_t>(std::min(127, v));
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
    x += QK_K;
  }
}

// ggml quantize_row_q4_0_ref: d = max/-8 (max = signed absmax), q = min(15, trunc(x/d + 8.5)).
void q_q4_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / QK4_0; ++i) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK4_0; ++j) {
      const float v = x[i * QK4_0 + j];
      if (amax < std::fabs(v)) {
        amax = std::fabs(v);
        max = v;
      }
    }
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const float x0 = x[i * QK4_0 + j] * id;
      const float x1 = x[i * QK4_0 + QK4_0 / 2 + j] * id;
      const uint8_t xi0 = static_cast<uint8_t>(std::min(15, static_cast<int>(x0 + 8.5f)));
      const uint8_t xi1 = static_cast<uint8_t>(std::min(15, static_cast<int>(x1 + 8.5f)));
      y[i].qs[j] = xi0 | static_cast<uint8_t>(xi1 << 4);
    }
  }
}

// ggml quantize_row_q5_0_ref: d = max/-16, q = min(31, trunc(x/d + 16.5)); bit 4 into qh.
void q_q5_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / QK5_0; ++i) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK5_0; ++j) {
      const float v = x[i * QK5_0 + j];
      if (amax < std::fabs(v)) {
        amax = std::fabs(v);
        max = v;
      }
    }
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const float x0 = x[i * QK5_0 + j] * id;
      const float x1 = x[i * QK5_0 + QK5_0 / 2 + j] * id;
      const uint8_t xi0 = static_cast<uint8_t>(std::min(31, static_cast<int>(x0 + 16.5f)));
      const uint8_t xi1 = static_cast<uint8_t>(std::min(31, static_cast<int>(x1 + 16.5f)));
      y[i].qs[j] = (xi0 & 0x0F) | static_cast<uint8_t>((xi1 & 0x0F) << 4);
      qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
      qh |= ((xi1 & 0x10u) >> 4) << (j + QK5_0 / 2);
    }
    std::memcpy(y[i].qh, &qh, sizeof(qh));
  }
}

// Q4_K / Q5_K: per 32-element sub-block, range [min(0, lo), hi] in `nmax` steps; the 8 scales
// and 8 mins are requantised to 6 bits against the block's largest (d = max_scale/63,
// dmin = max_min/63). Elements are then rounded against the 6-bit effective scale/min.
// Bound (|x - deq(q(x))|): <= max_scale + max_min/63 per super-block (tests use this).
void kquant_sub_blocks(const float* x, int nmax, uint8_t* L, uint8_t ls[8], uint8_t lm[8],
                       uint16_t* d_out, uint16_t* dmin_out) {
  float scales[8], mins[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    float lo = x[32 * j], hi = x[32 * j];
    for (int l = 1; l < 32; ++l) {
      lo = std::min(lo, x[32 * j + l]);
      hi = std::max(hi, x[32 * j + l]);
    }
    if (lo > 0) lo = 0;
    scales[j] = (hi - lo) / nmax;
    mins[j] = -lo;
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; ++j) {
    ls[j] = static_cast<uint8_t>(std::min(63, nearest_int(inv_scale * scales[j])));
    lm[j] = static_cast<uint8_t>(std::min(63, nearest_int(inv_min * mins[j])));
  }
  *d_out = f32_to_f16(max_scale / 63.f);
  *dmin_out = f32_to_f16(max_min / 63.f);
  const float d = f16_to_f32(*d_out), dmin = f16_to_f32(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    const float dl = d * ls[j];
    const float dm = dmin * lm[j];
    for (int l = 0; l < 32; ++l) {
      const int q = dl ? nearest_int((x[32 * j + l] + dm) / dl) : 0;
      L[32 * j + l] = static_cast<uint8_t>(std::clamp(q, 0, nmax));
    }
  }
}

// Pack 8 six-bit scales and mins into 12 bytes: inverse of get_scale_min_k4.
// Source: ggml-quants.c quantize_row_q4_K_ref.
void pack_scales_k4(const uint8_t ls[8], const uint8_t lm[8], uint8_t* scales) {
  std::memset(scales, 0, K_SCALE_SIZE);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
      scales[j - 4] |= ((ls[j] >> 4) << 6);
      scales[j - 0] |= ((lm[j] >> 4) << 6);
    }
  }
}

void q_q4_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ4K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    uint8_t L[QK_K], ls[8], lm[8];
    kquant_sub_blocks(x, 15, L, ls, lm, &y[i].d, &y[i].dmin);
    pack_scales_k4(ls, lm, y[i].scales);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < QK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = L[j + l] | static_cast<uint8_t>(L[j + l + 32] << 4);
  }
}

void q_q5_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ5K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    uint8_t L[QK_K], ls[8], lm[8];
    kquant_sub_blocks(x, 31, L, ls, lm, &y[i].d, &y[i].dmin);
    pack_scales_k4(ls, lm, y[i].scales);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    std::memset(qh, 0, QK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int nn = 0; nn < QK_K; nn += 64) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[nn + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[nn + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 <<= 2;
      m2 <<= 2;
      ql += 32;
    }
  }
}

// Q6_K: per 16-element group, scale = absmax/31 (q in [-31, 31] before the +32 offset);
// the 16 scales are requantised to int8 against the largest (d = max_scale/127).
// Bound: <= max group scale (one step) per super-block.
void q_q6_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ6K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float scales[16];
    float max_scale = 0.0f;
    for (int g = 0; g < 16; ++g) {
      float amax = 0.0f;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * g + l]));
      scales[g] = amax / 31.f;
      max_scale = std::max(max_scale, scales[g]);
    }
    const float iscale = max_scale > 0 ? 127.f / max_scale : 0.f;
    for (int g = 0; g < 16; ++g)
      y[i].scales[g] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[g])));
    y[i].d = f32_to_f16(max_scale / 127.f);
    const float d = f16_to_f32(y[i].d);
    uint8_t L[QK_K];
    for (int g = 0; g < 16; ++g) {
      const float e = d * y[i].scales[g];
      for (int l = 0; l < 16; ++l) {
        const int q = e ? nearest_int(x[16 * g + l] / e) : 0;
        L[16 * g + l] = static_cast<uint8_t>(std::clamp(q, -32, 31) + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF;
        const uint8_t q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF;
        const uint8_t q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = q1 | static_cast<uint8_t>(q3 << 4);
        ql[l + 32] = q2 | static_cast<uint8_t>(q4 << 4);
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                     ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace

QuantFn ref_quant_fn(DType t) {
  switch (t) {
    case DType::F32: return q_f32;
    case DType::F16: return q_f16;
    case DType::BF16: return q_bf16;
    case DType::Q4_0: return q_q4_0;
    case DType::Q5_0: return q_q5_0;
    case DType::Q8_0: return q_q8_0;
    case DType::Q4_K: return q_q4_k;
    case DType::Q5_K: return q_q5_k;
    case DType::Q6_K: return q_q6_k;
    case DType::Q8_K: return q_q8_k;
    default: return nullptr;
  }
}

}  // namespace larql::quant::detail
