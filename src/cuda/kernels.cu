// The CUDA backend's kernels (declared and documented in cuda/kernels.h).
#include <cuda_fp16.h>
#include <mma.h>

#include <cfloat>
#include <climits>
#include <cmath>

#include "cuda/blocks.h"
#include "cuda/kernels.h"

namespace larql::cuda {

namespace {

// Calls body with the weight type as a compile-time constant TT.
#define LARQL_DISPATCH(t, ...)                                   \
  switch (t) {                                                   \
    case DType::F32: { constexpr DType TT = DType::F32; __VA_ARGS__; break; }   \
    case DType::F16: { constexpr DType TT = DType::F16; __VA_ARGS__; break; }   \
    case DType::BF16: { constexpr DType TT = DType::BF16; __VA_ARGS__; break; } \
    case DType::Q8_0: { constexpr DType TT = DType::Q8_0; __VA_ARGS__; break; } \
    case DType::Q5_0: { constexpr DType TT = DType::Q5_0; __VA_ARGS__; break; } \
    case DType::Q4_K: { constexpr DType TT = DType::Q4_K; __VA_ARGS__; break; } \
    case DType::Q6_K: { constexpr DType TT = DType::Q6_K; __VA_ARGS__; break; } \
    default: break;                                              \
  }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum of v over the block (blockDim.x a multiple of 32, <= 1024); every thread gets it.
__device__ double block_sum_d(double v) {
  __shared__ double part[32];
  __shared__ double total;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum_d(v);
  __syncthreads();  // part/total may still be read from a previous call
  if (lane == 0) part[w] = v;
  __syncthreads();
  if (w == 0) {
    double s = lane < nw ? part[lane] : 0.0;
    s = warp_sum_d(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

// The CPU's gelu_tanh and silu (compute/simd.cc), element for element.
__device__ __forceinline__ float gelu_tanh(float x) {
  const float m2u = -2.0f * 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + (m2u > 88.0f ? INFINITY : expf(m2u)));
}
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// ---- embedding --------------------------------------------------------------------------

template <DType T>
__global__ void embed_k(const uint8_t* table, size_t row_bytes, int64_t cols, const int32_t* tokens, float scale,
                        float* x) {
  const int r = blockIdx.x;
  const uint8_t* row = table + static_cast<size_t>(tokens[r]) * row_bytes;
  float* out = x + static_cast<int64_t>(r) * cols;
  float w[kUnit];
  for (int64_t u = threadIdx.x; u < cols / kUnit; u += blockDim.x) {
    decode_unit<T>(row, cols, u, w);
#pragma unroll
    for (int i = 0; i < kUnit; ++i) out[u * kUnit + i] = w[i] * scale;
  }
}

// ---- norms ----------------------------------------------------------------------------------

__device__ __forceinline__ float rms_scale(double ss, int H, float eps) {
  return static_cast<float>(1.0 / sqrt(ss / static_cast<double>(H) + static_cast<double>(eps)));
}

__global__ void rmsnorm_k(const float* x, const float* w, float* y, int H, float eps) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * H;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * H;
  double ss = 0;
  for (int i = threadIdx.x; i < H; i += blockDim.x) ss += static_cast<double>(xr[i]) * xr[i];
  const float sc = rms_scale(block_sum_d(ss), H, eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x) yr[i] = w ? xr[i] * sc * w[i] : xr[i] * sc;
}

__global__ void add_norm_k(float* x, const float* o, const float* post_w, const float* next_w, float* y, int H,
                           float eps) {
  const int64_t off = static_cast<int64_t>(blockIdx.x) * H;
  float* xr = x + off;
  const float* orow = o + off;
  float sc = 1;
  if (post_w) {
    double ss = 0;
    for (int i = threadIdx.x; i < H; i += blockDim.x) ss += static_cast<double>(orow[i]) * orow[i];
    sc = rms_scale(block_sum_d(ss), H, eps);
  }
  double ss2 = 0;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    const float add = post_w ? orow[i] * sc * post_w[i] : orow[i];
    const float v = xr[i] + add;
    xr[i] = v;
    ss2 += static_cast<double>(v) * v;
  }
  if (!next_w) return;
  const float sc2 = rms_scale(block_sum_d(ss2), H, eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x) y[off + i] = xr[i] * sc2 * next_w[i];
}

// ---- decoding GEMV ----------------------------------------------------------------------------

constexpr int kGemvWarps = 8;  // one output row per warp

// MODE 0: plain (+bias, softcap); 1: gated gelu_tanh; 2: gated silu. A warp per output row; lane
// l decodes the eighth l % 4 of unit l / 4 of each group of 8 units, so the warp's weight and
// activation loads are contiguous (256 values per step).
template <int NR>
__device__ __forceinline__ void dot8(const float* w, const float* x, int64_t cols, int64_t off, float* acc) {
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    const float4* xv = reinterpret_cast<const float4*>(x + r * cols + off);
    const float4 a = __ldg(xv), b = __ldg(xv + 1);
    float s = w[0] * a.x;
    s = fmaf(w[1], a.y, s);
    s = fmaf(w[2], a.z, s);
    s = fmaf(w[3], a.w, s);
    s = fmaf(w[4], b.x, s);
    s = fmaf(w[5], b.y, s);
    s = fmaf(w[6], b.z, s);
    s = fmaf(w[7], b.w, s);
    acc[r] += s;
  }
}

template <DType T, int NR, int MODE>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_k(const uint8_t* W, const uint8_t* U, size_t row_bytes, int64_t rows, int64_t cols, const float* x,
           float* out, const float* bias, float softcap) {
  const int lane = threadIdx.x & 31, sub = lane >> 2, part = lane & 3;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int64_t units = cols / kUnit;
  float acc[NR], acc2[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) acc[r] = acc2[r] = 0.f;
  const uint8_t* wr = W + static_cast<size_t>(row) * row_bytes;
  const uint8_t* ur = MODE ? U + static_cast<size_t>(row) * row_bytes : nullptr;
  float w[8];
#pragma unroll 2
  for (int64_t u = sub; u < units; u += 8) {
    const int64_t off = u * kUnit + part * 8;
    decode8<T>(wr, cols, u, part, w);
    dot8<NR>(w, x, cols, off, acc);
    if constexpr (MODE != 0) {
      decode8<T>(ur, cols, u, part, w);
      dot8<NR>(w, x, cols, off, acc2);
    }
  }
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    float v = warp_sum(acc[r]);
    if constexpr (MODE != 0) {
      const float up = warp_sum(acc2[r]);
      v = (MODE == 1 ? gelu_tanh(v) : silu(v)) * up;
    }
    if (lane == 0) {
      if (bias) v += bias[row];
      if (softcap > 0) v = softcap * tanhf(v / softcap);
      out[r * rows + row] = v;
    }
  }
}

