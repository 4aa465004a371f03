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
  simd_kernels().exp_shifted(x, m, x, n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  simd_kernels().gelu_tanh_mul(gate, up, out, n);
}

void axpy(float a, const float* x, float* y, int64_t n) { simd_kernels().axpy(a, x, y, n); }
float dot_f32(const float* x, const float* y, int64_t n) { return simd_kernels().dot(x, y, n); }

void Activations::reset(const float* x, int64_t n, int64_t cols) {
  x_ = x;
  n_ = n;
  cols_ = cols;
  q8_0_.ready = false;
  q8_k_.ready = false;
}

const quant::GemmActs& Activations::quantised(ThreadPool& pool, DType type) {
  Slot& s = type == DType::Q8_0 ? q8_0_ : q8_k_;
  if (s.ready) return s.acts;
  const auto rb = row_bytes(type, static_cast<uint64_t>(cols_));
  if (!rb || (type != DType::Q8_0 && type != DType::Q8_K))
    throw Error(ErrorKind::Unsupported, std::string("matmul: row length ") + std::to_string(cols_) +
                                            " is not a multiple of the " + dtype_name(type) + " block size");
  const size_t row_bytes = *rb;
  s.rows.resize(row_bytes * static_cast<size_t>(n_));
  quant::GemmActs& a = s.acts;
  a = quant::GemmActs{type, cols_, n_, s.rows.data(), row_bytes, nullptr, nullptr};
  const bool extras = type == DType::Q8_0;
  const int64_t nb = cols_ / 32;
  if (extras) {
    s.scale.resize(static_cast<size_t>(n_ * nb));
    s.sum.resize(static_cast<size_t>(n_ * nb));
  }
  auto work = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      quant::quantize_row(type, x_ + t * cols_, s.rows.data() + static_cast<size_t>(t) * row_bytes, cols_);
    if (extras) {
      quant::GemmActs part = a;
      part.rows = a.rows + static_cast<size_t>(t0) * row_bytes;
      part.n = t1 - t0;
      quant::prepare_gemm_acts(part, s.scale.data() + t0 * nb, s.sum.data() + t0 * nb);
    }
  };
  // Quantising is cheap per row: split only batches worth a thread meeting.
  if (n_ >= 8) {
    pool.parallel_for(n_, work);
  } else {
    work(0, n_);
  }
  if (extras) {
    a.scale = s.scale.data();
    a.sum = s.sum.data();
  }
  s.ready = true;
  return a;
}

namespace {

// Tokens from which the tiled kernels beat one row kernel call per (row, token).
constexpr int64_t kGemmMinTokens = 4;

// One row kernel call per (row, token): decode, short batches and types without a tiled kernel.
void matmul_rows(ThreadPool& pool, const TensorView& w, const uint8_t* act, size_t act_row_bytes,
                 int64_t n_tokens, float* y) {
  // Tile: a block of weight rows stays in L1 while every token's activation streams past it.
  constexpr int64_t kRowTile = 16;
  const quant::VecDotFn dot = quant::vec_dot_fn(w.type);
  const int64_t rows = w.rows, cols = w.cols;
  pool.parallel_for(
      rows,
      [&](int64_t r0, int64_t r1) {
        for (int64_t rb = r0; rb < r1; rb += kRowTile) {
          const int64_t re = std::min(r1, rb + kRowTile);
          for (int64_t t = 0; t < n_tokens; ++t) {
            const uint8_t* at = act + static_cast<size_t>(t) * act_row_bytes;
            float* yt = y + t * rows;
            for (int64_t r = rb; r < re; ++r) yt[r] = dot(cols, w.row(r), at);
          }
        }
      },
      kRowTile);
}

}  // namespace

void matmul(ThreadPool& pool, const TensorView& w, Activations& x, float* y) {
  const DType act_type = quant::vec_dot_type(w.type);
  const int64_t n_tokens = x.n(), rows = w.rows, cols = w.cols;
  if (x.cols() != cols)
    throw Error(ErrorKind::InvalidArgument, "matmul: activation rows have " + std::to_string(x.cols()) +
                                                " columns, the weight has " + std::to_string(cols));
  if (act_type == DType::F32) {
    matmul_rows(pool, w, reinterpret_cast<const uint8_t*>(x.x()), static_cast<size_t>(cols) * sizeof(float),
                n_tokens, y);
    return;
  }
  const quant::GemmActs& a = x.quantised(pool, act_type);
  if (n_tokens >= kGemmMinTokens && quant::gemm_supported(w.type)) {
    const int64_t panels = (rows + quant::kGemmRows - 1) / quant::kGemmRows;
    pool.parallel_for(panels, [&](int64_t p0, int64_t p1) {
      quant::gemm(w.type, cols, w.data, w.row_bytes, p0 * quant::kGemmRows,
                  std::min(rows, p1 * quant::kGemmRows), a, y, rows);
    });
    return;
  }
  matmul_rows(pool, w, a.rows, a.row_bytes, n_tokens, y);
}

void matmul(ThreadPool& pool, const TensorView& w, const float* x, int64_t n_tokens, float* y) {
  Activations a;
  a.reset(x, n_tokens, w.cols);
  matmul(pool, w, a, y);
}

}  // namespace larql::compute
