#include "compute/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compute/simd.h"
#include "quant/quant.h"
#include "util/error.h"

namespace larql::compute {

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * w[i];
}

void rmsnorm_rows(float* x, const float* w, int64_t rows, int64_t n, float eps) {
  for (int64_t r = 0; r < rows; ++r) rmsnorm(x + r * n, w, x + r * n, n, eps);
}

void rope_neox(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, double base,
               double freq_scale) {
  const int64_t half = head_dim / 2;
  float cs[512], sn[512];
  float* c = cs;
  float* s = sn;
  std::vector<float> big;
  if (half > 512) {
    big.resize(static_cast<size_t>(2 * half));
    c = big.data();
    s = big.data() + half;
  }
  const double p = static_cast<double>(pos) * freq_scale;
  for (int64_t i = 0; i < half; ++i) {
    const double theta = p * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    c[i] = static_cast<float>(std::cos(theta));
    s[i] = static_cast<float>(std::sin(theta));
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * c[i] - b * s[i];
      v[i + half] = a * s[i] + b * c[i];
    }
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
}

void axpy(float a, const float* x, float* y, int64_t n) { simd_kernels().axpy(a, x, y, n); }
float dot_f32(const float* x, const float* y, int64_t n) { return simd_kernels().dot(x, y, n); }

void matmul(ThreadPool& pool, const TensorView& w, const float* x, int64_t n_tokens, float* y) {
  const DType act_type = quant::vec_dot_type(w.type);
  const int64_t cols = w.cols;
  const void* act = x;
  size_t act_row_bytes = static_cast<size_t>(cols) * sizeof(float);
  std::vector<uint8_t> qbuf;
  if (act_type != DType::F32) {
    const auto rb = row_bytes(act_type, static_cast<uint64_t>(cols));
    if (!rb) {
      throw Error(ErrorKind::Unsupported, std::string("matmul: row length ") + std::to_string(cols) +
                                              " is not a multiple of the " + dtype_name(act_type) +
                                              " block size");
    }
    act_row_bytes = *rb;
    qbuf.resize(act_row_bytes * static_cast<size_t>(n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t)
      quant::quantize_row(act_type, x + t * cols, qbuf.data() + t * act_row_bytes, cols);
    act = qbuf.data();
  }
  const uint8_t* a = static_cast<const uint8_t*>(act);
  // Tile: a block of weight rows stays in L1 while every token's activation streams past it.
  constexpr int64_t kRowTile = 16;
  // Prefill: 4/5-bit rows are re-encoded losslessly as Q8_0 once per tile and reused for every
  // token (the Q8_0 kernel is much faster than unpacking nibbles per token).
  constexpr int64_t kRepackMinTokens = 4;
  const bool repack = n_tokens >= kRepackMinTokens && (w.type == DType::Q4_0 || w.type == DType::Q5_0);
  const quant::VecDotFn dot = quant::vec_dot_fn(repack ? DType::Q8_0 : w.type);
  const quant::VecDot4Fn dot4 = quant::vec_dot4_fn(repack ? DType::Q8_0 : w.type);
  const size_t q8_row_bytes = repack ? *row_bytes(DType::Q8_0, static_cast<uint64_t>(cols)) : 0;
  const int64_t rows = w.rows;
  pool.parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        thread_local std::vector<uint8_t> tile;
        if (repack && tile.size() < q8_row_bytes * kRowTile) tile.resize(q8_row_bytes * kRowTile);
        for (int64_t rb = r0; rb < r1; rb += kRowTile) {
          const int64_t re = std::min(r1, rb + kRowTile);
          if (repack)
            for (int64_t r = rb; r < re; ++r)
              quant::repack_to_q8_0(w.type, w.row(r), tile.data() + (r - rb) * q8_row_bytes, cols);
          int64_t t = 0;
          if (dot4 != nullptr) {
            float o[4];
            for (; t + 4 <= n_tokens; t += 4) {
              const void* at4[4];
              for (int k = 0; k < 4; ++k) at4[k] = a + static_cast<size_t>(t + k) * act_row_bytes;
              for (int64_t r = rb; r < re; ++r) {
                dot4(cols, repack ? tile.data() + (r - rb) * q8_row_bytes : w.row(r), at4, o);
                for (int k = 0; k < 4; ++k) y[(t + k) * rows + r] = o[k];
              }
            }
          }
          for (; t < n_tokens; ++t) {
            const uint8_t* at = a + static_cast<size_t>(t) * act_row_bytes;
            float* yt = y + t * rows;
            if (repack) {
              for (int64_t r = rb; r < re; ++r) yt[r] = dot(cols, tile.data() + (r - rb) * q8_row_bytes, at);
            } else {
              for (int64_t r = rb; r < re; ++r) yt[r] = dot(cols, w.row(r), at);
            }
          }
        }
      },
      kRowTile);
}

}  // namespace larql::compute
