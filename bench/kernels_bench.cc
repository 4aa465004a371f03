// Kernel microbenchmarks (Google Benchmark): `make bench-kernels`.
//
//   Gemm/<type>/.../<variant>    tiled prefill kernel, one thread, one layer-shaped matrix;
//                                GOP/s counts 2 ops per multiply-add.
//   RowDot/<type>                decode's row kernel over a matrix larger than the last-level
//                                cache (the lm_head case): GB/s of weights read; 640 columns
//                                (2048 for the K-quants, the down projection's).
//   Gemv/<type>/<variant>/<hot>  the same through quant::gemv (decode's path in matmul); hot:1
//                                runs over 1 MiB of weights instead (cache-resident: the
//                                kernel's compute ceiling).
//   ReadBandwidth                plain streaming read of the same size: the decode roofline.
//   Int8Peak/<isa>               a register-only chain of int8 dot instructions: the int8 peak.
//   Attention/<keys>             compute::attend_group, 4 heads of 256 over `keys` K/V rows.
//   AttentionCold/<keys>         the same with the K/V rows evicted from the caches first
//                                (decode's case); GB/s of K and V read.
//
// `--isa=scalar|avx2|avx512` (or $LARQL_ISA, as for the CLI) lowers the instruction set every
// kernel family uses; the rest of the arguments go to Google Benchmark.
//
// Timings are recorded, never asserted (docs/BENCHMARKS.md).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <random>
#include <vector>

#include "compute/attention.h"
#include "quant/cpu.h"
#include "quant/gemm.h"
#include "quant/quant.h"
#include "util/dtype.h"
#include "util/half.h"

namespace {

using larql::DType;
namespace quant = larql::quant;

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

std::vector<uint8_t> quantised(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const size_t rb = *larql::row_bytes(t, cols);
  std::vector<uint8_t> out(rb * rows);
  std::vector<float> row;
  for (int64_t r = 0; r < rows; ++r) {
    row = randn(cols, seed + static_cast<uint32_t>(r));
    quant::quantize_row(t, row.data(), out.data() + r * rb, cols);
  }
  return out;
}

const char* const kVariantNames[] = {"avx512-vnni", "avx-vnni", "avx2"};

// args: type, rows, cols, tokens, variant (index into kVariantNames)
void BM_Gemm(benchmark::State& state) {
  const auto t = static_cast<DType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2), n = state.range(3);
  if (!quant::gemm_use_variant(kVariantNames[state.range(4)]) || !quant::gemm_supported(t)) {
    state.SkipWithError("variant not available on this CPU");
    return;
  }
  const auto w = quantised(t, rows, cols, 1);
  const DType at = quant::vec_dot_type(t);
  const auto x = randn(static_cast<size_t>(n * cols), 99);
  const size_t arb = *larql::row_bytes(at, cols);
  std::vector<uint8_t> a(arb * n);
  for (int64_t i = 0; i < n; ++i) quant::quantize_row(at, x.data() + i * cols, a.data() + i * arb, cols);
  quant::GemmActs acts{at, cols, n, a.data(), arb, nullptr, nullptr};
  std::vector<float> scale(static_cast<size_t>(n * cols / 32));
  std::vector<int32_t> sum(scale.size());
  quant::prepare_gemm_acts(acts, scale.data(), sum.data());
  std::vector<float> y(static_cast<size_t>(n * rows));
  const size_t wrb = *larql::row_bytes(t, cols);
  for (auto _ : state) {
    quant::gemm(t, cols, w.data(), wrb, 0, rows, acts, y.data(), rows);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(larql::dtype_name(t)) + " " + quant::gemm_isa_name());
  state.counters["GOP/s"] = benchmark::Counter(2.0 * rows * cols * n, benchmark::Counter::kIsIterationInvariantRate);
  quant::gemm_use_variant("");
}

// Shapes of the default model's prefill matmuls (rows x cols) at 512 tokens.
void GemmArgs(benchmark::internal::Benchmark* b) {
  const int64_t shapes[][3] = {{static_cast<int64_t>(DType::Q5_0), 2048, 640},
                               {static_cast<int64_t>(DType::Q4_K), 640, 2048},
                               {static_cast<int64_t>(DType::Q6_K), 640, 2048},
                               {static_cast<int64_t>(DType::Q8_0), 256, 640}};
  for (const auto& s : shapes)
    for (int v : {0, 1, 2}) b->Args({s[0], s[1], s[2], 512, v});
  b->ArgNames({"type", "rows", "cols", "tokens", "variant"});
  b->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_Gemm)->Apply(GemmArgs);

