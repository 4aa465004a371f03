// quant::gemm (tiled prefill kernels) against the row kernel decode uses, bit for bit: every
// output of the tiled kernel must equal vec_dot_fn(w) on the same weight row and activation row
// (so a batched prompt and token-by-token decode give identical logits). For K-quants both must
// also equal the scalar reference (src/quant/dot_ref.cc) bit for bit. Every ISA variant the CPU
// has (AVX2, and VNNI where present) is checked; the expected values come from the row kernels,
// which tests/quant/vec_dot_test.cc checks against dequantised dot products in double.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "quant/cpu.h"
#include "quant/gemm.h"
#include "quant/quant.h"
#include "util/dtype.h"
#include "util/half.h"

namespace larql::quant {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Random bytes with sane f16 scales (as vec_dot_test's random_blocks): every quant bit pattern,
// negative Q6_K scales and Q8_0 -128 included.
std::vector<uint8_t> random_weight(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const auto& info = dtype_info(t);
  const size_t rb = *row_bytes(t, cols);
  std::vector<uint8_t> b(rb * rows);
  std::mt19937 rng(seed);
  for (auto& v : b) v = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> ud(-0.05f, 0.05f);
  auto put = [&](size_t off) {
    const uint16_t h = f32_to_f16(ud(rng));
    std::memcpy(&b[off], &h, 2);
  };
  for (size_t o = 0; o < b.size(); o += info.type_size) {
    switch (t) {
      case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: put(o); break;
      case DType::Q4_K: put(o); put(o + 2); break;
      case DType::Q6_K: put(o + 208); break;
      default: break;
    }
  }
  return b;
}

std::vector<uint8_t> quantised_acts(DType at, int64_t n, int64_t cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (auto& v : x) v = nd(rng);
  const size_t rb = *row_bytes(at, cols);
  std::vector<uint8_t> a(rb * n);
  for (int64_t t = 0; t < n; ++t) quantize_row(at, x.data() + t * cols, a.data() + t * rb, cols);
  return a;
}

// Runs gemm over rows [r0, r1) in the given split and compares every output with vec_dot_fn(w).
void expect_gemm_equals_rows(DType w, int64_t rows, int64_t cols, int64_t n, const std::vector<uint8_t>& wb,
                             const std::vector<uint8_t>& ab, const std::string& what, bool use_gemv = false) {
  auto run = use_gemv ? gemv : gemm;
  const DType at = vec_dot_type(w);
  const size_t wrb = *row_bytes(w, cols), arb = *row_bytes(at, cols);
  GemmActs a{at, cols, n, ab.data(), arb, nullptr, nullptr};
  std::vector<float> scale(static_cast<size_t>(n * cols / 32));
  std::vector<int32_t> sum(scale.size());
  prepare_gemm_acts(a, scale.data(), sum.data());
  std::vector<float> y(static_cast<size_t>(n * rows), -1e30f);
  // Calls with splits that are not a multiple of the panel height (nor of gemv's row group, nor
  // even): any split is correct. gemv also gets a first call of 3 rows, so later ones start odd.
  const int64_t mid = std::min<int64_t>(11, rows);
  const int64_t first = use_gemv ? std::min<int64_t>(3, mid) : mid;
  run(w, cols, wb.data(), wrb, 0, first, a, y.data(), rows);
  if (first < mid) run(w, cols, wb.data(), wrb, first, mid, a, y.data(), rows);
  if (mid < rows) run(w, cols, wb.data(), wrb, mid, rows, a, y.data(), rows);
  const VecDotFn dot = vec_dot_fn(w);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      const float want = dot(cols, wb.data() + r * wrb, ab.data() + t * arb);
      ASSERT_EQ(bits(y[t * rows + r]), bits(want))
          << what << " " << dtype_name(w) << " cols=" << cols << " n=" << n << " row " << r << " token " << t
          << ": " << y[t * rows + r] << " vs " << want;
    }
}

struct Shape {
  DType type;
  int64_t cols;
};

class Gemm : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    if (!gemm_supported(GetParam().type)) GTEST_SKIP() << "no tiled kernel on this CPU";
  }
  void TearDown() override { gemm_use_variant(""); }
};

// Each variant this CPU has (AVX-512 VNNI, AVX-VNNI, AVX2).
template <typename Fn>
void for_each_variant(Fn&& fn) {
  for (const std::string& v : gemm_variants()) {
    EXPECT_TRUE(gemm_use_variant(v));
    fn(v);
  }
  gemm_use_variant("");
}

