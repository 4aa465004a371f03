#include "compute/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "compute/ops.h"
#include "compute/simd.h"
#include "quant/quant.h"

namespace larql::compute {

namespace detail {
// attention_avx2.cc / attention_avx512.cc; only called when the AVX2 table is active (and the
// CPU has AVX-512 F/DQ for the second) and head_dim % 16 == 0. The two agree bit for bit.
void attend_group_avx2(const float* q, int64_t n_q, const float* k, const float* v, int64_t m, int64_t stride,
                       int64_t head_dim, float scale, float cap, float* scores, float* out);
void attend_group_avx512(const float* q, int64_t n_q, const float* k, const float* v, int64_t m, int64_t stride,
                         int64_t head_dim, float scale, float cap, float* scores, float* out);
}  // namespace detail

namespace {
using GroupFn = void (*)(const float*, int64_t, const float*, const float*, int64_t, int64_t, int64_t, float, float,
                         float*, float*);
std::atomic<int>& allow_avx512() {
  static std::atomic<int> on{1};
  return on;
}
// From the one ISA selection (quant::active_isa()), as simd_kernels() is.
GroupFn simd_group() {
  const quant::Isa isa = quant::active_isa();
  if (isa < quant::Isa::AVX2 || simd_kernels_avx2() == nullptr) return nullptr;
  const bool avx512 = isa >= quant::Isa::AVX512;  // implies AVX-512 F/DQ
  return avx512 && allow_avx512().load(std::memory_order_relaxed) ? detail::attend_group_avx512
                                                                   : detail::attend_group_avx2;
}
}  // namespace

const char* attention_variant() {
  const GroupFn f = simd_group();
  return f == nullptr ? "scalar" : f == detail::attend_group_avx512 ? "avx512" : "avx2";
}

void attention_allow_avx512(bool on) { allow_avx512().store(on ? 1 : 0); }

void attend_group(const float* q, int64_t n_q, const float* k, const float* v, int64_t m, int64_t stride,
                  int64_t head_dim, float scale, float cap, float* scores, float* out) {
  const GroupFn f = simd_group();
  if (f != nullptr && head_dim % 16 == 0) {
    f(q, n_q, k, v, m, stride, head_dim, scale, cap, scores, out);
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
    softmax(sh, m);
    float* o = out + h * head_dim;
    std::fill(o, o + head_dim, 0.0f);
    for (int64_t j = 0; j < m; ++j) axpy(sh[j], v + j * stride, o, head_dim);
  }
}

}  // namespace larql::compute
