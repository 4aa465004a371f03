#include "util/dtype.h"

#include <cctype>
#include <string>

namespace larql {
namespace {

// Block layouts: ggml-common.h. QK4_0=QK5_0=QK8_0=32, QK_K=256.
constexpr DTypeInfo kTable[] = {
    {DType::F32, "F32", 1, 4, true},
    {DType::F16, "F16", 1, 2, true},
    {DType::Q4_0, "Q4_0", 32, 18, true},   // f16 d; u8 qs[16]
    {DType::Q4_1, "Q4_1", 32, 20, true},   // f16 d, m; u8 qs[16]
    {DType::Q5_0, "Q5_0", 32, 22, true},   // f16 d; u8 qh[4]; u8 qs[16]
    {DType::Q5_1, "Q5_1", 32, 24, true},   // f16 d, m; u8 qh[4]; u8 qs[16]
    {DType::Q8_0, "Q8_0", 32, 34, true},   // f16 d; i8 qs[32]
    {DType::Q8_1, "Q8_1", 32, 36, false},  // f16 d, s; i8 qs[32]
    {DType::Q2_K, "Q2_K", 256, 84, false},
    {DType::Q3_K, "Q3_K", 256, 110, false},
    {DType::Q4_K, "Q4_K", 256, 144, true},  // f16 d, dmin; u8 scales[12]; u8 qs[128]
    {DType::Q5_K, "Q5_K", 256, 176, true},  // f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
    {DType::Q6_K, "Q6_K", 256, 210, true},  // u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
    {DType::Q8_K, "Q8_K", 256, 292, true},  // f32 d; i8 qs[256]; i16 bsums[16]
    {DType::BF16, "BF16", 1, 2, true},
};

}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t id) {
  for (const auto& e : kTable)
    if (static_cast<uint32_t>(e.type) == id) return e;
  return std::nullopt;
}

const DTypeInfo& dtype_info(DType t) {
  for (const auto& e : kTable)
    if (e.type == t) return e;
  return kTable[0];  // unreachable for valid enum values
}

const char* dtype_name(DType t) { return dtype_info(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string up;
  for (char c : name) up.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  for (const auto& e : kTable)
    if (up == e.name) return e.type;
  return std::nullopt;
}

std::optional<size_t> row_bytes(DType t, uint64_t n) {
  const auto& info = dtype_info(t);
  if (n % info.block_size != 0) return std::nullopt;
  return static_cast<size_t>(n / info.block_size) * info.type_size;
}

}  // namespace larql