template <int NR, int MODE>
void launch_gemv(cudaStream_t s, const DevWeight& W, const DevWeight* U, const float* x, float* out, const float* bias,
                 float softcap) {
  const dim3 grid(static_cast<unsigned>((W.rows + kGemvWarps - 1) / kGemvWarps));
  LARQL_DISPATCH(W.type, gemv_k<TT, NR, MODE><<<grid, kGemvWarps * 32, 0, s>>>(
                             W.data, U ? U->data : nullptr, W.row_bytes, W.rows, W.cols, x, out, bias, softcap))
}

template <int MODE>
void gemv_rows(cudaStream_t s, const DevWeight& W, const DevWeight* U, const float* x, int n, float* out,
               const float* bias, float softcap) {
  // Chunks of 16, 8, 4, 2, 1 rows; each chunk's outputs are [nr, W.rows] at its own offset.
  int r = 0;
  while (r < n) {
    const int left = n - r;
    const float* xr = x + static_cast<int64_t>(r) * W.cols;
    float* orow = out + static_cast<int64_t>(r) * W.rows;
    if (left >= 16) {
      launch_gemv<16, MODE>(s, W, U, xr, orow, bias, softcap);
      r += 16;
    } else if (left >= 8) {
      launch_gemv<8, MODE>(s, W, U, xr, orow, bias, softcap);
      r += 8;
    } else if (left >= 4) {
      launch_gemv<4, MODE>(s, W, U, xr, orow, bias, softcap);
      r += 4;
    } else if (left >= 2) {
      launch_gemv<2, MODE>(s, W, U, xr, orow, bias, softcap);
      r += 2;
    } else {
      launch_gemv<1, MODE>(s, W, U, xr, orow, bias, softcap);
      r += 1;
    }
  }
}

