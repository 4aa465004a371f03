#include "compute/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "compute/ops.h"
#include "compute/simd.h"
#include "quant/quant.h"

namespace larql::compute {

namespace detail {
// attention_avx2.cc / attention_avx512.cc; only called when the AVX2 table is active (and the
// CPU has AVX-512 F/DQ for the second) and head_dim % 16 == 0. The two agree bit for bit.
void attend_chunk_avx2(const float* q, int64_t n_q, const float* k, const float* v, int64_t m, int64_t stride,
                       int64_t head_dim, float scale, float cap, float* scores, AttnPartial part);
void attend_chunk_avx512(const float* q, int64_t n_q, const float* k, const float* v, int64_t m, int64_t stride,
                         int64_t head_dim, float scale, float cap, float* scores, AttnPartial part);
}  // namespace detail

namespace {
using ChunkFn = void (*)(const float*, int64_t, const float*, const float*, int64_t, int64_t, int64_t, float, float,
                         float*, AttnPartial);
std::atomic<int>& allow_avx512() {
  static std::atomic<int> on{1};
  return on;
}
// From the one ISA selection (quant::active_isa()), as simd_kernels() is.
ChunkFn simd_chunk() {
  const quant::Isa isa = quant::active_isa();
  if (isa < quant::Isa::AVX2 || simd_kernels_avx2() == nullptr) return nullptr;
  const bool avx512 = isa >= quant::Isa::AVX512;  // implies AVX-512 F/DQ
  return avx512 && allow_avx512().load(std::memory_order_relaxed) ? detail::attend_chunk_avx512
                                                                   : detail::attend_chunk_avx2;
}
}  // namespace

const char* attention_variant() {
  const ChunkFn f = simd_chunk();
  return f == nullptr ? "scalar" : f == detail::attend_chunk_avx512 ? "avx512" : "avx2";
}

void attention_allow_avx512(bool on) { allow_avx512().store(on ? 1 : 0); }

void attend_chunk(const float* q, int64_t n_q, const float* k, const float* v, int64_t m, int64_t stride,
                  int64_t head_dim, float scale, float cap, float* scores, AttnPartial part) {
  const ChunkFn f = simd_chunk();
  if (f != nullptr && head_dim % 16 == 0) {
    f(q, n_q, k, v, m, stride, head_dim, scale, cap, scores, part);
    return;
  }
  // Generic: the same arithmetic through dot_f32 / axpy, one head at a time.
  for (int64_t h = 0; h < n_q; ++h) {
    const float* qh = q + h * head_dim;
    float* sh = scores + h * m;
    for (int64_t j = 0; j < m; ++j) {
      float s = dot_f32(qh, k + j * stride, head_dim) * scale;
      if (cap > 0) s = cap * std::tanh(s / cap);
      sh[j] = s;
    }
    const ExpSum es = exp_shifted_sum(sh, m);
    part.max[h] = es.max;
    part.sum[h] = es.sum;
    float* o = part.out + h * head_dim;
    std::fill(o, o + head_dim, 0.0f);
    for (int64_t j = 0; j < m; ++j) axpy(sh[j], v + j * stride, o, head_dim);
  }
}

void attend_combine(int64_t n_q, int64_t head_dim, int64_t n_chunks, const float* out, const float* max,
                    const float* sum, float* result) {
  for (int64_t h = 0; h < n_q; ++h) {
    float mx = max[h];
    for (int64_t c = 1; c < n_chunks; ++c) mx = std::max(mx, max[c * n_q + h]);
    float* o = result + h * head_dim;
    std::fill(o, o + head_dim, 0.0f);
    float total = 0.0f;
    for (int64_t c = 0; c < n_chunks; ++c) {
      const float w = std::exp(max[c * n_q + h] - mx);
      total = std::fma(w, sum[c * n_q + h], total);
      axpy(w, out + (c * n_q + h) * head_dim, o, head_dim);
    }
    simd_kernels().scale(o, 1.0f / total, o, head_dim);
  }
}

void attend_group(const float* q, int64_t n_q, const float* k, const float* v, int64_t m, int64_t stride,
                  int64_t head_dim, float scale, float cap, float* scores, float* out) {
  const int64_t nc = attn_chunks(m);
  thread_local std::vector<float> parts;
  if (parts.size() < attn_partials_floats(nc, n_q, head_dim)) parts.resize(attn_partials_floats(nc, n_q, head_dim));
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t j0 = c * kAttnChunk, mc = std::min(kAttnChunk, m - j0);
    attend_chunk(q, n_q, k + j0 * stride, v + j0 * stride, mc, stride, head_dim, scale, cap, scores,
                 attn_partial_at(parts.data(), nc, n_q, head_dim, c));
  }
  attend_combine_partials(parts.data(), nc, n_q, head_dim, out);
}

}  // namespace larql::compute
