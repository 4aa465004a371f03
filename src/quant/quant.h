// Block weight formats: dequantisation, quantisation and dot-product kernels.
// Layouts follow ggml's published block structs (ggml-common.h) byte for byte, so GGUF tensor
// data is used in place. A scalar reference exists for every kernel; SIMD versions (AVX2, AVX-512)
// follow the one ISA selection (active_isa() below: CPUID's best unless lowered) and must agree
// with the reference within the bounds documented in tests/quant/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "util/dtype.h"

namespace larql::quant {

/// Instruction sets with kernels. Ordered: a later one implies the earlier ones. AVX2 means
/// AVX2 + FMA + F16C + BMI2; AVX512 means AVX-512 F/BW/VL/DQ with VNNI (512-bit tiled kernels
/// and attention; the row kernels are AVX2's).
enum class Isa { Scalar = 0, AVX2 = 1, AVX512 = 2 };
const char* isa_name(Isa isa);
/// Best ISA this CPU supports (and we have kernels for).
Isa detect_isa();
/// The one ISA selection every kernel family reads at each call: quant (row kernels
/// vec_dot_variant(), tiled GEMM gemm_isa_name()), compute (f32 SIMD kernels and attention,
/// compute::simd_variant() / attention_variant()) and the turbo codec
/// (turbo::Codec::decode_variant()). Starts at detect_isa(); the CLI lowers it from --isa or
/// $LARQL_ISA before any kernel runs (docs/cli.md). Below detect_isa() only that level's plain
/// kernels run, no VNNI (see quant/gemm.h). No library code reads the environment.
Isa active_isa();
/// Select the ISA for every kernel family (clamped to detect_isa()). The CLI calls it once at
/// start-up; tests and benchmarks may switch between calls (not while kernels run on other
/// threads: a matmul could then mix variants, which agree only within their documented bounds).
void set_isa(Isa isa);
/// "scalar" | "avx2" | "avx512" -> Isa. Errors: Error{InvalidArgument} naming the value and the
/// accepted names.
Isa parse_isa(std::string_view name);
/// Which row kernels (vec_dot, quantize_row) run under the active ISA: "avx2" (also under
/// AVX512: its row kernels are AVX2's, see quant.cc) or "scalar".
const char* vec_dot_variant();

/// The activation format a weight type is multiplied with:
/// Q4_0, Q5_0, Q8_0 -> Q8_0; Q4_K, Q5_K, Q6_K -> Q8_K; everything else -> F32.
DType vec_dot_type(DType weight);

/// True if dequantize_row supports `t`.
bool can_dequantize(DType t);

/// Dequantise n elements (n a multiple of the block size) of `t` from `src`
/// (row_bytes(t, n) bytes) into `dst` [n]. Bit-identical to ggml's dequantize_row_* and the
/// `gguf` Python package (tests/python/test_dequant.py checks every tensor of the real model).
/// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, Q8_K.
/// Errors: Error{Unsupported} for a type without a kernel; Error{InvalidArgument} if n is not a
/// multiple of the block size.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

/// Quantise n f32 values into `dst` (row_bytes(t, n) bytes). Supported: F32, F16, BF16, Q8_0,
/// Q8_K (activation formats, as in ggml's quantize_row_*_ref) and Q4_0, Q5_0, Q4_K, Q5_K, Q6_K
/// (simple reference quantisers, used to build synthetic test models; not llama.cpp's
/// error-minimising search; round-trip bounds in src/quant/quantize_ref.cc).
/// Q8_0/Q8_K quants are in [-127, 127], as the AVX2 dot kernels require of activations.
/// Errors: Error{Unsupported}; Error{InvalidArgument} if n is not a multiple of the block size.
void quantize_row(DType t, const float* src, void* dst, int64_t n);

/// Dot product of one weight row of type `w` (n elements) with an activation row already
/// quantised to vec_dot_type(w). For F32/F16/BF16 (and other types whose activation is F32),
/// `act` is float[n]. Quantised pairs use integer block sums as ggml's ggml_vec_dot_*_q8_0 /
/// *_q8_K do; Q4_1/Q5_1/Q8_K weights are dequantised then dotted with float[n]. Uses the
/// active ISA. Errors: Error{Unsupported} (no kernel for `w`), Error{InvalidArgument} (n).
float vec_dot(DType w, int64_t n, const void* w_row, const void* act);
/// The scalar reference of vec_dot, always available. SIMD kernels agree with it to within
/// float summation order (bound kRelTol in tests/quant/vec_dot_test.cc).
float vec_dot_ref(DType w, int64_t n, const void* w_row, const void* act);

/// A row-dot kernel for one weight type: (n elements, weight row, activation row) -> dot.
/// Same contract as vec_dot, but no argument checks: n must be a multiple of the block size.
using VecDotFn = float (*)(int64_t n, const void* w_row, const void* act);
/// The kernel vec_dot(w, ...) would use now (active ISA), for hoisting the dispatch out of a
/// matvec's row loop. Errors: Error{Unsupported} if `w` has no kernel.
VecDotFn vec_dot_fn(DType w);
/// The kernel for an explicit ISA (clamped to detect_isa()); falls back to the scalar kernel
/// where that ISA has none. For tests and benchmarks. Errors: as vec_dot_fn.
VecDotFn vec_dot_fn(DType w, Isa isa);

}  // namespace larql::quant
