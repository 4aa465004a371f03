// Attention of one query position over a run of K/V rows, for the heads that share one K/V head
// (grouped-query attention: Gemma 3 270M has 4 query heads per K/V head).
//
// The keys are taken in chunks of kAttnChunk, counted from the first visible key, and each chunk
// is reduced on its own before the chunks are combined (the split-softmax of Milakov &
// Gimelshein 2018, "Online normalizer calculation for softmax", as used by FlashAttention and
// flash-decoding). Chunks are independent, so a decode step can spread one query's chunks over
// the threads (sharing each K/V row's loads between the heads of its group) while a prompt runs
// one (query, group) per thread — and both give the same bits, because the chunk boundaries and
// the arithmetic per chunk and per combine do not depend on who computes them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace larql::compute {

/// Keys per chunk of the attention arithmetic (attend_chunk / attend_combine).
constexpr int64_t kAttnChunk = 32;

/// The number of chunks for m keys: ceil(m / kAttnChunk).
constexpr int64_t attn_chunks(int64_t m) { return (m + kAttnChunk - 1) / kAttnChunk; }

/// One chunk's partial result for n_q heads: out [n_q, head_dim], max [n_q], sum [n_q].
struct AttnPartial {
  float* out;
  float* max;
  float* sum;
};

/// Partial attention of n_q query heads (q + h * head_dim) over the m keys of one chunk
/// (1 <= m; normally kAttnChunk, the last chunk may be shorter). For each head h:
///   s_j   = dot(q_h, k_j) * scale, then cap * tanh(s_j / cap) if cap > 0    (compute::dot_f32)
///   max_h = max_j s_j
///   e_j   = exp(s_j - max_h)                                                   (the SIMD exp)
///   sum_h = float(sum_j e_j)                     (summed in double, compute::softmax's order)
///   out_h = sum_j e_j v_j, accumulated in key order from 0 as fma(e_j, v_j, acc) (compute::axpy)
/// K/V row j is at k + j * stride / v + j * stride (head_dim floats each). scores: n_q * m
/// floats of scratch (left holding e). Per head the arithmetic does not depend on n_q or on the
/// other heads: grouping heads only shares the K/V loads.
void attend_chunk(const float* q, int64_t n_q, const float* k, const float* v, int64_t m, int64_t stride,
                  int64_t head_dim, float scale, float cap, float* scores, AttnPartial part);

/// Combines n_chunks partials of n_q heads, chunk c's at out + c * n_q * head_dim, max + c * n_q
/// and sum + c * n_q (the layout attend_group uses), in chunk order. For each head h:
///   M = max_c max_ch;  w_c = exp(max_ch - M) (std::exp);  L = fma(w_c, sum_ch, L) from 0;
///   O = fma(w_c, out_ch, O) from 0 (compute::axpy);  result_h = O * (1 / L).
/// result: n_q * head_dim floats.
void attend_combine(int64_t n_q, int64_t head_dim, int64_t n_chunks, const float* out, const float* max,
                    const float* sum, float* result);

/// The partials of n_q heads over n_chunks chunks in one buffer of attn_partials_floats floats,
/// in attend_combine's layout: [n_chunks][n_q][head_dim] outputs, then [n_chunks][n_q] maxima,
/// then [n_chunks][n_q] sums.
constexpr size_t attn_partials_floats(int64_t n_chunks, int64_t n_q, int64_t head_dim) {
  return static_cast<size_t>(n_chunks * n_q * (head_dim + 2));
}
/// Chunk ch's AttnPartial inside such a buffer at base.
inline AttnPartial attn_partial_at(float* base, int64_t n_chunks, int64_t n_q, int64_t head_dim, int64_t ch) {
  float* max = base + n_chunks * n_q * head_dim;
  return {base + ch * n_q * head_dim, max + ch * n_q, max + n_chunks * n_q + ch * n_q};
}
/// attend_combine over such a buffer; result: n_q * head_dim floats.
inline void attend_combine_partials(const float* base, int64_t n_chunks, int64_t n_q, int64_t head_dim,
                                    float* result) {
  const float* max = base + n_chunks * n_q * head_dim;
  attend_combine(n_q, head_dim, n_chunks, base, max, max + n_chunks * n_q, result);
}

/// softmax(q k^T * scale) v for n_q heads over m >= 1 keys: attend_chunk over each chunk of
/// kAttnChunk keys (from key 0), then attend_combine. out: n_q * head_dim floats; scores: n_q *
/// min(m, kAttnChunk) floats of scratch; the partials live in a per-thread buffer.
/// The result for a head does not depend on n_q, on the other heads or on how a caller splits the
/// chunks between threads (as long as it combines them with attend_combine in order).
void attend_group(const float* q, int64_t n_q, const float* k, const float* v, int64_t m, int64_t stride,
                  int64_t head_dim, float scale, float cap, float* scores, float* out);
/// For tests and benchmarks: let attend_chunk use its AVX-512 kernel when the active ISA is
/// AVX512 (the default), or keep to the AVX2 kernel. The results are the same bits either way.
void attention_allow_avx512(bool on);
/// The attend_chunk kernel the active ISA (quant::active_isa()) selects for head_dim % 16 == 0:
/// "avx512", "avx2" or "scalar" (the generic loop over simd_variant()'s kernels).
const char* attention_variant();

}  // namespace larql::compute
