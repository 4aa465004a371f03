// One ISA selection for every kernel family (issue 9, part 4): quant's row kernels and tiled GEMM,
// compute's f32 SIMD kernels and attention, and the turbo codec all read quant::active_isa() at
// each call. Before, compute picked its table at the first call of simd_kernels() (a later
// set_isa changed quant's kernels and not compute's), attention compared that frozen pointer, and
// the turbo codec read CPUID itself. Here kv is the lowest test binary that links every family.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "compute/attention.h"
#include "compute/ops.h"
#include "kv/turbo_codec.h"
#include "quant/gemm.h"
#include "quant/quant.h"
#include "testlib/engine_testing.h"

namespace larql {
namespace {

using quant::Isa;

/// Restores the selection at the end of a test (the binary's other tests run at detect_isa()).
struct IsaGuard {
  Isa saved = quant::active_isa();
  ~IsaGuard() { quant::set_isa(saved); }
};

/// gelu_tanh_mul's scalar formula (compute/ops.h), written out here through libm's exp: what the
/// scalar kernels compute; the AVX2 ones use a Cephes polynomial that differs in the last bits.
float gelu_mul_libm(float x, float up) {
  const float m2u = -2.0f * 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + (m2u > 88.0f ? INFINITY : std::exp(m2u))) * up;
}

std::vector<float> ramp(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = -6.0f + 12.0f * static_cast<float>(i) / static_cast<float>(n);
  return v;
}

TEST(IsaSelection, EveryKernelFamilyReportsTheSelectedLevel) {
  IsaGuard guard;
  const turbo::Codec codec(256, 4);
  for (Isa isa : {Isa::AVX512, Isa::AVX2, Isa::Scalar, Isa::AVX2}) {  // down and up again
    if (static_cast<int>(isa) > static_cast<int>(quant::detect_isa())) continue;
    SCOPED_TRACE(quant::isa_name(isa));
    // Each family runs once first, so a choice frozen at a first call would show.
    std::vector<float> g = ramp(64), u(64, 1.0f), o(64);
    compute::gelu_tanh_mul(g.data(), u.data(), o.data(), 64);
    quant::set_isa(isa);
    EXPECT_EQ(quant::active_isa(), isa);
    const bool simd = isa != Isa::Scalar;
    EXPECT_STREQ(quant::vec_dot_variant(), simd ? "avx2" : "scalar");  // AVX512's row kernels are AVX2's
    EXPECT_STREQ(compute::simd_variant(), simd ? "avx2" : "scalar");
    EXPECT_STREQ(codec.decode_variant(), simd ? "avx2" : "scalar");
    EXPECT_STREQ(compute::attention_variant(), isa == Isa::AVX512 ? "avx512" : simd ? "avx2" : "scalar");
    const std::string gemm = quant::gemm_isa_name();
    if (isa == Isa::Scalar) EXPECT_EQ(gemm, "none");
    else if (isa == Isa::AVX2) EXPECT_EQ(gemm, "avx2") << "a lowered ISA runs only plain AVX2 (no VNNI)";
    else EXPECT_EQ(gemm, "avx512-vnni");
  }
}

// The behaviour behind the names: after the f32 kernels have run at the detected ISA, selecting
// scalar makes gelu_tanh_mul compute exactly the libm formula (the AVX2 polynomial differs in the
// last bits on some of these inputs, so a table frozen at the first call fails here).
TEST(IsaSelection, ScalarSelectedAfterAFirstCallRunsTheScalarKernels) {
  if (quant::detect_isa() < Isa::AVX2) GTEST_SKIP() << "no AVX2: only the scalar kernels exist";
  IsaGuard guard;
  const int64_t n = 4096;
  const std::vector<float> g = ramp(n), u(static_cast<size_t>(n), 1.5f);
  std::vector<float> simd(static_cast<size_t>(n)), scalar(simd.size());
  compute::gelu_tanh_mul(g.data(), u.data(), simd.data(), n);
  quant::set_isa(Isa::Scalar);
  compute::gelu_tanh_mul(g.data(), u.data(), scalar.data(), n);
  int64_t simd_differs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = gelu_mul_libm(g[static_cast<size_t>(i)], u[static_cast<size_t>(i)]);
    ASSERT_EQ(std::memcmp(&scalar[static_cast<size_t>(i)], &want, sizeof want), 0)
        << "x=" << g[static_cast<size_t>(i)] << ": " << scalar[static_cast<size_t>(i)] << " vs libm " << want;
    simd_differs += simd[static_cast<size_t>(i)] != want;
  }
  EXPECT_GT(simd_differs, 0) << "the inputs must tell the AVX2 polynomial from libm";
}

TEST(IsaSelection, ParseNamesEveryLevelAndRefusesOthers) {
  EXPECT_EQ(quant::parse_isa("scalar"), Isa::Scalar);
  EXPECT_EQ(quant::parse_isa("avx2"), Isa::AVX2);
  EXPECT_EQ(quant::parse_isa("avx512"), Isa::AVX512);
  testing::expect_error(ErrorKind::InvalidArgument, [] { quant::parse_isa("sse4"); }, "sse4");
}

}  // namespace
}  // namespace larql
