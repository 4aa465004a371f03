// Internal: ggml block structs and small helpers shared by the quant kernels.
// Layouts: ggml/src/ggml-common.h (block_q4_0 ... block_q8_K), byte for byte; all fields are
// little-endian and blocks are packed (no padding), so GGUF tensor data is read in place.
#pragma once

#include <cstdint>
#include <cstring>

namespace larql::quant::detail {

constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK8_0 = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;

/// 32 weights, value = d * (q - 8), q in [0, 15]. qs[j] holds element j (low nibble) and
/// element j + 16 (high nibble).
struct BlockQ4_0 {
  uint16_t d;       // f16
  uint8_t qs[16];
};
/// 32 weights, value = d * q + m, q in [0, 15]; nibble order as Q4_0.
struct BlockQ4_1 {
  uint16_t d, m;    // f16
  uint8_t qs[16];
};
/// 32 weights, value = d * (q - 16), q = nibble | (bit j of qh) << 4, q in [0, 31].
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];    // bit j: 5th bit of element j (little-endian uint32)
  uint8_t qs[16];
};
/// 32 weights, value = d * q + m, q in [0, 31]; bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
/// 32 values, value = d * q, q in [-127, 127] (int8).
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
/// 256 weights in 8 sub-blocks of 32; value = d * sc[j] * q - dmin * m[j], q in [0, 15];
/// 6-bit sc/m packed in scales[12] (see get_scale_min_k4). qs[32*p + l] holds element
/// 64p + l (low nibble) and 64p + 32 + l (high nibble).
struct BlockQ4K {
  uint16_t d, dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
};
/// As Q4_K plus a 5th bit: bit (2p) of qh[l] for element 64p + l, bit (2p+1) for 64p + 32 + l.
struct BlockQ5K {
  uint16_t d, dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
/// 256 weights in 16 groups of 16; value = d * scales[g] * (q - 32), q in [0, 63]:
/// 4 low bits in ql, 2 high bits in qh (see dequantize_q6_K).
struct BlockQ6K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  uint16_t d;
};
/// 256 activations, value = d * q (d is f32); bsums[g] = sum of qs[16g .. 16g+15].
struct BlockQ8K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4K) == 144 && sizeof(BlockQ5K) == 176);
static_assert(sizeof(BlockQ6K) == 210 && sizeof(BlockQ8K) == 292);

/// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block.
/// Source: ggml-quants.c get_scale_min_k4.
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

/// Round to nearest, ties to even, for |x| < 2^22. Source: ggml-quants.c nearest_int.
inline int nearest_int(float fval) {
  float val = fval + 12582912.f;
  int i;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

}  // namespace larql::quant::detail