// ---- tensor-core GEMM for prefill --------------------------------------------------------------

template <DType T>
__global__ void dequant_f16_k(const uint8_t* W, size_t row_bytes, int64_t rows, int64_t cols, __half* dst) {
  const int64_t units = cols / kUnit;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * units) return;
  const int64_t row = idx / units, u = idx % units;
  float w[kUnit];
  decode_unit<T>(W + static_cast<size_t>(row) * row_bytes, cols, u, w);
  __half2* out = reinterpret_cast<__half2*>(dst + row * cols + u * kUnit);
#pragma unroll
  for (int i = 0; i < kUnit / 2; ++i) out[i] = __floats2half2_rn(w[2 * i], w[2 * i + 1]);
}

__global__ void to_f16_k(const float* src, __half* dst, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = __float2half_rn(src[i]);
}

constexpr int kBM = 128, kBN = 128, kBK = 32, kPad = 8;

__global__ void __launch_bounds__(256) gemm_f16_k(const __half* A, const __half* B, int n, int m, int k, float* C,
                                                  const float* bias) {
  using namespace nvcuda;
  __shared__ __align__(32) __half As[kBM][kBK + kPad];
  __shared__ __align__(32) __half Bs[kBN][kBK + kPad];
  __shared__ __align__(32) float stage[8][16 * 16];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wn = warp >> 2, wm = warp & 3;  // 2 x 4 warps: each 64 (n) x 32 (m)
  const int n0 = blockIdx.y * kBM, m0 = blockIdx.x * kBN;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);
  for (int k0 = 0; k0 < k; k0 += kBK) {
    // 128 rows x 32 halves per tile = 512 chunks of 8 halves; 2 per thread per matrix.
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int chunk = threadIdx.x + c * 256, row = chunk >> 2, col = (chunk & 3) * 8;
      uint4 av = make_uint4(0, 0, 0, 0), bv = make_uint4(0, 0, 0, 0);
      if (n0 + row < n) av = *reinterpret_cast<const uint4*>(A + static_cast<int64_t>(n0 + row) * k + k0 + col);
      if (m0 + row < m) bv = *reinterpret_cast<const uint4*>(B + static_cast<int64_t>(m0 + row) * k + k0 + col);
      *reinterpret_cast<uint4*>(&As[row][col]) = av;
      *reinterpret_cast<uint4*>(&Bs[row][col]) = bv;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> af[4];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> bf[2];
#pragma unroll
      for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(af[i], &As[wn * 64 + i * 16][kk], kBK + kPad);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(bf[j], &Bs[wm * 32 + j * 16][kk], kBK + kPad);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(stage[warp], acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      const int rn = n0 + wn * 64 + i * 16, cm = m0 + wm * 32 + j * 16;
      for (int e = lane; e < 256; e += 32) {
        const int rr = rn + e / 16, cc = cm + e % 16;
        if (rr < n && cc < m) C[static_cast<int64_t>(rr) * m + cc] = stage[warp][e] + (bias ? bias[cc] : 0.f);
      }
      __syncwarp();
    }
}

__global__ void gated_act_k(const float* gate, const float* up, float* out, int64_t n, bool gelu) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (gelu ? gelu_tanh(gate[i]) : silu(gate[i])) * up[i];
}

// ---- q/k norm, RoPE, K/V store ---------------------------------------------------------------

__device__ __forceinline__ int row_pos(const KvRows& kv, int r) { return kv.per_row ? kv.pos[r] : kv.pos[0] + r; }

