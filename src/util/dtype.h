// Tensor element formats, numbered as in the GGUF spec (ggml_type), and their block geometry.
// Source: ggml/include/ggml.h (enum ggml_type) and ggml-common.h (block structs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace larql {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  BF16 = 30,
};

struct DTypeInfo {
  DType type;
  const char* name;    ///< "Q4_K", as llama.cpp prints it
  uint32_t block_size; ///< elements per block (1 for float types)
  uint32_t type_size;  ///< bytes per block
  bool supported;      ///< we can dequantise / compute with it
};

/// Geometry of a GGUF type id; nullopt for an id we do not know at all.
std::optional<DTypeInfo> dtype_info(uint32_t ggml_type_id);
/// Geometry of a known type (never fails for enum values above).
const DTypeInfo& dtype_info(DType t);
const char* dtype_name(DType t);
/// Parse "q4_k" / "Q4_K" / "f32"...; nullopt if unknown.
std::optional<DType> dtype_from_name(std::string_view name);

/// Bytes for a row of n elements; nullopt if n is not a multiple of the block size.
std::optional<size_t> row_bytes(DType t, uint64_t n);

}  // namespace larql
