// Tiled quantised matrix kernels for prefill: many activation rows against a weight matrix.
//
// A weight panel of 8 rows (16 with AVX-512) is unpacked once into a layout where one 32-byte
// (64-byte) vector holds 4 consecutive elements of each row (the formats' 4/5/6/8-bit values as
// bytes), then every activation row streams past it: 4 activation bytes are broadcast and
// multiplied with all the panel's rows at once (AVX2 maddubs/madd, or VNNI dpbusd), so integer
// block sums come out per row with no horizontal reductions, and the unpacking is paid once per
// panel instead of once per token. Variants: AVX2, AVX-VNNI (256-bit), AVX-512 VNNI (512-bit);
// every variant gives the same bits.
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
#include <string>
#include <vector>

#include "util/dtype.h"

namespace larql::quant {

/// Weight rows per panel (16 in zmm, two 8-row panels in ymm): callers split rows across
/// threads in multiples of this.
constexpr int64_t kGemmRows = 16;

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

/// The kernel variant in use: "avx512-vnni" (512-bit dpbusd, 16-row panels), "avx-vnni"
/// (256-bit dpbusd) or "avx2" (maddubs + madd), or "none" when gemm_supported() is false for
/// every type (no AVX2, or the active ISA lowered to scalar).
const char* gemm_isa_name();

/// The variants that can run now, best first (empty without AVX2): the CPU's, limited by the
/// active ISA (avx512-vnni needs Isa::AVX512; a lowered ISA allows only plain avx2).
std::vector<std::string> gemm_variants();
/// For tests and benchmarks: use variant `name` (one of gemm_variants()), or the best one for
/// "". Returns false (changing nothing) for a name this CPU cannot run. Results are
/// bit-identical whatever the variant.
bool gemm_use_variant(const std::string& name);

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

/// True when gemv() has a kernel for `w` under the active ISA: the same types as gemm_supported()
/// (AVX2 or better: Q4_0, Q5_0, Q8_0, Q4_K, Q6_K).
bool gemv_supported(DType w);

/// Decode-sized batches: the same contract as gemm() (outputs bit-identical to vec_dot_fn(w)),
/// computed 4 weight rows at a time straight from the weights (no packing, so it pays off for any
/// number of rows; gemm() is faster from a few activation rows on). Per step the 4 rows share the
/// activation loads and the horizontal reductions, and the next group of rows is prefetched
/// line by line in address order (quant/gemm_x86.inl GroupPrefetch: AMD Zen 4's prefetchers
/// lose 4 interleaved row streams; docs/BENCHMARKS.md "Speed").
/// 32-element blocks: the prepared activation extras (f32 scales, block sums: the weights'
/// offsets are removed through them), one dpbusd per block on VNNI CPUs, two rows per 256-bit float
/// step (lanes 0..3 one row's four accumulators, 4..7 the other's). Q4_K / Q6_K: the row kernels'
/// exact integer super-block sums (maddubs, then madd or, under VNNI, dpwssd with the scales; the
/// Q6_K -32 offset through the activation's block sums) and the scalar reference's float step,
/// 4 rows in the 4 lanes of one vector. Any r0, r1 (a short last group repeats its final row).
void gemv(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
          const GemmActs& a, float* y, int64_t ldy);

}  // namespace larql::quant
