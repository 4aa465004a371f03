// IEEE binary16 (f16) and bfloat16 conversions.
#pragma once

#include <cstdint>
#include <cstring>

namespace larql {

/// f16 -> f32, exact (every f16 is representable), handles subnormals, inf and NaN.
float f16_to_f32(uint16_t h);
/// f32 -> f16 with round-to-nearest-even; overflow gives inf.
uint16_t f32_to_f16(float f);

/// bf16 -> f32: the upper 16 bits of an f32.
inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// f32 -> bf16 with round-to-nearest-even; NaN stays a quiet NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace larql
