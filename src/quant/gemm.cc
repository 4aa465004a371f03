// quant/gemm.h: ISA choice for the tiled kernels and the Q8_0 activation extras.
#include "quant/gemm.h"

#include <atomic>

#include "quant/blocks.h"
#include "quant/kernels.h"
#include "quant/quant.h"
#include "util/half.h"

namespace larql::quant {
namespace {

struct GemmChoice {
  detail::GemmFn fn;
  detail::GemmFn gemv;
  const char* name;
};

GemmChoice best_vnni() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avxvnni")) return {detail::gemm_avxvnni, detail::gemv_avxvnni, "avx-vnni"};
  if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
    return {detail::gemm_avx512vnni, detail::gemv_avx512vnni, "avx512-vnni"};
  return {detail::gemm_avx2, detail::gemv_avx2, "avx2"};
}

std::atomic<bool>& force_avx2() {
  static std::atomic<bool> on{false};
  return on;
}

GemmChoice current() {
  if (active_isa() < Isa::AVX2) return {nullptr, nullptr, "none"};
  static const GemmChoice vnni = best_vnni();
  if (force_avx2().load(std::memory_order_relaxed)) return {detail::gemm_avx2, detail::gemv_avx2, "avx2"};
  return vnni;
}

}  // namespace

bool gemm_supported(DType w) {
  if (current().fn == nullptr) return false;
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
  return current().gemv != nullptr && (w == DType::Q4_0 || w == DType::Q5_0 || w == DType::Q8_0);
}

const char* gemm_isa_name() { return current().name; }

void gemm_force_avx2(bool on) { force_avx2().store(on); }

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
  current().fn(w, cols, w_data, w_row_bytes, r0, r1, a, y, ldy);
}

void gemv(DType w, int64_t cols, const uint8_t* w_data, size_t w_row_bytes, int64_t r0, int64_t r1,
          const GemmActs& a, float* y, int64_t ldy) {
  current().gemv(w, cols, w_data, w_row_bytes, r0, r1, a, y, ldy);
}

}  // namespace larql::quant