// Row length of the decode benchmarks: the model's 640 for the 32-element formats, the FFN's
// 2048 (the down projection's) for the K-quants, whose blocks hold 256.
int64_t decode_cols(DType t) { return t == DType::Q4_K || t == DType::Q6_K || t == DType::Q5_K ? 2048 : 640; }

// Decode: rows of `type` against one activation, over 512 MiB-ish of weights so the caches
// cannot hold them (the Q8_0 lm_head is 168 MiB; this machine class has up to 480 MiB of L3).
void BM_RowDot(benchmark::State& state) {
  const auto t = static_cast<DType>(state.range(0));
  const int64_t cols = decode_cols(t);
  const size_t wrb = *larql::row_bytes(t, cols);
  const int64_t rows = static_cast<int64_t>((512ull << 20) / wrb);
  std::vector<uint8_t> w(wrb * rows);
  std::mt19937 rng(3);
  for (size_t i = 0; i < w.size(); i += 4096) w[i] = static_cast<uint8_t>(rng());  // touch every page
  const auto x = randn(cols, 5);
  const DType at = quant::vec_dot_type(t);
  std::vector<uint8_t> a(*larql::row_bytes(at, cols));
  quant::quantize_row(at, x.data(), a.data(), cols);
  const quant::VecDotFn dot = quant::vec_dot_fn(t);
  float acc = 0;
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r) acc += dot(cols, w.data() + r * wrb, a.data());
    benchmark::DoNotOptimize(acc);
  }
  state.SetLabel(larql::dtype_name(t));
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.size()) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_RowDot)
    ->Arg(static_cast<int64_t>(DType::Q8_0))
    ->Arg(static_cast<int64_t>(DType::Q5_0))
    ->Arg(static_cast<int64_t>(DType::Q4_K))
    ->Arg(static_cast<int64_t>(DType::Q6_K))
    ->Unit(benchmark::kMillisecond);

// Decode as matmul runs it: quant::gemv over the same matrix with prepared activations.
void BM_Gemv(benchmark::State& state) {
  const auto t = static_cast<DType>(state.range(0));
  if (!quant::gemm_use_variant(kVariantNames[state.range(1)]) || !quant::gemv_supported(static_cast<DType>(state.range(0)))) {
    state.SkipWithError("variant not available on this CPU");
    return;
  }
  const int64_t cols = decode_cols(t);
  const size_t wrb = *larql::row_bytes(t, cols);
  // range(2) == 1: 1 MiB of weights (cache-resident: the kernel's compute ceiling).
  const int64_t rows = static_cast<int64_t>(((state.range(2) == 1 ? 1ull : 512ull) << 20) / wrb);
  std::vector<uint8_t> w(wrb * rows);
  std::mt19937 rng(3);
  for (size_t i = 0; i < w.size(); i += 4096) w[i] = static_cast<uint8_t>(rng());
  const auto x = randn(cols, 5);
  const DType at = quant::vec_dot_type(t);
  std::vector<uint8_t> a(*larql::row_bytes(at, cols));
  quant::quantize_row(at, x.data(), a.data(), cols);
  quant::GemmActs acts{at, cols, 1, a.data(), a.size(), nullptr, nullptr};
  std::vector<float> scale(cols / 32);
  std::vector<int32_t> sum(cols / 32);
  quant::prepare_gemm_acts(acts, scale.data(), sum.data());
  std::vector<float> y(static_cast<size_t>(rows));
  for (auto _ : state) {
    quant::gemv(t, cols, w.data(), wrb, 0, rows, acts, y.data(), rows);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(larql::dtype_name(t)) + " " + quant::gemm_isa_name());
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.size()) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  quant::gemm_use_variant("");
}
void GemvArgs(benchmark::internal::Benchmark* b) {
  for (DType t : {DType::Q8_0, DType::Q5_0, DType::Q4_0, DType::Q4_K, DType::Q6_K})
    for (int hot : {0, 1})
      for (int v : {0, 1, 2}) b->Args({static_cast<int64_t>(t), v, hot});
  b->ArgNames({"type", "variant", "hot"});
  b->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_Gemv)->Apply(GemvArgs);

__attribute__((target("avx2"))) void BM_ReadBandwidth(benchmark::State& state) {
  std::vector<uint8_t> w(512ull << 20, 1);
  for (auto _ : state) {
    __m256i s = _mm256_setzero_si256();
    const auto* p = reinterpret_cast<const __m256i*>(w.data());
    for (size_t i = 0; i < w.size() / 32; i += 4)
      s = _mm256_add_epi8(_mm256_add_epi8(s, _mm256_loadu_si256(p + i)),
                          _mm256_add_epi8(_mm256_loadu_si256(p + i + 1),
                                          _mm256_add_epi8(_mm256_loadu_si256(p + i + 2), _mm256_loadu_si256(p + i + 3))));
    benchmark::DoNotOptimize(s);
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.size()) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ReadBandwidth)->Unit(benchmark::kMillisecond);

