// Scalar reference dequantisation, one function per ggml block format.
// Each follows ggml-quants.c dequantize_row_* (same float operation order, so results equal
// ggml's and the `gguf` Python package's bit for bit).
#include <cstring>

#include "quant/blocks.h"
#include "quant/kernels.h"
#include "util/half.h"

namespace larql::quant::detail {
namespace {

void deq_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void deq_f16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, h + 2 * i, 2);
    dst[i] = f16_to_f32(v);
  }
}

void deq_bf16(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, h + 2 * i, 2);
    dst[i] = bf16_to_f32(v);
  }
}

void deq_q4_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / QK4_0; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const int x0 = (x[i].qs[j] & 0x0F) - 8;
      const int x1 = (x[i].qs[j] >> 4) - 8;
      y[i * QK4_0 + j] = x0 * d;
      y[i * QK4_0 + j + QK4_0 / 2] = x1 * d;
    }
  }
}

void deq_q4_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / QK4_1; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const int x0 = x[i].qs[j] & 0x0F;
      const int x1 = x[i].qs[j] >> 4;
      y[i * QK4_1 + j] = x0 * d + m;
      y[i * QK4_1 + j + QK4_1 / 2] = x1 * d + m;
    }
  }
}

void deq_q5_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / QK5_0; ++i) {
    const float d = f16_to_f32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
      const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
      const int32_t x0 = ((x[i].qs[j] & 0x0F) | xh_0) - 16;
      const int32_t x1 = ((x[i].qs[j] >> 4) | xh_1) - 16;
      y[i * QK5_0 + j] = x0 * d;
      y[i * QK5_0 + j + QK5_0 / 2] = x1 * d;
    }
  }
}

void deq_q5_1(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / QK5_1; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
      const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
      const int x0 = (x[i].qs[j] & 0x0F) | xh_0;
      const int x1 = (x[i].qs[j] >> 4) | xh_1;
      y[i * QK5_1 + j] = x0 * d + m;
      y[i * QK5_1 + j + QK5_1 / 2] = x1 * d + m;
    }
  }
}

void deq_q8_0(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / QK8_0; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < QK8_0; ++j) y[i * QK8_0 + j] = x[i].qs[j] * d;
  }
}

void deq_q4_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ4K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = f16_to_f32(x[i].d);
    const float min = f16_to_f32(x[i].dmin);
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < QK_K; j += 64) {
      get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

void deq_q5_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ5K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = f16_to_f32(x[i].d);
    const float min = f16_to_f32(x[i].dmin);
    int is = 0;
    uint8_t sc, m;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < QK_K; j += 64) {
      get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}

void deq_q6_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ6K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = f16_to_f32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n128 = 0; n128 < QK_K; n128 += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void deq_q8_k(const void* src, float* y, int64_t n) {
  const auto* x = static_cast<const BlockQ8K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i)
    for (int j = 0; j < QK_K; ++j) *y++ = x[i].d * x[i].qs[j];
}

}  // namespace

DequantFn ref_dequant_fn(DType t) {
  switch (t) {
    case DType::F32: return deq_f32;
    case DType::F16: return deq_f16;
    case DType::BF16: return deq_bf16;
    case DType::Q4_0: return deq_q4_0;
    case DType::Q4_1: return deq_q4_1;
    case DType::Q5_0: return deq_q5_0;
    case DType::Q5_1: return deq_q5_1;
    case DType::Q8_0: return deq_q8_0;
    case DType::Q4_K: return deq_q4_k;
    case DType::Q5_K: return deq_q5_k;
    case DType::Q6_K: return deq_q6_k;
    case DType::Q8_K: return deq_q8_k;
    default: return nullptr;
  }
}

}  // namespace larql::quant::detail
