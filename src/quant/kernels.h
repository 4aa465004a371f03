// Internal: per-ISA kernel tables. One table per ISA, each defined in its own file
// (dot_ref.cc, dot_avx2.cc); quant.cc picks one after a CPUID check. No #if inside kernels.
#pragma once

#include <cstdint>

#include "quant/gemm.h"
#include "quant/quant.h"

namespace larql::quant::detail {

/// Enough slots for every ggml type id we know (BF16 = 30 is the largest).
constexpr int kMaxTypeId = 32;

/// A table of vec_dot kernels indexed by the weight's ggml type id; nullptr = not provided
/// (the dispatcher falls back to the scalar table). Contract as quant::vec_dot.
struct DotTable {
  VecDotFn dot[kMaxTypeId] = {};
};

/// The scalar reference kernels (always complete for every vec_dot type).
const DotTable& ref_dot_table();
/// AVX2+FMA+F16C kernels. Only call after __builtin_cpu_supports says so.
const DotTable& avx2_dot_table();

/// The tiled kernels of quant/gemm.h, one per ISA file (gemm_avx2.cc, gemm_avxvnni.cc,
/// gemm_avx512vnni.cc), each with quant::gemm's contract. Only call after the CPUID check.
using GemmFn = void (*)(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0,
                        int64_t r1, const GemmActs& a, float* y, int64_t ldy);
void gemm_avx2(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
               const GemmActs& a, float* y, int64_t ldy);
void gemm_avxvnni(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
                  const GemmActs& a, float* y, int64_t ldy);
void gemm_avx512vnni(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
                     const GemmActs& a, float* y, int64_t ldy);

/// The decode kernels of quant/gemm.h (gemv), same files, quant::gemv's contract.
void gemv_avx2(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
               const GemmActs& a, float* y, int64_t ldy);
void gemv_avxvnni(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
                  const GemmActs& a, float* y, int64_t ldy);
void gemv_avx512vnni(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
                     const GemmActs& a, float* y, int64_t ldy);

/// Scalar dequantisers (dequant_ref.cc). n is a multiple of the block size.
using DequantFn = void (*)(const void* src, float* dst, int64_t n);
DequantFn ref_dequant_fn(DType t);  ///< nullptr if unsupported

/// Scalar quantisers (quantize_ref.cc). n is a multiple of the block size.
using QuantFn = void (*)(const float* src, void* dst, int64_t n);
QuantFn ref_quant_fn(DType t);  ///< nullptr if unsupported
/// AVX2 activation quantisers (Q8_0, Q8_K; nullptr otherwise), bit-identical to the reference.
QuantFn avx2_quant_fn(DType t);

}  // namespace larql::quant::detail
