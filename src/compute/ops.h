// CPU compute primitives used by the layer functions. Shapes are row-major; sizes in elements.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "compute/tensor.h"
#include "quant/gemm.h"
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
/// theta_i = (pos * freq_scale) * base^(-2i/head_dim) / factors[i]; freq_scale = 1/factor for
/// linear scaling; `factors` ([head_dim / 2], or nullptr for all 1) are per-frequency divisors
/// (Llama 3.1's rope_freqs, Phi-3's LongRoPE factors; llama.cpp ggml_rope_ext's freq_factors);
/// cos and sin are multiplied by `mscale` (LongRoPE's attention factor; ggml's attn_factor).
/// Angles are computed in double, then rounded to float; positions below 8192 are served from a
/// per-thread table of those same values (filled once per base, scale, head_dim and factors).
void rope_neox(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, double base, double freq_scale,
               const float* factors = nullptr, double mscale = 1.0);

/// x[r * n + i] += b[i] for r in [0, rows), i in [0, n): a bias added to each row.
void add_bias_rows(float* x, const float* b, int64_t rows, int64_t n);

/// Rotary position embedding, adjacent-pair form (dimension 2i rotates with 2i + 1), as in Su et
/// al. 2021 eq. 34 and Meta's Llama reference (complex pairs), llama.cpp's LLAMA_ROPE_TYPE_NORM.
/// Same angles as rope_neox: theta_i = (pos * freq_scale) * base^(-2i/head_dim) / factors[i], and the same
/// per-thread table. In place on `n_heads` heads of `head_dim` (even) values:
///   x'[2i] = x[2i] cos theta_i - x[2i+1] sin theta_i;  x'[2i+1] = x[2i] sin theta_i + x[2i+1] cos theta_i.
void rope_adjacent(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, double base, double freq_scale,
                   const float* factors = nullptr, double mscale = 1.0);

/// Numerically stable softmax in place over n values (max subtracted; exp by the SIMD Cephes
/// polynomial, ~1 ulp; sum in double, in a fixed order for a given n).
void softmax(float* x, int64_t n);

/// The unnormalised half of softmax, in place over n >= 1 values: x[i] = exp(x[i] - mx) with
/// mx = max x (the same SIMD exp as softmax); returns mx and float(sum of the new x[i]), summed
/// in double in softmax's order. compute::attend_chunk's per-chunk step.
struct ExpSum {
  float max;
  float sum;
};
ExpSum exp_shifted_sum(float* x, int64_t n);

/// GELU, tanh approximation (Hendrycks & Gimpel 2016):
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
float gelu_tanh(float x);

/// out[i] = gelu_tanh(gate[i]) * up[i] for n values, vectorised: gelu_tanh evaluated as
/// x / (1 + exp(-2u)) with the SIMD exp (the same function; within ~2e-7 relative of
/// gelu_tanh). Each output depends on its own inputs alone (not on n or its position).
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n);
/// The same, split across the pool for long inputs (prefill); identical outputs.
void gelu_tanh_mul(ThreadPool& pool, const float* gate, const float* up, float* out, int64_t n);

/// SiLU (Elfwing et al. 2018; "swish" in Ramachandran et al. 2017): x / (1 + exp(-x)).
float silu(float x);

/// out[i] = silu(gate[i]) * up[i] for n values (the SwiGLU FFN of Shazeer 2020, "GLU Variants
/// Improve Transformer"), vectorised with the SIMD exp (within ~2e-7 relative of silu). Each
/// output depends on its own inputs alone.
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
/// The same, split across the pool for long inputs (prefill); identical outputs.
void silu_mul(ThreadPool& pool, const float* gate, const float* up, float* out, int64_t n);