TEST_P(Gemm, BitIdenticalToRowKernel) {
  const auto [t, cols] = GetParam();
  for_each_variant([&](const std::string& isa) {
    for (int64_t rows : {8, 13, 37}) {
      const auto wb = random_weight(t, rows, cols, 7 + static_cast<uint32_t>(rows));
      for (int64_t n : {1, 2, 3, 4, 5, 7, 9}) {
        const auto ab = quantised_acts(vec_dot_type(t), n, cols, 100 + static_cast<uint32_t>(n));
        expect_gemm_equals_rows(t, rows, cols, n, wb, ab, isa);
      }
    }
  });
}

// The decode kernel (prepared activations, no packing, several weight rows per step).
TEST_P(Gemm, GemvBitIdenticalToRowKernel) {
  const auto [t, cols] = GetParam();
  if (!gemv_supported(t)) GTEST_SKIP() << "no gemv kernel for this type";
  for_each_variant([&](const std::string& isa) {
    // Every row count up to two groups of 4 (the multi-row kernel and its pair / odd-row tail).
    for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 37}) {
      const auto wb = random_weight(t, rows, cols, 70 + static_cast<uint32_t>(rows));
      for (int64_t n : {1, 2, 3, 5}) {
        const auto ab = quantised_acts(vec_dot_type(t), n, cols, 200 + static_cast<uint32_t>(n));
        expect_gemm_equals_rows(t, rows, cols, n, wb, ab, isa + " gemv", true);
      }
    }
  });
}

