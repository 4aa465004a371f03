// The CUDA backend's weight layouts and their decoding, shared by the kernels (nvcc) and by the
// CPU reference the tests run without a GPU (tests/cuda/blocks_test.cc): the same functions decode
// a weight on both sides. docs/backends.md "Weight layouts".
//
// A weight row is decoded in units of 32 consecutive values. Each row starts 16-byte aligned, so
// a kernel reads quantised bytes 16 at a time. Layouts (GGML block formats: ggml-common.h):
//   F32, F16, BF16  the values as stored.
//   Q4_K            GGML's own super-blocks (144 bytes: d, dmin, 12 bytes of 6-bit scales/mins,
//                   128 bytes of 4-bit quants; a multiple of 16, quants at offset 16).
//   Q6_K            GGML's super-block (ql 128, qh 64, scales 16, d 2 = 210 bytes) padded to 224.
//   Q8_0            per row: every block's 32 int8 quants, then every block's f16 scale.
//   Q5_0            per row: every block's 16 bytes of low nibbles, then every block's 4 bytes
//                   of fifth bits, then every block's f16 scale.
// Each row is padded to a multiple of 16 bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "util/dtype.h"

#if defined(__CUDACC__)
#define LARQL_HD __host__ __device__ __forceinline__
#define LARQL_UNROLL _Pragma("unroll")
#else
#define LARQL_HD inline
#define LARQL_UNROLL
#endif

namespace larql::cuda {

inline constexpr int kUnit = 32;  ///< values decoded together

/// True if the CUDA backend holds weights of type t (the others are refused by name).
inline bool device_supports(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q5_0: case DType::Q4_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

LARQL_HD size_t align16(size_t n) { return (n + 15) & ~static_cast<size_t>(15); }

/// Bytes of one row of `cols` values in the device layout of t (cols a multiple of t's block).
LARQL_HD size_t device_row_bytes(DType t, int64_t cols) {
  const size_t c = static_cast<size_t>(cols);
  switch (t) {
    case DType::F32: return align16(c * 4);
    case DType::F16: case DType::BF16: return align16(c * 2);
    case DType::Q8_0: return align16(c / 32 * 34);
    case DType::Q5_0: return align16(c / 32 * 22);
    case DType::Q4_K: return c / 256 * 144;
    case DType::Q6_K: return c / 256 * 224;
    default: return 0;
  }
}

// ---- portable loads and conversions -------------------------------------------------------

struct Bytes16 {
  uint32_t w[4];
};

/// 16 bytes from a 16-byte-aligned address.
LARQL_HD Bytes16 load16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  return Bytes16{{v.x, v.y, v.z, v.w}};
#else
  Bytes16 b;
  std::memcpy(b.w, p, 16);
  return b;
#endif
}

LARQL_HD uint32_t load4(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}

LARQL_HD uint16_t load2(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

LARQL_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

/// IEEE half to float, exactly (subnormals included).
LARQL_HD float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);
    // subnormal: man * 2^-24
    const float f = static_cast<float>(man) * 5.9604644775390625e-08f;
    return sign ? -f : f;
  }
  if (exp == 31) return bits_to_float(sign | 0x7F800000u | (man << 13));
  return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}

LARQL_HD float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

LARQL_HD uint8_t byte_of(const Bytes16& b, int i) { return static_cast<uint8_t>(b.w[i >> 2] >> ((i & 3) * 8)); }

// ---- decoding one unit of 32 values ---------------------------------------------------------

/// w[0..31] = values u*32 .. u*32+31 of a row in the device layout of T (cols values).
template <DType T>
LARQL_HD void decode_unit(const uint8_t* row, int64_t cols, int64_t u, float* w);

template <>
LARQL_HD void decode_unit<DType::F32>(const uint8_t* row, int64_t, int64_t u, float* w) {
  const uint8_t* p = row + u * 128;
LARQL_UNROLL
  for (int c = 0; c < 8; ++c) {
    const Bytes16 b = load16(p + c * 16);
LARQL_UNROLL
    for (int i = 0; i < 4; ++i) w[c * 4 + i] = bits_to_float(b.w[i]);
  }
}

