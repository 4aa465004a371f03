// CPU compute primitives used by the layer functions. Shapes are row-major; sizes in elements.
#pragma once

#include <cstdint>
#include <vector>

#include "compute/tensor.h"
#include "util/thread_pool.h"

namespace larql::compute {

/// RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x^2) + eps) * w, over n elements.
/// `w` is the full multiplier (Gemma's 1 + w already folded in). Sum of squares in double.
/// In-place allowed (y == x).
void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps);

/// RMSNorm applied to each of `rows` rows of length n (e.g. per head for q/k-norm).
void rmsnorm_rows(float* x, const float* w, int64_t rows, int64_t n, float eps);

/// Rotary position embedding, NeoX/split-half pairing (dimension i rotates with i + d/2),
/// as in Su et al. 2021 "RoFormer" and HF's rotate_half. Applied in place to `n_heads` heads of
/// `head_dim` values at absolute position `pos`.
/// theta_i = (pos * freq_scale) * base^(-2i/head_dim); freq_scale = 1/factor for linear scaling.
/// Angles are computed in double, then rounded to float.
void rope_neox(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, double base,
               double freq_scale);

/// Numerically stable softmax in place over n values (max subtracted; sum in double).
void softmax(float* x, int64_t n);

/// GELU, tanh approximation (Hendrycks & Gimpel 2016):
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
float gelu_tanh(float x);

/// out[i] = gelu_tanh(gate[i]) * up[i] for n values.
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n);

/// y[i] += a * x[i]
void axpy(float a, const float* x, float* y, int64_t n);
/// sum x[i] * y[i] (f32 accumulate, SIMD)
float dot_f32(const float* x, const float* y, int64_t n);

/// Y[t, r] = sum_c W[r, c] * X[t, c] for t < n_tokens, r < W.rows.
/// X: [n_tokens, W.cols] f32, Y: [n_tokens, W.rows] f32. X is quantised once to the weight's
/// activation format (quant::vec_dot_type), then rows are split across the pool.
/// Errors: Error{Unsupported} if W.type has no kernel.
void matmul(ThreadPool& pool, const TensorView& w, const float* x, int64_t n_tokens, float* y);

}  // namespace larql::compute
