// Lossless re-encoding of 4/5-bit block rows as Q8_0 (layouts: ggml-common.h).
#include <cstring>

#include "quant/blocks.h"
#include "quant/quant.h"

namespace larql::quant {

using namespace detail;

bool repack_to_q8_0(DType t, const void* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  const int64_t nb = n / QK8_0;
  if (t == DType::Q4_0) {
    const auto* x = static_cast<const BlockQ4_0*>(src);
    for (int64_t i = 0; i < nb; ++i) {
      y[i].d = x[i].d;
      for (int j = 0; j < 16; ++j) {
        y[i].qs[j] = static_cast<int8_t>((x[i].qs[j] & 0x0F) - 8);
        y[i].qs[j + 16] = static_cast<int8_t>((x[i].qs[j] >> 4) - 8);
      }
    }
    return true;
  }
  if (t == DType::Q5_0) {
    const auto* x = static_cast<const BlockQ5_0*>(src);
    for (int64_t i = 0; i < nb; ++i) {
      y[i].d = x[i].d;
      uint32_t qh;
      std::memcpy(&qh, x[i].qh, sizeof qh);
      for (int j = 0; j < 16; ++j) {
        const int h0 = ((qh >> j) << 4) & 0x10;
        const int h1 = (qh >> (j + 12)) & 0x10;
        y[i].qs[j] = static_cast<int8_t>(((x[i].qs[j] & 0x0F) | h0) - 16);
        y[i].qs[j + 16] = static_cast<int8_t>(((x[i].qs[j] >> 4) | h1) - 16);
      }
    }
    return true;
  }
  return false;
}

}  // namespace larql::quant
