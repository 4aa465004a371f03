// Public quant API: argument checks and run-time ISA dispatch over the per-ISA kernel tables.
#include "quant/quant.h"

#include <cpuid.h>

#include <atomic>
#include <cstring>
#include <string>

#include "quant/cpu.h"
#include "quant/kernels.h"
#include "util/error.h"

namespace larql::quant {
namespace {

using detail::DotTable;

// F16C (CPUID.1:ECX bit 29) and BMI2 (CPUID.(7,0):EBX bit 8) read directly: clang's
// __builtin_cpu_supports does not know these names (Intel SDM vol. 2A, CPUID).
bool has_f16c_bmi2() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 29))) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (b & (1u << 8)) != 0;
}

Isa detect_once() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c_bmi2();
  // AVX512 means AVX-512 F/BW/VL/DQ with VNNI: the tiled prefill kernels and attention have
  // 512-bit versions for it. The row (vec_dot) kernels stay the AVX2 table there: a 512-bit
  // port of the Q8_0/Q5_0 row kernels (no VNNI) measured slower than AVX2 on a Xeon.
  if (!avx2) return Isa::Scalar;
  return cpu_has_avx512vnni() ? Isa::AVX512 : Isa::AVX2;
}

Isa clamp_isa(Isa isa) {
  const Isa best = detect_isa();
  return static_cast<int>(isa) > static_cast<int>(best) ? best : isa;
}

std::atomic<int>& active_slot() {
  static std::atomic<int> slot{static_cast<int>(detect_isa())};
  return slot;
}

const DotTable& table_for(Isa isa) {
  switch (isa) {
    case Isa::AVX512:  // the AVX2 row kernels (see detect_once)
    case Isa::AVX2: return detail::avx2_dot_table();
    default: return detail::ref_dot_table();
  }
}

// Table slot of a type id; -1 for an id outside the tables (then: Unsupported).
int type_index(DType t) {
  const auto i = static_cast<uint32_t>(t);
  return i < static_cast<uint32_t>(detail::kMaxTypeId) ? static_cast<int>(i) : -1;
}

// Checks shared by the row functions: a known type and n a positive multiple of its block.
void check_row(const char* fn, DType t, int64_t n) {
  const auto& info = dtype_info(t);
  if (n < 0 || n % info.block_size != 0)
    throw Error(ErrorKind::InvalidArgument,
                std::string(fn) + ": n=" + std::to_string(n) + " is not a multiple of the " +
                    info.name + " block size " + std::to_string(info.block_size));
}

// "Q4_K (id 12)": the id too, since an unknown id has no name of its own.
std::string type_label(DType t) {
  const auto id = static_cast<uint32_t>(t);
  return std::string(dtype_info(id) ? dtype_name(t) : "unknown") + " (id " + std::to_string(id) + ")";
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::AVX2: return "avx2";
    case Isa::AVX512: return "avx512";
  }
  return "unknown";
}

Isa detect_isa() {
  static const Isa best = detect_once();
  return best;
}

Isa active_isa() { return static_cast<Isa>(active_slot().load(std::memory_order_relaxed)); }

void set_isa(Isa isa) { active_slot().store(static_cast<int>(clamp_isa(isa))); }

Isa parse_isa(std::string_view name) {
  for (Isa isa : {Isa::Scalar, Isa::AVX2, Isa::AVX512})
    if (name == isa_name(isa)) return isa;
  throw Error(ErrorKind::InvalidArgument,
              "unknown ISA '" + std::string(name) + "' (accepted: scalar, avx2, avx512)");
}

const char* vec_dot_variant() { return active_isa() >= Isa::AVX2 ? "avx2" : "scalar"; }

DType vec_dot_type(DType weight) {
  switch (weight) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0: return DType::Q8_0;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return DType::Q8_K;
    default: return DType::F32;
  }
}

bool can_dequantize(DType t) { return detail::ref_dequant_fn(t) != nullptr; }

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const auto fn = detail::ref_dequant_fn(t);
  if (!fn)
    throw Error(ErrorKind::Unsupported,
                "dequantize_row: no kernel for dtype " + type_label(t));
  check_row("dequantize_row", t, n);
  fn(src, dst, n);
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  detail::QuantFn fn = active_isa() >= Isa::AVX2 ? detail::avx2_quant_fn(t) : nullptr;
  if (!fn) fn = detail::ref_quant_fn(t);
  if (!fn)
    throw Error(ErrorKind::Unsupported,
                "quantize_row: no quantiser for dtype " + type_label(t));
  check_row("quantize_row", t, n);
  fn(src, dst, n);
}

VecDotFn vec_dot_fn(DType w, Isa isa) {
  const int i = type_index(w);
  if (i >= 0) {
    if (VecDotFn f = table_for(clamp_isa(isa)).dot[i]) return f;
    if (VecDotFn f = detail::ref_dot_table().dot[i]) return f;
  }
  throw Error(ErrorKind::Unsupported, "vec_dot: no kernel for dtype " + type_label(w));
}

VecDotFn vec_dot_fn(DType w) { return vec_dot_fn(w, active_isa()); }

float vec_dot(DType w, int64_t n, const void* w_row, const void* act) {
  const VecDotFn f = vec_dot_fn(w);
  check_row("vec_dot", w, n);
  return f(n, w_row, act);
}

float vec_dot_ref(DType w, int64_t n, const void* w_row, const void* act) {
  const VecDotFn f = vec_dot_fn(w, Isa::Scalar);
  check_row("vec_dot_ref", w, n);
  return f(n, w_row, act);
}

}  // namespace larql::quant
