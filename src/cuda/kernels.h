// The CUDA backend's kernels, as host-callable launchers on a stream (src/cuda/kernels.cu).
// Shapes are row-major; "rows" of activations are tokens (or sequences in a batched decode).
// Every launcher checks nothing but launches; cuda_model.cu checks its arguments once.
// docs/backends.md "Kernels" describes each and the formula it follows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "util/dtype.h"

namespace larql::cuda {

/// A weight in device memory: `rows` rows of `cols` values in the device layout of `type`
/// (cuda/blocks.h), each row_bytes long.
struct DevWeight {
  DType type = DType::F32;
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
  const uint8_t* data = nullptr;
};

/// Where each row's K/V lives for attention: row r uses base[per_row ? r : 0] (a layer's cache,
/// [capacity, kv_dim] f32) and position pos[per_row ? r : 0] + (per_row ? 0 : r).
struct KvRows {
  float* const* k = nullptr;
  float* const* v = nullptr;
  const int32_t* pos = nullptr;
  int per_row = 0;
};

/// x [n, cols] = table[tokens[r]] * scale (tokens: device ids, already checked in range).
void embed(cudaStream_t s, const DevWeight& table, const int32_t* tokens, int n, float scale, float* x);

/// y [n, H] = RMSNorm(x) * w (w null: no weight). eps as the model's. Zhang & Sennrich 2019.
void rmsnorm(cudaStream_t s, const float* x, const float* w, float* y, int n, int H, float eps);

/// In place on x [n, H]: x += post(o), post = RMSNorm * post_w (post_w null: o as is); then, when
/// next_w is not null, y = RMSNorm(x) * next_w (the next block's input norm).
void add_norm(cudaStream_t s, float* x, const float* o, const float* post_w, const float* next_w, float* y, int n,
              int H, float eps);

/// out [n, W.rows] = x [n, W.cols] · W^T (+ bias [W.rows] when not null); with `softcap` > 0,
/// cap * tanh(v / cap). Decoding GEMV: n <= 16 (splits larger n itself).
void gemv(cudaStream_t s, const DevWeight& W, const float* x, int n, float* out, const float* bias = nullptr,
          float softcap = 0);

/// out [n, G.rows] = act(x · G^T) * (x · U^T): the gated FFN's first half in one pass (act:
/// gelu_tanh when gelu, else silu). G and U have one shape and type.
void gemv_gated(cudaStream_t s, const DevWeight& G, const DevWeight& U, const float* x, int n, float* out, bool gelu);

/// W as f16 [W.rows, W.cols] into dst (the tensor-core GEMM's input).
void dequant_f16(cudaStream_t s, const DevWeight& W, void* dst);
/// dst [n] f16 = src [n] f32.
void to_f16(cudaStream_t s, const float* src, void* dst, int64_t n);
/// C [n, m] f32 = A [n, k] f16 · B [m, k]^T f16 (+ bias [m] when not null); k a multiple of 32.
/// Tensor cores (WMMA, f32 accumulate).
void gemm_f16(cudaStream_t s, const void* A, const void* B, int n, int m, int k, float* C, const float* bias = nullptr);
/// out [n] = act(gate) * up.
void gated_act(cudaStream_t s, const float* gate, const float* up, float* out, int64_t n, bool gelu);

/// Per row r of q [n, n_heads*hd] and k, v [n, n_kv*hd]: RMSNorm per head (q_norm/k_norm when not
/// null), RoPE at the row's position (NeoX halves, or adjacent pairs), in place on q; k and v are
/// written into the row's cache at its position.
struct RopeParams {
  int n_heads = 0, n_kv = 0, hd = 0;
  double base = 10000, freq_scale = 1, mscale = 1;
  const float* factors = nullptr;  ///< device [hd/2] or null
  bool adjacent = false;
  float eps = 1e-6f;
};
void qk_rope_store(cudaStream_t s, float* q, const float* k, const float* v, const float* q_norm, const float* k_norm,
                   int n, const RopeParams& p, const KvRows& kv);

struct AttnParams {
  int n_heads = 0, n_kv = 0, hd = 0;
  int window = 0;  ///< sliding window (0 = none): keys p - window + 1 .. p
  float scale = 1, softcap = 0;
};
/// Decode attention (flash-decoding, Dao et al. 2023): n query rows q [n, n_heads*hd], each at
/// its own position over its own cache (kv), keys split into chunks of kAttnSplit; out [n,
/// n_heads*hd]. `splits` = chunks launched per row (>= ceil((max pos + 1) / kAttnSplit));
/// part: n * n_heads * splits * (hd + 2) floats of scratch.
inline constexpr int kAttnSplit = 128;
void attend_decode(cudaStream_t s, const float* q, int n, const KvRows& kv, const AttnParams& p, int splits, float* part,
                   float* out);

/// Prefill attention of n consecutive queries of one sequence at positions pos0.. over its
/// layer cache k, v [capacity, kv_dim] (causal, sliding window): tiles of 32 queries x 32 keys,
/// online softmax (Milakov & Gimelshein 2018). out [n, n_heads*hd].
void attend_prefill(cudaStream_t s, const float* q, int n, int pos0, const float* k, const float* v, const AttnParams& p,
                    float* out);

/// Once per process before the kernels run: raises the prefill attention's shared-memory limit.
void prepare_kernels();

/// out[r] = the lowest index of the largest of x [n, m]'s row r; part: scratch of
/// 2 * n * kArgmaxBlocks values.
inline constexpr int kArgmaxBlocks = 128;
void argmax_rows(cudaStream_t s, const float* x, int n, int m, void* part, int32_t* out);

}  // namespace larql::cuda
