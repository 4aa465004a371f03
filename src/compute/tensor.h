// A type-erased, read-only view of a 2-D weight stored in any supported format.
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/dtype.h"

namespace larql {

/// `rows` rows of `cols` elements each, stored row-major in `type` (GGUF `dims = [cols, rows]`).
/// A 1-D tensor is one row. `data` is usually a zero-copy view into a memory-mapped file.
struct TensorView {
  DType type = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;  ///< bytes per row

  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
  bool empty() const { return data == nullptr; }
};

}  // namespace larql
