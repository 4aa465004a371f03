// Attention of one query position over a run of K/V rows, for the heads that share one K/V head
// (grouped-query attention: Gemma 3 270M has 4 query heads per K/V head).
#pragma once

#include <cstdint>

namespace larql::compute {

/// For each query head h < n_q (q + h * head_dim):
///   s_j = dot(q_h, k_j) * scale, then cap * tanh(s_j / cap) if cap > 0   (j < m)
///   p = softmax(s)                                                       (compute::softmax)
///   out_h = sum_j p_j v_j, accumulated in key order from 0 as fma(p_j, v_j, acc)
/// K/V row j is at k + j * stride / v + j * stride (head_dim floats each). out: n_q * head_dim
/// floats; scores: n_q * m floats of scratch (left holding p).
///
/// The arithmetic for one head does not depend on n_q, on the other heads or on the caller's
/// thread split: each dot is the compute::dot_f32 reduction (two 8-lane accumulators over 16
/// elements, then the same pairwise sum), each output element the same fma chain as
/// compute::axpy per key. Sharing the K/V loads between the heads of a group is what this buys:
/// batching tokens or heads never changes a result.
void attend_group(const float* q, int64_t n_q, const float* k, const float* v, int64_t m, int64_t stride,
                  int64_t head_dim, float scale, float cap, float* scores, float* out);

/// For tests and benchmarks: let attend_group use its AVX-512 kernel when the active ISA is
/// AVX512 (the default), or keep to the AVX2 kernel. The results are the same bits either way.
void attention_allow_avx512(bool on);

/// The attend_group kernel the active ISA (quant::active_isa()) selects for head_dim % 16 == 0:
/// "avx512", "avx2" or "scalar" (the generic loop over simd_variant()'s kernels).
const char* attention_variant();

}  // namespace larql::compute