__global__ void qk_rope_store_k(float* q, const float* k, const float* v, const float* q_norm, const float* k_norm,
                                RopeParams p, KvRows kv) {
  const int r = blockIdx.x, h = blockIdx.y, i = threadIdx.x, half = p.hd / 2;
  const bool is_q = h < p.n_heads;
  const int kvh = h - p.n_heads;
  const int pos = row_pos(kv, r);
  const int64_t kv_dim = static_cast<int64_t>(p.n_kv) * p.hd;
  const float* src = is_q ? q + (static_cast<int64_t>(r) * p.n_heads + h) * p.hd : k + r * kv_dim + kvh * p.hd;
  float* dst = is_q ? q + (static_cast<int64_t>(r) * p.n_heads + h) * p.hd
                    : kv.k[kv.per_row ? r : 0] + pos * kv_dim + kvh * p.hd;
  const int i0 = p.adjacent ? 2 * i : i, i1 = p.adjacent ? 2 * i + 1 : i + half;
  float a = src[i0], b = src[i1];
  const float* nw = is_q ? q_norm : k_norm;
  if (nw) {
    const double ss = block_sum_d(static_cast<double>(a) * a + static_cast<double>(b) * b);
    const float sc = rms_scale(ss, p.hd, p.eps);
    a = a * sc * nw[i0];
    b = b * sc * nw[i1];
  }
  double theta = static_cast<double>(pos) * p.freq_scale * pow(p.base, -2.0 * i / static_cast<double>(p.hd));
  if (p.factors) theta /= static_cast<double>(p.factors[i]);
  const float c = static_cast<float>(cos(theta) * p.mscale), s = static_cast<float>(sin(theta) * p.mscale);
  dst[i0] = a * c - b * s;
  dst[i1] = a * s + b * c;
  if (!is_q) {
    const float* vs = v + r * kv_dim + kvh * p.hd;
    float* vd = kv.v[kv.per_row ? r : 0] + pos * kv_dim + kvh * p.hd;
    vd[i0] = vs[i0];
    vd[i1] = vs[i1];
  }
}

// ---- attention --------------------------------------------------------------------------------

constexpr int kMaxGroup = 8, kMaxHd = 256;

__device__ __forceinline__ float capped(float s, float cap) { return cap > 0 ? cap * tanhf(s / cap) : s; }

// grid (n_kv, n, splits), 128 threads.
__global__ void __launch_bounds__(128) attend_decode_k(const float* q, KvRows kv, AttnParams p, int splits, float* part) {
  __shared__ float qs[kMaxGroup * kMaxHd];
  __shared__ float ss[kMaxGroup][kAttnSplit];
  __shared__ float ms[kMaxGroup], ls[kMaxGroup];
  const int kvh = blockIdx.x, r = blockIdx.y, sp = blockIdx.z;
  const int G = p.n_heads / p.n_kv, hd = p.hd, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int pos = row_pos(kv, r);
  const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
  const int j0 = lo + sp * kAttnSplit, j1 = min(j0 + kAttnSplit, pos + 1);
  const int64_t kv_dim = static_cast<int64_t>(p.n_kv) * hd;
  auto part_of = [&](int g) { return part + ((static_cast<int64_t>(r) * p.n_heads + kvh * G + g) * splits + sp) * (hd + 2); };
  if (j0 >= j1) {
    if (threadIdx.x < G) part_of(threadIdx.x)[0] = -INFINITY;
    return;
  }
  const int cnt = j1 - j0;
  const float* qr = q + (static_cast<int64_t>(r) * p.n_heads + kvh * G) * hd;
  for (int i = threadIdx.x; i < G * hd; i += blockDim.x) qs[i] = qr[i];
  __syncthreads();
  const float* kb = kv.k[kv.per_row ? r : 0] + kvh * hd;
  const float* vb = kv.v[kv.per_row ? r : 0] + kvh * hd;
  for (int jj = warp; jj < cnt; jj += 4) {
    const float* kr = kb + (j0 + jj) * kv_dim;
    float dots[kMaxGroup];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) dots[g] = 0.f;
    for (int d = lane; d < hd; d += 32) {
      const float kd = kr[d];
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < G) dots[g] = fmaf(qs[g * hd + d], kd, dots[g]);
    }
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g)
      if (g < G) {
        const float t = warp_sum(dots[g]);
        if (lane == 0) ss[g][jj] = capped(t * p.scale, p.softcap);
      }
  }
  __syncthreads();
  for (int g = warp; g < G; g += 4) {
    float mx = -INFINITY;
    for (int j = lane; j < cnt; j += 32) mx = fmaxf(mx, ss[g][j]);
    mx = warp_max(mx);
    float sum = 0.f;
    for (int j = lane; j < cnt; j += 32) {
      const float e = expf(ss[g][j] - mx);
      ss[g][j] = e;
      sum += e;
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      ms[g] = mx;
      ls[g] = sum;
    }
  }
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a[kMaxGroup];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) a[g] = 0.f;
    for (int j = 0; j < cnt; ++j) {
      const float vv = vb[(j0 + j) * kv_dim + d];
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < G) a[g] = fmaf(ss[g][j], vv, a[g]);
    }
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g)
      if (g < G) part_of(g)[2 + d] = a[g];
  }
  if (threadIdx.x < G) {
    part_of(threadIdx.x)[0] = ms[threadIdx.x];
    part_of(threadIdx.x)[1] = ls[threadIdx.x];
  }
}

