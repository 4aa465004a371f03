// quant/gemm.h: the variant choice for the tiled and decode kernels and the Q8_0 activation extras.
#include "quant/gemm.h"

#include <atomic>

#include "quant/blocks.h"
#include "quant/cpu.h"
#include "quant/kernels.h"
#include "quant/quant.h"
#include "util/half.h"

namespace larql::quant {
namespace {

struct Variant {
  const char* name;
  detail::GemmFn gemm;
  detail::GemmFn gemv;
};

// Best first. AVX-512 VNNI (16-row panels in zmm) before AVX-VNNI (8-row panels in ymm).
const Variant kVariants[] = {
    {"avx512-vnni", detail::gemm_avx512vnni, detail::gemv_avx512vnni},
    {"avx-vnni", detail::gemm_avxvnni, detail::gemv_avxvnni},
    {"avx2", detail::gemm_avx2, detail::gemv_avx2},
};
constexpr int kNumVariants = 3;

// Whether variant i can run now: the CPU has it and the active ISA allows it. A lowered ISA
// (set_isa, from the CLI's --isa) runs only that level's plain kernels, as a CPU without VNNI would.
bool cpu_has(int i) {
  const Isa a = active_isa();
  switch (i) {
    case 0: return cpu_has_avx512vnni() && a >= Isa::AVX512;
    case 1: return cpu_has_avxvnni() && a >= Isa::AVX2 && a == detect_isa();
    default: return a >= Isa::AVX2;
  }
}

std::atomic<int>& chosen() {  // index into kVariants; -1: the best available
  static std::atomic<int> v{-1};
  return v;
}

const Variant* current() {
  if (active_isa() < Isa::AVX2) return nullptr;
  const int c = chosen().load(std::memory_order_relaxed);
  if (c >= 0 && cpu_has(c)) return &kVariants[c];
  for (int i = 0; i < kNumVariants; ++i)
    if (cpu_has(i)) return &kVariants[i];
  return &kVariants[kNumVariants - 1];
}

}  // namespace

bool gemm_supported(DType w) {
  if (current() == nullptr) return false;
  switch (w) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q6_K: return true;
    default: return false;
  }
}

bool gemv_supported(DType w) {
  return gemm_supported(w);  // the same types: Q4_0, Q5_0, Q8_0, Q4_K, Q6_K
}

const char* gemm_isa_name() {
  const Variant* v = current();
  return v ? v->name : "none";
}

std::vector<std::string> gemm_variants() {
  std::vector<std::string> out;
  for (int i = 0; i < kNumVariants; ++i)
    if (cpu_has(i)) out.emplace_back(kVariants[i].name);
  return out;
}

bool gemm_use_variant(const std::string& name) {
  if (name.empty()) {
    chosen().store(-1);
    return true;
  }
  for (int i = 0; i < kNumVariants; ++i)
    if (name == kVariants[i].name && cpu_has(i)) {
      chosen().store(i);
      return true;
    }
  return false;
}

void prepare_gemm_acts(GemmActs& a, float* scale, int32_t* sum) {
  if (a.type != DType::Q8_0) return;
  const int64_t nb = a.cols / detail::QK8_0;
  for (int64_t t = 0; t < a.n; ++t) {
    const auto* blocks = reinterpret_cast<const detail::BlockQ8_0*>(a.rows + static_cast<size_t>(t) * a.row_bytes);
    for (int64_t b = 0; b < nb; ++b) {
      int32_t s = 0;
      for (int j = 0; j < detail::QK8_0; ++j) s += blocks[b].qs[j];
      scale[t * nb + b] = f16_to_f32(blocks[b].d);
      sum[t * nb + b] = s;
    }
  }
  a.scale = scale;
  a.sum = sum;
}

void gemm(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
          const GemmActs& a, float* y, int64_t ldy) {
  current()->gemm(w, cols, w_data, w_row_bytes, r0, r1, a, y, ldy);
}

void gemv(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
          const GemmActs& a, float* y, int64_t ldy) {
  current()->gemv(w, cols, w_data, w_row_bytes, r0, r1, a, y, ldy);
}

}  // namespace larql::quant
