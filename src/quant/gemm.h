// Tiled quantised matrix kernels for prefill: many activation rows against a weight matrix.
//
// A weight panel of kGemmRows rows is unpacked once into a layout where one 32-byte vector holds
// 4 consecutive elements of each of the 8 rows (the formats' 4/5/6/8-bit values as bytes), then
// every activation row streams past it: 4 activation bytes are broadcast and multiplied with all
// 8 rows at once (AVX2 maddubs/madd, or VNNI dpbusd), so integer block sums come out per row with
// no horizontal reductions, and the unpacking is paid once per panel instead of once per token.
//
// Every output is bit-identical to quant::vec_dot_fn(w) of the active ISA on the same two rows:
// the integer block sums are exact whatever the instruction order, and the float work per output
// follows the row kernel's order exactly:
//  - 32-element blocks (Q4_0, Q5_0, Q8_0 against Q8_0): four accumulators, block b goes to
//    accumulator b mod 4 as fma(d_w * d_a, float(isum_b), acc), result (acc0 + acc2) + (acc1 + acc3);
//  - K-quants (Q4_K, Q6_K against Q8_K): the scalar reference's order per super-block
//    (src/quant/dot_ref.cc), so for these the tiled kernel, the row kernel and the reference agree
//    bit for bit.
// So a prompt run in one batch gives the same logits as the same tokens decoded one at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "util/dtype.h"

namespace larql::quant {

/// Weight rows per panel: callers split rows across threads in multiples of this.
constexpr int64_t kGemmRows = 8;

/// Activation rows quantised to vec_dot_type(w) (Q8_0 or Q8_K), plus, for Q8_0, each block's
/// scale as f32 and the sum of its 32 quants (filled by prepare_gemm_acts).
struct GemmActs {
  DType type = DType::F32;
  int64_t cols = 0;             ///< elements per row
  int64_t n = 0;                ///< rows (tokens)
  const uint8_t* rows = nullptr;
  size_t row_bytes = 0;
  const float* scale = nullptr;   ///< Q8_0 only: [n][cols / 32]
  const int32_t* sum = nullptr;   ///< Q8_0 only: [n][cols / 32]
};

/// True when gemm() has a tiled kernel for weight type `w` under the active ISA (AVX2 or better:
/// Q4_0, Q5_0, Q8_0, Q4_K, Q6_K). Otherwise callers use vec_dot_fn row by row.
bool gemm_supported(DType w);

/// The ISA the tiled kernels use now: "avx2", "avx-vnni" or "avx512-vnni" (256-bit dpbusd), or
/// "none" when gemm_supported() is false for every type.
const char* gemm_isa_name();

/// For tests and benchmarks: use the plain AVX2 kernels even where VNNI is available (true), or
/// the best available (false). Results are bit-identical either way.
void gemm_force_avx2(bool on);

/// Fills the Q8_0 extras: scale[t * nb + b] = f32 of row t block b's d; sum[...] = sum of its
/// quants (nb = cols / 32). `scale` and `sum` must hold n * cols / 32 values each. A no-op for
/// other activation types.
void prepare_gemm_acts(GemmActs& a, float* scale, int32_t* sum);

/// y[t * ldy + r] = vec_dot(w, cols, w_data + r * w_row_bytes, activation row t) for r in
/// [r0, r1), t in [0, a.n), bit-identical to vec_dot_fn(w) (see the header comment). r0 should
/// be a multiple of kGemmRows for speed (any value is correct). `a` must come from
/// prepare_gemm_acts with a.type == vec_dot_type(w) and a.cols == cols. Thread-safe (scratch is
/// per thread). Preconditions (unchecked, like VecDotFn): gemm_supported(w), cols a multiple of
/// the block size.
void gemm(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
          const GemmActs& a, float* y, int64_t ldy);

/// True when gemv() has a kernel for `w` under the active ISA (AVX2 or better: Q4_0, Q5_0, Q8_0).
bool gemv_supported(DType w);

/// Decode-sized batches: the same contract as gemm() (outputs bit-identical to vec_dot_fn(w)),
/// computed one weight row at a time with the row kernel's arithmetic, reading the prepared
/// activation extras (f32 scales, block sums: the weights' offsets are removed through them) and,
/// on VNNI CPUs, one dpbusd per block. No packing, so it pays off for any number of rows; gemm()
/// is faster from a few activation rows on.
void gemv(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
          const GemmActs& a, float* y, int64_t ldy);

}  // namespace larql::quant