// grid (n, n_heads), hd threads.
__global__ void attend_combine_k(const float* part, int n_heads, int hd, int splits, float* out) {
  const int r = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const float* pr = part + (static_cast<int64_t>(r) * n_heads + h) * splits * (hd + 2);
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, pr[s * (hd + 2)]);
  float L = 0.f, acc = 0.f;
  for (int s = 0; s < splits; ++s) {
    const float m = pr[s * (hd + 2)];
    if (m == -INFINITY) continue;
    const float f = expf(m - M);
    L += f * pr[s * (hd + 2) + 1];
    acc += f * pr[s * (hd + 2) + 2 + d];
  }
  out[(static_cast<int64_t>(r) * n_heads + h) * hd + d] = acc / L;
}

// grid (n_heads, ceil(n / 32)), 256 threads (8 warps x 4 query rows); HD the head dimension.
template <int HD>
__global__ void __launch_bounds__(256)
    attend_prefill_k(const float* q, int n, int pos0, const float* kc, const float* vc, AttnParams p, float* out) {
  extern __shared__ float smem[];
  constexpr int TQ = 32, TK = 32, C = HD / 32;
  float* qs = smem;                  // [TQ][HD]
  float* ks = qs + TQ * HD;          // [TK][HD + 1]
  float* vs = ks + TK * (HD + 1);    // [TK][HD]
  const int h = blockIdx.x, t0 = blockIdx.y * TQ, G = p.n_heads / p.n_kv, kvh = h / G;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t kv_dim = static_cast<int64_t>(p.n_kv) * HD;
  const int rows = min(TQ, n - t0);
  for (int i = threadIdx.x; i < TQ * HD; i += blockDim.x) {
    const int qi = i / HD, d = i % HD;
    qs[i] = qi < rows ? q[(static_cast<int64_t>(t0 + qi) * p.n_heads + h) * HD + d] : 0.f;
  }
  float m_i[4], l_i[4], acc[4][C];
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    m_i[a] = -INFINITY;
    l_i[a] = 0.f;
#pragma unroll
    for (int c = 0; c < C; ++c) acc[a][c] = 0.f;
  }
  const int p_first = pos0 + t0, p_last = pos0 + t0 + rows - 1;
  const int key_lo = p.window > 0 ? max(0, p_first - p.window + 1) : 0;
  for (int kt = key_lo; kt <= p_last; kt += TK) {
    __syncthreads();
    for (int i = threadIdx.x; i < TK * HD; i += blockDim.x) {
      const int kk = i / HD, d = i % HD, j = kt + kk;
      const bool in = j <= p_last;
      ks[kk * (HD + 1) + d] = in ? kc[j * kv_dim + kvh * HD + d] : 0.f;
      vs[kk * HD + d] = in ? vc[j * kv_dim + kvh * HD + d] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int qi = warp * 4 + a;
      if (qi >= rows) continue;
      const int pq = pos0 + t0 + qi, j = kt + lane;
      float s = 0.f;
      const float* qrow = qs + qi * HD;
      const float* krow = ks + lane * (HD + 1);
#pragma unroll 8
      for (int d = 0; d < HD; ++d) s = fmaf(qrow[d], krow[d], s);
      s = capped(s * p.scale, p.softcap);
      const bool visible = j <= pq && (p.window <= 0 || pq - j < p.window);
      s = visible ? s : -INFINITY;
      const float mx = warp_max(s), m_new = fmaxf(m_i[a], mx);
      if (m_new == -INFINITY) continue;  // no visible key yet (uniform across the warp)
      const float pj = visible ? expf(s - m_new) : 0.f;
      const float alpha = m_i[a] == -INFINITY ? 0.f : expf(m_i[a] - m_new);
      l_i[a] = l_i[a] * alpha + warp_sum(pj);
#pragma unroll
      for (int c = 0; c < C; ++c) acc[a][c] *= alpha;
      for (int kk = 0; kk < TK; ++kk) {
        const float pk = __shfl_sync(0xffffffffu, pj, kk);
#pragma unroll
        for (int c = 0; c < C; ++c) acc[a][c] = fmaf(pk, vs[kk * HD + lane + 32 * c], acc[a][c]);
      }
      m_i[a] = m_new;
    }
  }
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int qi = warp * 4 + a;
    if (qi >= rows) continue;
    float* o = out + (static_cast<int64_t>(t0 + qi) * p.n_heads + h) * HD;
