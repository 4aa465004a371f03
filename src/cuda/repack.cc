#include <algorithm>
#include <cstring>

#include "cuda/blocks.h"

namespace larql::cuda {

void repack_row(DType t, const uint8_t* src, int64_t cols, uint8_t* dst) {
  const size_t out = device_row_bytes(t, cols);
  std::memset(dst, 0, out);
  const int64_t nb32 = cols / 32, nb256 = cols / 256;
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(cols) * 4);
      return;
    case DType::F16:
    case DType::BF16:
      std::memcpy(dst, src, static_cast<size_t>(cols) * 2);
      return;
    case DType::Q4_K:
      std::memcpy(dst, src, static_cast<size_t>(nb256) * 144);
      return;
    case DType::Q8_0:  // block: f16 d, int8 qs[32]
      for (int64_t b = 0; b < nb32; ++b) {
        const uint8_t* blk = src + b * 34;
        std::memcpy(dst + b * 32, blk + 2, 32);
        std::memcpy(dst + nb32 * 32 + b * 2, blk, 2);
      }
      return;
    case DType::Q5_0:  // block: f16 d, uint8 qh[4], uint8 qs[16]
      for (int64_t b = 0; b < nb32; ++b) {
        const uint8_t* blk = src + b * 22;
        std::memcpy(dst + b * 16, blk + 6, 16);
        std::memcpy(dst + nb32 * 16 + b * 4, blk + 2, 4);
        std::memcpy(dst + nb32 * 20 + b * 2, blk, 2);
      }
      return;
    case DType::Q6_K:  // block: ql[128], qh[64], int8 scales[16], f16 d (210 bytes) -> 224
      for (int64_t b = 0; b < nb256; ++b) std::memcpy(dst + b * 224, src + b * 210, 210);
      return;
    default:
      return;
  }
}

}  // namespace larql::cuda