/// y[i] += a * x[i]
void axpy(float a, const float* x, float* y, int64_t n);
/// sum x[i] * y[i] (f32 accumulate, SIMD)
float dot_f32(const float* x, const float* y, int64_t n);
/// out[r] = dot_f32(x + r * n, y, n) for r < rows, each bit for bit dot_f32's; y is loaded once
/// for up to 4 rows (the heads of a K/V group against one key).
void dot_f32_rows(const float* x, int64_t rows, const float* y, int64_t n, float* out);
/// axpy(a[r], x, y + r * n, n) for r < rows, each bit for bit; x is loaded once for up to 4 rows.
void axpy_rows(const float* a, const float* x, float* y, int64_t rows, int64_t n);
/// y[t][r] = sum_i x[t][i] w[r][i]: x [n][k], w [rows][k], y [n][rows], all f32 row-major
/// (Y = X W^T, a layer's f32 weight applied to n tokens). Each element is summed in dot_f32's
/// AVX2 order (its bits at AVX2 and above; the scalar table emulates that order), so a token's row
/// is the same bits whatever other tokens are in the batch and whatever the ISA. AVX-512 tiles
/// when it is active. Split over the pool by blocks of rows of w.
void gemm_f32_nt(ThreadPool& pool, const float* x, int64_t n, const float* w, int64_t rows, int64_t k, float* y);
/// y[t][i] += sum_o a[t][o] w[o][i]: a [n][rows], w [rows][cols], y [n][cols] f32 row-major
/// (Y += A W, the transpose of gemm_f32_nt's product: a backward pass through w). Per element
/// one fused multiply-add per o in order, whatever n or the ISA. Split over the pool by blocks of
/// columns, each packed before use.
void gemm_f32_nn_acc(ThreadPool& pool, const float* a, int64_t n, const float* w, int64_t rows, int64_t cols, float* y);
/// Which f32 kernels (axpy, dot_f32, softmax's exp, GELU, norms) the active ISA
/// (quant::active_isa(), read at each call) selects: "avx2" (AVX2 or above) or "scalar".
const char* simd_variant();

/// Activation rows for matmul: x [n, cols] f32 and its 8-bit quantisations (quant::vec_dot_type
/// of the weights: Q8_0 or Q8_K), each made on first use and reused by every matmul on the same
/// input, so q/k/v (and gate/up) quantise their shared input once. reset() keeps the buffers, so a
/// reused object allocates nothing once it has seen its largest input. `x` must stay valid and
/// unchanged until the next reset().
class Activations {
 public:
  void reset(const float* x, int64_t n, int64_t cols);
  const float* x() const { return x_; }
  int64_t n() const { return n_; }
  int64_t cols() const { return cols_; }
  /// The rows quantised to `type` (Q8_0 or Q8_K; rows split across the pool), with the extras
  /// the tiled kernels need. Errors: Error{Unsupported} if cols is not a multiple of the
  /// format's block size.
  const quant::GemmActs& quantised(ThreadPool& pool, DType type);

 private:
  struct Slot {
    bool ready = false;
    std::vector<uint8_t> rows;
    std::vector<float> scale;
    std::vector<int32_t> sum;
    quant::GemmActs acts;
  };
  const float* x_ = nullptr;
  int64_t n_ = 0, cols_ = 0;
  Slot q8_0_, q8_k_;
};

/// Y[t, r] = sum_c W[r, c] * X[t, c] for t < n_tokens, r < W.rows.
/// X: [n_tokens, W.cols] f32, Y: [n_tokens, W.rows] f32. X is quantised once to the weight's
/// activation format (quant::vec_dot_type), then rows are split across the pool. With several
/// tokens and a tiled kernel for W.type (quant/gemm.h) the rows go through it in panels; every
/// output is bit-identical to the one-token path, so batching never changes a result, and the
/// split across threads never changes one either.
/// Errors: Error{Unsupported} if W.type has no kernel.
void matmul(ThreadPool& pool, const TensorView& w, const float* x, int64_t n_tokens, float* y);

/// As above, for activations shared between several weights (quantised once).
void matmul(ThreadPool& pool, const TensorView& w, Activations& x, float* y);

/// One weight of matmul_many and where its output goes ([x.n(), w.rows]).
struct MatmulOut {
  const TensorView& w;
  float* y;
};
/// Several weights reading the same input (q/k/v; gate/up) in one pass over the pool: one thread
/// meeting instead of one per weight; every output exactly as matmul() gives it. At most 8.
/// Errors: as matmul, raised before any work starts.
void matmul_many(ThreadPool& pool, Activations& x, std::initializer_list<MatmulOut> outs);

}  // namespace larql::compute