#pragma unroll
    for (int c = 0; c < C; ++c) o[lane + 32 * c] = acc[a][c] / l_i[a];
  }
}

// ---- argmax -------------------------------------------------------------------------------------

__device__ __forceinline__ void better(float& v, int& i, float v2, int i2) {
  if (v2 > v || (v2 == v && i2 < i)) {
    v = v2;
    i = i2;
  }
}

__device__ void block_best(float& v, int& i) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) better(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
  if (lane == 0) {
    sv[w] = v;
    si[w] = i;
  }
  __syncthreads();
  if (w == 0) {
    v = lane < nw ? sv[lane] : -INFINITY;
    i = lane < nw ? si[lane] : INT_MAX;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) better(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
  }
}

// grid (kArgmaxBlocks, n), 256 threads.
__global__ void argmax1_k(const float* x, int m, float* pv, int* pi) {
  const int r = blockIdx.y, chunk = (m + kArgmaxBlocks - 1) / kArgmaxBlocks;
  const int b = blockIdx.x * chunk, e = min(m, b + chunk);
  const float* xr = x + static_cast<int64_t>(r) * m;
  float v = -INFINITY;
  int i = INT_MAX;
  for (int j = b + threadIdx.x; j < e; j += blockDim.x) better(v, i, xr[j], j);
  block_best(v, i);
  if (threadIdx.x == 0) {
    pv[r * kArgmaxBlocks + blockIdx.x] = v;
    pi[r * kArgmaxBlocks + blockIdx.x] = i;
  }
}

// grid n, 128 threads.
__global__ void argmax2_k(const float* pv, const int* pi, int32_t* out) {
  const int r = blockIdx.x;
  float v = -INFINITY;
  int i = INT_MAX;
  for (int j = threadIdx.x; j < kArgmaxBlocks; j += blockDim.x)
    better(v, i, pv[r * kArgmaxBlocks + j], pi[r * kArgmaxBlocks + j]);
  block_best(v, i);
  if (threadIdx.x == 0) out[r] = i == INT_MAX ? 0 : i;
}

unsigned blocks_for(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

}  // namespace

void embed(cudaStream_t s, const DevWeight& t, const int32_t* tokens, int n, float scale, float* x) {
  if (n <= 0) return;
  LARQL_DISPATCH(t.type, embed_k<TT><<<n, 128, 0, s>>>(t.data, t.row_bytes, t.cols, tokens, scale, x))
}

void rmsnorm(cudaStream_t s, const float* x, const float* w, float* y, int n, int H, float eps) {
  if (n > 0) rmsnorm_k<<<n, 256, 0, s>>>(x, w, y, H, eps);
}

void add_norm(cudaStream_t s, float* x, const float* o, const float* post_w, const float* next_w, float* y, int n,
              int H, float eps) {
  if (n > 0) add_norm_k<<<n, 256, 0, s>>>(x, o, post_w, next_w, y, H, eps);
}

void gemv(cudaStream_t s, const DevWeight& W, const float* x, int n, float* out, const float* bias, float softcap) {
  gemv_rows<0>(s, W, nullptr, x, n, out, bias, softcap);
}