// The int16 stages of the AVX2 kernels (maddubs pair sums added over several chunks) must not
// saturate: largest weights times activations of +-127 everywhere.
TEST_P(Gemm, ExtremeValuesDoNotSaturate) {
  const auto [t, cols] = GetParam();
  const int64_t rows = 8, n = 4;
  const auto& info = dtype_info(t);
  std::vector<uint8_t> wb(*row_bytes(t, cols) * rows, 0xFF);  // every quant at its maximum
  const uint16_t one = f32_to_f16(0.01f);
  for (size_t o = 0; o < wb.size(); o += info.type_size) {
    if (t == DType::Q6_K) {
      std::memcpy(&wb[o + 208], &one, 2);
      for (int g = 0; g < 16; ++g) wb[o + 192 + g] = (g % 2) ? 0x80 : 0x7F;  // scales -128 / 127
    } else {
      std::memcpy(&wb[o], &one, 2);
      if (t == DType::Q4_K) std::memcpy(&wb[o + 2], &one, 2);
      if (t == DType::Q8_0)  // alternate -128 and 127 weights
        for (int j = 0; j < 32; ++j) wb[o + 2 + j] = (j % 2) ? 0x80 : 0x7F;
    }
  }
  const DType at = vec_dot_type(t);
  const size_t arb = *row_bytes(at, cols);
  std::vector<float> x(cols);
  std::vector<uint8_t> ab(arb * n);
  for (int64_t tk = 0; tk < n; ++tk) {
    for (int64_t c = 0; c < cols; ++c) x[c] = (tk % 2 == 0) ? 1.0f : (c % 3 == 0 ? -1.0f : 1.0f);
    if (tk >= 2)
      for (auto& v : x) v = -v;
    quantize_row(at, x.data(), ab.data() + tk * arb, cols);
  }
  for_each_variant([&](const std::string& isa) {
    expect_gemm_equals_rows(t, rows, cols, n, wb, ab, isa);
    if (gemv_supported(t)) expect_gemm_equals_rows(t, rows, cols, n, wb, ab, isa + " gemv", true);
    // And the row kernel itself against the scalar reference (exact integers, tiny floats).
    const VecDotFn dot = vec_dot_fn(t);
    for (int64_t tk = 0; tk < n; ++tk) {
      const float got = dot(cols, wb.data(), ab.data() + tk * arb);
      const float ref = vec_dot_ref(t, cols, wb.data(), ab.data() + tk * arb);
      EXPECT_NEAR(got, ref, 1e-5 * std::abs(ref) + 1e-6) << isa << " token " << tk;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Formats, Gemm,
                         ::testing::Values(Shape{DType::Q4_0, 640}, Shape{DType::Q4_0, 96},
                                           Shape{DType::Q5_0, 640}, Shape{DType::Q5_0, 160},
                                           Shape{DType::Q5_0, 32}, Shape{DType::Q8_0, 640},
                                           Shape{DType::Q8_0, 224}, Shape{DType::Q4_K, 1024},
                                           Shape{DType::Q4_K, 256}, Shape{DType::Q6_K, 2048},
                                           Shape{DType::Q6_K, 256}),
                         [](const auto& info) {
                           return std::string(dtype_name(info.param.type)) + "_" + std::to_string(info.param.cols);
                         });

// K-quant row kernels of every ISA follow the scalar reference's float order exactly.
TEST(GemmKQuants, RowKernelsBitIdenticalToReference) {
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (int64_t cols : {256, 2048}) {
      const auto wb = random_weight(t == DType::Q5_K ? DType::Q4_K : t, 1, cols, 3);
      std::vector<uint8_t> w5;
      const std::vector<uint8_t>* w = &wb;
      if (t == DType::Q5_K) {  // Q5_K: random bytes with sane scales
        w5.resize(*row_bytes(t, cols));
        std::mt19937 rng(5);
        for (auto& v : w5) v = static_cast<uint8_t>(rng());
        const uint16_t h = f32_to_f16(0.02f), m = f32_to_f16(-0.01f);
        for (size_t o = 0; o < w5.size(); o += 176) {
          std::memcpy(&w5[o], &h, 2);
          std::memcpy(&w5[o + 2], &m, 2);
        }
        w = &w5;
      }
      const auto ab = quantised_acts(DType::Q8_K, 1, cols, 9);
      const float ref = vec_dot_ref(t, cols, w->data(), ab.data());
      for (Isa isa : {Isa::AVX2, Isa::AVX512}) {
        if (static_cast<int>(isa) > static_cast<int>(detect_isa())) continue;
        const float got = vec_dot_fn(t, isa)(cols, w->data(), ab.data());
        EXPECT_EQ(bits(got), bits(ref)) << dtype_name(t) << " " << isa_name(isa) << " cols=" << cols << ": "
                                        << got << " vs " << ref;
      }
    }
  }
}

// CPUID as the kernel choice reads it agrees with the kernel's own report in /proc/cpuinfo.
TEST(GemmDispatch, CpuFeaturesMatchProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      flags = " " + line.substr(line.find(':') + 1) + " ";
      break;
    }
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags";
  auto has = [&](const char* f) { return flags.find(std::string(" ") + f + " ") != std::string::npos; };
  EXPECT_EQ(cpu_has_avxvnni(), has("avx_vnni"));
  EXPECT_EQ(cpu_has_avx512(), has("avx512f") && has("avx512dq") && has("avx512bw") && has("avx512vl"));
  EXPECT_EQ(cpu_has_avx512vnni(), cpu_has_avx512() && has("avx512_vnni"));
}

TEST(GemmDispatch, Variants) {
  const auto v = gemm_variants();
  if (detect_isa() < Isa::AVX2) {
    EXPECT_TRUE(v.empty());
    return;
  }
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.back(), "avx2");
  EXPECT_EQ(std::string(gemm_isa_name()), v.front());  // the best by default
  EXPECT_FALSE(gemm_use_variant("sse9"));
  EXPECT_EQ(std::string(gemm_isa_name()), v.front());
  // A lowered ISA runs that level's plain kernels, as a CPU without VNNI would.
  const Isa saved = active_isa();
  set_isa(Isa::AVX2);
  if (detect_isa() > Isa::AVX2) EXPECT_EQ(gemm_variants(), std::vector<std::string>{"avx2"});
  set_isa(saved);
  std::printf("note: tiled kernel variants on this CPU:");
  for (const auto& x : v) std::printf(" %s", x.c_str());
  std::printf("\n");
}

TEST(GemmDispatch, SupportedTypesFollowTheIsa) {
  const Isa saved = active_isa();
  set_isa(Isa::Scalar);
  EXPECT_FALSE(gemm_supported(DType::Q5_0));
  EXPECT_STREQ(gemm_isa_name(), "none");
  set_isa(saved);
  if (detect_isa() >= Isa::AVX2) {
    for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q6_K}) EXPECT_TRUE(gemm_supported(t));
    for (DType t : {DType::F32, DType::F16, DType::Q5_K, DType::Q4_1, DType::Q8_K}) EXPECT_FALSE(gemm_supported(t));
  }
}

}  // namespace
}  // namespace larql::quant
