// Scalar reference vec_dot kernels. Integer math per block as in ggml-quants.c
// ggml_vec_dot_*_q8_0 / *_q8_K (generic versions): the int32 block sum is exact, then scaled by
// the product of the two block scales and accumulated in float.
#include <cstring>

#include "quant/blocks.h"
#include "quant/kernels.h"
#include "util/half.h"

namespace larql::quant::detail {
namespace {

float dot_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

float dot_f16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const float*>(a);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, x + 2 * i, 2);
    s += f16_to_f32(h) * y[i];
  }
  return s;
}

float dot_bf16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const float*>(a);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, x + 2 * i, 2);
    s += bf16_to_f32(h) * y[i];
  }
  return s;
}

// Types without an integer kernel: dequantise a chunk at a time, then dot with f32 activations.
template <DType T>
float dot_dequant(int64_t n, const void* w, const void* a) {
  constexpr int64_t kChunk = 1024;  // a multiple of every block size (32, 256)
  const auto& info = dtype_info(T);
  const DequantFn deq = ref_dequant_fn(T);
  const auto* x = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const float*>(a);
  float buf[kChunk];
  float s = 0.0f;
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = n - i < kChunk ? n - i : kChunk;
    deq(x + i / info.block_size * info.type_size, buf, len);
    for (int64_t j = 0; j < len; ++j) s += buf[j] * y[i + j];
  }
  return s;
}

float dot_q4_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < QK8_0 / 2; ++j) {
      const int v0 = (x[ib].qs[j] & 0x0F) - 8;
      const int v1 = (x[ib].qs[j] >> 4) - 8;
      sumi0 += v0 * y[ib].qs[j];
      sumi1 += v1 * y[ib].qs[j + QK8_0 / 2];
    }
    sumf += (sumi0 + sumi1) * (f16_to_f32(x[ib].d) * f16_to_f32(y[ib].d));
  }
  return sumf;
}

float dot_q5_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
    uint32_t qh;
    std::memcpy(&qh, x[ib].qh, sizeof(qh));
    int sumi0 = 0, sumi1 = 0;
    for (int j = 0; j < QK8_0 / 2; ++j) {
      const uint8_t xh_0 = ((qh & (1u << (j + 0))) >> (j + 0)) << 4;
      const uint8_t xh_1 = ((qh & (1u << (j + 16))) >> (j + 12));
      const int32_t x0 = static_cast<int8_t>(((x[ib].qs[j] & 0x0F) | xh_0) - 16);
      const int32_t x1 = static_cast<int8_t>(((x[ib].qs[j] >> 4) | xh_1) - 16);
      sumi0 += x0 * y[ib].qs[j];
      sumi1 += x1 * y[ib].qs[j + QK8_0 / 2];
    }
    sumf += (sumi0 + sumi1) * (f16_to_f32(x[ib].d) * f16_to_f32(y[ib].d));
  }
  return sumf;
}

float dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
    int sumi = 0;
    for (int j = 0; j < QK8_0; ++j) sumi += x[ib].qs[j] * y[ib].qs[j];
    sumf += sumi * (f16_to_f32(x[ib].d) * f16_to_f32(y[ib].d));
  }
  return sumf;
}

// Q4_K x Q8_K: sum_i d*yd * sum_j sc_j (q4 . q8)_j  -  dmin*yd * sum_j m_j * bsum_j.
float dot_q4_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4K*>(w);
  const auto* y = static_cast<const BlockQ8K*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const uint8_t* q4 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      get_scale_min_k4(j, x[i].scales, &sc, &m);
      const int shift = (j & 1) * 4;
      const uint8_t* qq = q4 + 32 * (j / 2);
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) s += ((qq[l] >> shift) & 0xF) * q8[32 * j + l];
      sumi += sc * s;
      summ += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    const float d = y[i].d * f16_to_f32(x[i].d);
    const float dmin = y[i].d * f16_to_f32(x[i].dmin);
    sumf += d * sumi - dmin * summ;
  }
  return sumf;
}

float dot_q5_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5K*>(w);
  const auto* y = static_cast<const BlockQ8K*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const int8_t* q8 = y[i].qs;
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      get_scale_min_k4(j, x[i].scales, &sc, &m);
      const int shift = (j & 1) * 4;
      const uint8_t* ql = x[i].qs + 32 * (j / 2);
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) {
        const int q = ((ql[l] >> shift) & 0xF) | (((x[i].qh[l] >> j) & 1) << 4);
        s += q * q8[32 * j + l];
      }
      sumi += sc * s;
      summ += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    const float d = y[i].d * f16_to_f32(x[i].d);
    const float dmin = y[i].d * f16_to_f32(x[i].dmin);
    sumf += d * sumi - dmin * summ;
  }
  return sumf;
}

// Q6_K x Q8_K: sum_i d*yd * sum_g sc_g * sum_l (q6 - 32) * q8 over 16-element groups g.
float dot_q6_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6K*>(w);
  const auto* y = static_cast<const BlockQ8K*>(a);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int8_t q[QK_K];
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        q[128 * h + l + 0] = static_cast<int8_t>(((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        q[128 * h + l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        q[128 * h + l + 64] = static_cast<int8_t>(((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        q[128 * h + l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int32_t sumi = 0;
    for (int g = 0; g < 16; ++g) {
      int32_t s = 0;
      for (int l = 0; l < 16; ++l) s += q[16 * g + l] * y[i].qs[16 * g + l];
      sumi += x[i].scales[g] * s;
    }
    sumf += f16_to_f32(x[i].d) * y[i].d * sumi;
  }
  return sumf;
}

DotTable make_table() {
  DotTable t;
  auto set = [&](DType d, VecDotFn f) { t.dot[static_cast<int>(d)] = f; };
  set(DType::F32, dot_f32);
  set(DType::F16, dot_f16);
  set(DType::BF16, dot_bf16);
  set(DType::Q4_0, dot_q4_0);
  set(DType::Q5_0, dot_q5_0);
  set(DType::Q8_0, dot_q8_0);
  set(DType::Q4_K, dot_q4_k);
  set(DType::Q5_K, dot_q5_k);
  set(DType::Q6_K, dot_q6_k);
  set(DType::Q4_1, dot_dequant<DType::Q4_1>);
  set(DType::Q5_1, dot_dequant<DType::Q5_1>);
  set(DType::Q8_K, dot_dequant<DType::Q8_K>);
  return t;
}

}  // namespace

const DotTable& ref_dot_table() {
  static const DotTable t = make_table();
  return t;
}

}  // namespace larql::quant::detail