void gemv_gated(cudaStream_t s, const DevWeight& G, const DevWeight& U, const float* x, int n, float* out, bool gelu) {
  if (gelu)
    gemv_rows<1>(s, G, &U, x, n, out, nullptr, 0);
  else
    gemv_rows<2>(s, G, &U, x, n, out, nullptr, 0);
}

void dequant_f16(cudaStream_t s, const DevWeight& W, void* dst) {
  const int64_t units = W.rows * (W.cols / kUnit);
  LARQL_DISPATCH(W.type, dequant_f16_k<TT><<<blocks_for(units, 256), 256, 0, s>>>(W.data, W.row_bytes, W.rows, W.cols,
                                                                                   static_cast<__half*>(dst)))
}

void to_f16(cudaStream_t s, const float* src, void* dst, int64_t n) {
  if (n > 0) to_f16_k<<<blocks_for(n, 256), 256, 0, s>>>(src, static_cast<__half*>(dst), n);
}

void gemm_f16(cudaStream_t s, const void* A, const void* B, int n, int m, int k, float* C, const float* bias) {
  const dim3 grid(blocks_for(m, kBN), blocks_for(n, kBM));
  gemm_f16_k<<<grid, 256, 0, s>>>(static_cast<const __half*>(A), static_cast<const __half*>(B), n, m, k, C, bias);
}

void gated_act(cudaStream_t s, const float* gate, const float* up, float* out, int64_t n, bool gelu) {
  if (n > 0) gated_act_k<<<blocks_for(n, 256), 256, 0, s>>>(gate, up, out, n, gelu);
}

void qk_rope_store(cudaStream_t s, float* q, const float* k, const float* v, const float* q_norm, const float* k_norm,
                   int n, const RopeParams& p, const KvRows& kv) {
  if (n > 0) qk_rope_store_k<<<dim3(n, p.n_heads + p.n_kv), p.hd / 2, 0, s>>>(q, k, v, q_norm, k_norm, p, kv);
}

void attend_decode(cudaStream_t s, const float* q, int n, const KvRows& kv, const AttnParams& p, int splits, float* part,
                   float* out) {
  if (n <= 0) return;
  attend_decode_k<<<dim3(p.n_kv, n, splits), 128, 0, s>>>(q, kv, p, splits, part);
  attend_combine_k<<<dim3(n, p.n_heads), p.hd, 0, s>>>(part, p.n_heads, p.hd, splits, out);
}

void attend_prefill(cudaStream_t s, const float* q, int n, int pos0, const float* k, const float* v, const AttnParams& p,
                    float* out) {
  if (n <= 0) return;
  const dim3 grid(p.n_heads, blocks_for(n, 32));
  const size_t smem = static_cast<size_t>(32 * p.hd + 32 * (p.hd + 1) + 32 * p.hd) * sizeof(float);
  switch (p.hd) {
    case 64:
      attend_prefill_k<64><<<grid, 256, smem, s>>>(q, n, pos0, k, v, p, out);
      break;
    case 128:
      attend_prefill_k<128><<<grid, 256, smem, s>>>(q, n, pos0, k, v, p, out);
      break;
    case 256:
      attend_prefill_k<256><<<grid, 256, smem, s>>>(q, n, pos0, k, v, p, out);
      break;
    default:
      break;
  }
}

void prepare_kernels() {
  const int big = static_cast<int>((32 * 256 + 32 * 257 + 32 * 256) * sizeof(float));
  cudaFuncSetAttribute(attend_prefill_k<256>, cudaFuncAttributeMaxDynamicSharedMemorySize, big);
  cudaFuncSetAttribute(attend_prefill_k<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, big);
  cudaFuncSetAttribute(attend_prefill_k<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, big);
}

void argmax_rows(cudaStream_t s, const float* x, int n, int m, void* part, int32_t* out) {
  if (n <= 0) return;
  float* pv = static_cast<float*>(part);
  int* pi = reinterpret_cast<int*>(pv + n * kArgmaxBlocks);
  argmax1_k<<<dim3(kArgmaxBlocks, n), 256, 0, s>>>(x, m, pv, pi);
  argmax2_k<<<n, 128, 0, s>>>(pv, pi, out);
}

}  // namespace larql::cuda