// Register-only int8 dot throughput: 8 independent accumulators, 32 multiply-adds per lane
// group per instruction (AVX2: maddubs + madd pairs count as one 32-MAC step).
__attribute__((target("avx2"))) void BM_Int8PeakAvx2(benchmark::State& state) {
  __m256i acc[8];
  for (auto& v : acc) v = _mm256_setzero_si256();
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  constexpr int kIters = 1 << 16;
  for (auto _ : state) {
    for (int i = 0; i < kIters; ++i)
      for (auto& v : acc) v = _mm256_add_epi32(v, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
    for (auto& v : acc) benchmark::DoNotOptimize(v);
  }
  state.counters["GOP/s"] = benchmark::Counter(2.0 * 32 * 8 * kIters, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Int8PeakAvx2);

__attribute__((target("avx2,avxvnni"))) void BM_Int8PeakAvxVnni(benchmark::State& state) {
  if (!quant::cpu_has_avxvnni()) {
    state.SkipWithError("no AVX-VNNI");
    return;
  }
  __m256i acc[8];
  for (auto& v : acc) v = _mm256_setzero_si256();
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  constexpr int kIters = 1 << 16;
  for (auto _ : state) {
    for (int i = 0; i < kIters; ++i)
      for (auto& v : acc) v = _mm256_dpbusd_avx_epi32(v, a, b);
    for (auto& v : acc) benchmark::DoNotOptimize(v);
  }
  state.counters["GOP/s"] = benchmark::Counter(2.0 * 32 * 8 * kIters, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Int8PeakAvxVnni);

void BM_Attention(benchmark::State& state) {
  const int64_t m = state.range(0), hd = 256, nq = 4;
  const auto q = randn(static_cast<size_t>(nq * hd), 1), k = randn(static_cast<size_t>(m * hd), 2),
             v = randn(static_cast<size_t>(m * hd), 3);
  std::vector<float> scores(static_cast<size_t>(nq * m)), out(static_cast<size_t>(nq * hd));
  for (auto _ : state) {
    larql::compute::attend_group(q.data(), nq, k.data(), v.data(), m, hd, hd, 0.0625f, 0.0f, scores.data(), out.data());
    benchmark::DoNotOptimize(out.data());
  }
  // q.k and p.v: 2 * nq * m * hd multiply-adds.
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * nq * m * hd, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Attention)->Arg(256)->Arg(512);

// Decode's case: the K/V rows come from memory, not cache (a decode step streams ~250 MB of
// weights between two visits of a layer's K/V). Every iteration first evicts them by reading a
// 64 MiB buffer (not timed); one thread runs attend_group over the keys, all 4 heads sharing
// each row's loads. GB/s counts the K and V bytes read.
void BM_AttentionCold(benchmark::State& state) {
  const int64_t m = state.range(0), hd = 256, nq = 4;
  const auto q = randn(static_cast<size_t>(nq * hd), 1), k = randn(static_cast<size_t>(m * hd), 2),
             v = randn(static_cast<size_t>(m * hd), 3);
  std::vector<float> scores(static_cast<size_t>(nq * m)), out(static_cast<size_t>(nq * hd));
  std::vector<uint64_t> evict(size_t{64} << 17, 1);  // 64 MiB
  uint64_t sink = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (size_t i = 0; i < evict.size(); i += 8) sink += evict[i];
    state.ResumeTiming();
    larql::compute::attend_group(q.data(), nq, k.data(), v.data(), m, hd, hd, 0.0625f, 0.0f, scores.data(), out.data());
    benchmark::DoNotOptimize(out.data());
  }
  benchmark::DoNotOptimize(sink);
  state.counters["GB/s"] =
      benchmark::Counter(2.0 * m * hd * sizeof(float) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionCold)->Arg(512)->Arg(1024)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  // The ISA is chosen before any kernel runs, as in the CLI (src/cli/main.cc).
  const char* isa = std::getenv("LARQL_ISA");
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a.rfind("--isa=", 0) == 0) {
      isa = argv[i] + 6;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  if (isa != nullptr && *isa != '\0') {
    try {
      quant::set_isa(quant::parse_isa(isa));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "larql_kernel_bench: %s\n", e.what());
      return 2;
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