template <>
LARQL_HD void decode_unit<DType::F16>(const uint8_t* row, int64_t, int64_t u, float* w) {
  const uint8_t* p = row + u * 64;
LARQL_UNROLL
  for (int c = 0; c < 4; ++c) {
    const Bytes16 b = load16(p + c * 16);
LARQL_UNROLL
    for (int i = 0; i < 4; ++i) {
      w[c * 8 + 2 * i] = half_to_float(static_cast<uint16_t>(b.w[i] & 0xFFFF));
      w[c * 8 + 2 * i + 1] = half_to_float(static_cast<uint16_t>(b.w[i] >> 16));
    }
  }
}

template <>
LARQL_HD void decode_unit<DType::BF16>(const uint8_t* row, int64_t, int64_t u, float* w) {
  const uint8_t* p = row + u * 64;
LARQL_UNROLL
  for (int c = 0; c < 4; ++c) {
    const Bytes16 b = load16(p + c * 16);
LARQL_UNROLL
    for (int i = 0; i < 4; ++i) {
      w[c * 8 + 2 * i] = bf16_to_float(static_cast<uint16_t>(b.w[i] & 0xFFFF));
      w[c * 8 + 2 * i + 1] = bf16_to_float(static_cast<uint16_t>(b.w[i] >> 16));
    }
  }
}

template <>
LARQL_HD void decode_unit<DType::Q8_0>(const uint8_t* row, int64_t cols, int64_t u, float* w) {
  const int64_t nb = cols / 32;
  const float d = half_to_float(load2(row + nb * 32 + u * 2));
LARQL_UNROLL
  for (int c = 0; c < 2; ++c) {
    const Bytes16 b = load16(row + u * 32 + c * 16);
LARQL_UNROLL
    for (int i = 0; i < 16; ++i) w[c * 16 + i] = d * static_cast<float>(static_cast<int8_t>(byte_of(b, i)));
  }
}

