// Internal: per-ISA kernel tables. One table per ISA, each defined in its own file
// (dot_ref.cc, dot_avx2.cc); quant.cc picks one after a CPUID check. No #if inside kernels.
#pragma once

#include <cstdint>

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

/// The AVX2 4-row Q8_0 kernel (see quant::vec_dot4_fn).
VecDot4Fn avx2_dot4_q8_0();

/// Scalar dequantisers (dequant_ref.cc). n is a multiple of the block size.
using DequantFn = void (*)(const void* src, float* dst, int64_t n);
DequantFn ref_dequant_fn(DType t);  ///< nullptr if unsupported

/// Scalar quantisers (quantize_ref.cc). n is a multiple of the block size.
using QuantFn = void (*)(const float* src, void* dst, int64_t n);
QuantFn ref_quant_fn(DType t);  ///< nullptr if unsupported

}  // namespace larql::quant::detail