template <>
LARQL_HD void decode_unit<DType::Q5_0>(const uint8_t* row, int64_t cols, int64_t u, float* w) {
  const int64_t nb = cols / 32;
  const Bytes16 qs = load16(row + u * 16);
  const uint32_t qh = load4(row + nb * 16 + u * 4);
  const float d = half_to_float(load2(row + nb * 20 + u * 2));
LARQL_UNROLL
  for (int j = 0; j < 16; ++j) {
    const uint8_t q = byte_of(qs, j);
    const int x0 = ((q & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
    const int x1 = ((q >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
    w[j] = static_cast<float>(x0) * d;
    w[j + 16] = static_cast<float>(x1) * d;
  }
}

/// Sub-block j's scale d1 = d * sc and min m1 = dmin * m of the Q4_K super-block at sb (GGML's
/// get_scale_min_k4 over the 12 scale bytes, held as three words: no local array on the device).
LARQL_HD void q4k_scale_min(const uint8_t* sb, int j, float& d1, float& m1) {
  const uint32_t head = load4(sb);
  const float d = half_to_float(static_cast<uint16_t>(head & 0xFFFF));
  const float dmin = half_to_float(static_cast<uint16_t>(head >> 16));
  const uint32_t sw[3] = {load4(sb + 4), load4(sb + 8), load4(sb + 12)};
  auto byte = [&sw](int i) -> uint8_t {
    const uint32_t w = i < 4 ? sw[0] : i < 8 ? sw[1] : sw[2];
    return static_cast<uint8_t>(w >> ((i & 3) * 8));
  };
  uint8_t sc, m;
  if (j < 4) {
    sc = byte(j) & 63;
    m = byte(j + 4) & 63;
  } else {
    sc = static_cast<uint8_t>((byte(j + 4) & 0xF) | ((byte(j - 4) >> 6) << 4));
    m = static_cast<uint8_t>((byte(j + 4) >> 4) | ((byte(j) >> 6) << 4));
  }
  d1 = d * static_cast<float>(sc);
  m1 = dmin * static_cast<float>(m);
}

template <>
LARQL_HD void decode_unit<DType::Q4_K>(const uint8_t* row, int64_t, int64_t u, float* w) {
  const uint8_t* sb = row + (u >> 3) * 144;
  const int j = static_cast<int>(u & 7);
  float d1, m1;
  q4k_scale_min(sb, j, d1, m1);
  const uint8_t* q = sb + 16 + (j >> 1) * 32;
  const int shift = (j & 1) * 4;
LARQL_UNROLL
  for (int c = 0; c < 2; ++c) {
    const Bytes16 b = load16(q + c * 16);
LARQL_UNROLL
    for (int i = 0; i < 16; ++i) w[c * 16 + i] = d1 * static_cast<float>((byte_of(b, i) >> shift) & 0xF) - m1;
  }
}

template <>
LARQL_HD void decode_unit<DType::Q6_K>(const uint8_t* row, int64_t, int64_t u, float* w) {
  const uint8_t* sb = row + (u >> 3) * 224;
  const int h = static_cast<int>((u >> 2) & 1), k = static_cast<int>(u & 3);
  const float d = half_to_float(load2(sb + 208));
  const uint8_t* ql = sb + h * 64 + (k & 1) * 32;
  const uint8_t* qh = sb + 128 + h * 32;
  const int lshift = (k >> 1) * 4, hshift = 2 * k;
  const float d0 = d * static_cast<float>(static_cast<int8_t>(sb[192 + h * 8 + 2 * k]));
  const float d1 = d * static_cast<float>(static_cast<int8_t>(sb[192 + h * 8 + 2 * k + 1]));
LARQL_UNROLL
  for (int c = 0; c < 2; ++c) {
    const Bytes16 lb = load16(ql + c * 16), hb = load16(qh + c * 16);
    const float dd = c == 0 ? d0 : d1;
LARQL_UNROLL
    for (int i = 0; i < 16; ++i) {
      const int q = ((byte_of(lb, i) >> lshift) & 0xF) | (((byte_of(hb, i) >> hshift) & 3) << 4);
      w[c * 16 + i] = dd * static_cast<float>(q - 32);
    }
  }
}

// ---- decoding an eighth of a unit: values u*32 + p*8 .. + 7 ------------------------------------
// The GEMV gives each lane 8 values, so a warp covers 8 consecutive units (256 values) per step
// and its loads of weights and activations are contiguous across the lanes.

struct Bytes8 {
  uint32_t w[2];
};
/// 8 bytes from an 8-byte-aligned address.
LARQL_HD Bytes8 load8(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  return Bytes8{{v.x, v.y}};
#else
  Bytes8 b;
  std::memcpy(b.w, p, 8);
  return b;
#endif
}
LARQL_HD uint8_t byte_of(const Bytes8& b, int i) { return static_cast<uint8_t>(b.w[i >> 2] >> ((i & 3) * 8)); }

/// w[0..7] = values u*32 + p*8 .. u*32 + p*8 + 7 (p in 0..3) of a row in the device layout of T;
/// the same values decode_unit<T> gives.
template <DType T>
LARQL_HD void decode8(const uint8_t* row, int64_t cols, int64_t u, int p, float* w);

template <>
LARQL_HD void decode8<DType::F32>(const uint8_t* row, int64_t, int64_t u, int p, float* w) {
  const uint8_t* q = row + (u * 32 + p * 8) * 4;
  const Bytes16 a = load16(q), b = load16(q + 16);
LARQL_UNROLL
  for (int i = 0; i < 4; ++i) {
    w[i] = bits_to_float(a.w[i]);
    w[4 + i] = bits_to_float(b.w[i]);
  }
}

// F16 and BF16: 8 consecutive 16-bit values, two per loaded word.
template <bool kBf16>
LARQL_HD void decode8_16bit(const uint8_t* row, int64_t u, int p, float* w) {
  const Bytes16 a = load16(row + (u * 32 + p * 8) * 2);
LARQL_UNROLL
  for (int i = 0; i < 4; ++i) {
    const uint16_t lo = static_cast<uint16_t>(a.w[i] & 0xFFFF), hi = static_cast<uint16_t>(a.w[i] >> 16);
    w[2 * i] = kBf16 ? bf16_to_float(lo) : half_to_float(lo);
    w[2 * i + 1] = kBf16 ? bf16_to_float(hi) : half_to_float(hi);
  }
}

template <>
LARQL_HD void decode8<DType::F16>(const uint8_t* row, int64_t, int64_t u, int p, float* w) {
  decode8_16bit<false>(row, u, p, w);
}

template <>
LARQL_HD void decode8<DType::BF16>(const uint8_t* row, int64_t, int64_t u, int p, float* w) {
  decode8_16bit<true>(row, u, p, w);
}

template <>
LARQL_HD void decode8<DType::Q8_0>(const uint8_t* row, int64_t cols, int64_t u, int p, float* w) {
  const int64_t nb = cols / 32;
  const float d = half_to_float(load2(row + nb * 32 + u * 2));
  const Bytes8 q = load8(row + u * 32 + p * 8);
LARQL_UNROLL
  for (int i = 0; i < 8; ++i) w[i] = d * static_cast<float>(static_cast<int8_t>(byte_of(q, i)));
}

template <>
LARQL_HD void decode8<DType::Q5_0>(const uint8_t* row, int64_t cols, int64_t u, int p, float* w) {
  const int64_t nb = cols / 32;
  const Bytes8 qs = load8(row + u * 16 + (p & 1) * 8);
  const uint32_t qh = load4(row + nb * 16 + u * 4);
  const float d = half_to_float(load2(row + nb * 20 + u * 2));
  const int j0 = (p & 1) * 8;
LARQL_UNROLL
  for (int i = 0; i < 8; ++i) {
    const uint8_t q = byte_of(qs, i);
    const int j = j0 + i;
    const int x = p < 2 ? ((q & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16 : ((q >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
    w[i] = static_cast<float>(x) * d;
  }
}

template <>
LARQL_HD void decode8<DType::Q4_K>(const uint8_t* row, int64_t, int64_t u, int p, float* w) {
  const uint8_t* sb = row + (u >> 3) * 144;
  const int j = static_cast<int>(u & 7);
  float d1, m1;
  q4k_scale_min(sb, j, d1, m1);
  const Bytes8 q = load8(sb + 16 + (j >> 1) * 32 + p * 8);
  const int shift = (j & 1) * 4;
LARQL_UNROLL
  for (int i = 0; i < 8; ++i) w[i] = d1 * static_cast<float>((byte_of(q, i) >> shift) & 0xF) - m1;
}

template <>
LARQL_HD void decode8<DType::Q6_K>(const uint8_t* row, int64_t, int64_t u, int p, float* w) {
  const uint8_t* sb = row + (u >> 3) * 224;
  const int h = static_cast<int>((u >> 2) & 1), k = static_cast<int>(u & 3);
  const float d = half_to_float(load2(sb + 208));
  const Bytes8 lb = load8(sb + h * 64 + (k & 1) * 32 + p * 8), hb = load8(sb + 128 + h * 32 + p * 8);
  const int lshift = (k >> 1) * 4, hshift = 2 * k;
  const float dd = d * static_cast<float>(static_cast<int8_t>(sb[192 + h * 8 + 2 * k + (p >> 1)]));
LARQL_UNROLL
  for (int i = 0; i < 8; ++i) {
    const int q = ((byte_of(lb, i) >> lshift) & 0xF) | (((byte_of(hb, i) >> hshift) & 3) << 4);
    w[i] = dd * static_cast<float>(q - 32);
  }
}

/// Repack one row of `cols` values from its GGUF block layout (quant/blocks.h) into the device
/// layout (dst: device_row_bytes(t, cols) bytes; padding zeroed). t must satisfy device_supports.
void repack_row(DType t, const uint8_t* src, int64_t cols, uint8_t* dst);

}  // namespace larql::cuda
