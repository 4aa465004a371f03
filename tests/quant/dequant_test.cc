// Hand-built blocks per format; expected values derived by hand from the block layouts in
// ggml-common.h / ggml-quants.c (dequantize_row_*), written in a different (element-indexed) form
// than the kernels use so a layout mistake cannot cancel out.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "quant/quant.h"
#include "util/dtype.h"
#include "util/error.h"

namespace larql::quant {
namespace {

// f16 bit patterns (IEEE binary16).
constexpr uint16_t kF16_0_25 = 0x3400, kF16_0_5 = 0x3800, kF16_1 = 0x3C00, kF16_m1 = 0xBC00;

void put16(std::vector<uint8_t>& b, size_t off, uint16_t v) {
  b[off] = static_cast<uint8_t>(v & 0xFF);
  b[off + 1] = static_cast<uint8_t>(v >> 8);
}

std::vector<float> deq(DType t, const std::vector<uint8_t>& b, int64_t n) {
  EXPECT_EQ(b.size(), *row_bytes(t, n));
  std::vector<float> out(n);
  dequantize_row(t, b.data(), out.data(), n);
  return out;
}

TEST(Dequant, F16KnownValues) {
  const uint16_t h[4] = {0x3C00, 0xC000, 0x7BFF, 0x0001};  // 1, -2, 65504, 2^-24
  float y[4];
  dequantize_row(DType::F16, h, y, 4);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 65504.0f);
  EXPECT_EQ(y[3], 5.9604644775390625e-08f);
}

TEST(Dequant, BF16KnownValues) {
  const uint16_t h[3] = {0x3F80, 0xC040, 0x4049};  // 1, -3, 3.140625
  float y[3];
  dequantize_row(DType::BF16, h, y, 3);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -3.0f);
  EXPECT_EQ(y[2], 3.140625f);
}

// Q4_0: d = 0.5; qs[j] = j | (15 - j) << 4. Element j is the low nibble of qs[j], element
// j + 16 the high nibble; value = d * (q - 8).
TEST(Dequant, Q4_0HandBlock) {
  std::vector<uint8_t> b(18);
  put16(b, 0, kF16_0_5);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = deq(DType::Q4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * (j - 8)) << j;
    EXPECT_EQ(y[j + 16], 0.5f * (7 - j)) << j;
  }
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[16], 3.5f);
}

// Q4_1: d = 0.25, m = -1; value = d * q + m.
TEST(Dequant, Q4_1HandBlock) {
  std::vector<uint8_t> b(20);
  put16(b, 0, kF16_0_25);
  put16(b, 2, kF16_m1);
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = deq(DType::Q4_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * j - 1.0f) << j;
    EXPECT_EQ(y[j + 16], 0.25f * (15 - j) - 1.0f) << j;
  }
}

// Q5_0: d = 1; qh bytes {0xAA, 0x55, 0x0F, 0xF0} = uint32 0xF00F55AA little-endian; element e
// takes bit e of qh as its 5th bit; value = d * (q - 16).
TEST(Dequant, Q5_0HandBlock) {
  std::vector<uint8_t> b(22);
  put16(b, 0, kF16_1);
  const uint8_t qh[4] = {0xAA, 0x55, 0x0F, 0xF0};
  std::memcpy(&b[2], qh, 4);
  for (int j = 0; j < 16; ++j) b[6 + j] = static_cast<uint8_t>(j | (((j + 3) & 15) << 4));
  const auto y = deq(DType::Q5_0, b, 32);
  const uint32_t bits = 0xF00F55AAu;
  for (int e = 0; e < 32; ++e) {
    const int nib = e < 16 ? e : ((e - 16 + 3) & 15);
    const int q = nib | (((bits >> e) & 1) << 4);
    EXPECT_EQ(y[e], static_cast<float>(q - 16)) << e;
  }
  EXPECT_EQ(y[0], -16.0f);  // nibble 0, bit 0 of 0xAA clear
  EXPECT_EQ(y[1], 1.0f);    // nibble 1, bit 1 set: 17 - 16
  EXPECT_EQ(y[31], 18.0f - 16.0f + 0.0f);  // nibble (15+3)&15 = 2, bit 31 set: 18 - 16
}

// Q5_1: d = 0.5, m = 1; value = d * q + m with the same bit layout as Q5_0.
TEST(Dequant, Q5_1HandBlock) {
  std::vector<uint8_t> b(24);
  put16(b, 0, kF16_0_5);
  put16(b, 2, kF16_1);
  const uint8_t qh[4] = {0x01, 0x00, 0x00, 0x80};  // bits 0 and 31
  std::memcpy(&b[4], qh, 4);
  for (int j = 0; j < 16; ++j) b[8 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = deq(DType::Q5_1, b, 32);
  EXPECT_EQ(y[0], 0.5f * 16 + 1);   // q = 0 | 16
  EXPECT_EQ(y[1], 0.5f * 1 + 1);
  EXPECT_EQ(y[16], 0.5f * 15 + 1);  // high nibble of qs[0] = 15, bit 16 clear
  EXPECT_EQ(y[31], 0.5f * (0 + 16) + 1);  // high nibble of qs[15] = 0, bit 31 set
}

TEST(Dequant, Q8_0HandBlock) {
  std::vector<uint8_t> b(34);
  put16(b, 0, kF16_0_5);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  const auto y = deq(DType::Q8_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * (j * 8 - 128)) << j;
}

// Q4_K / Q5_K scales: sub-block scales sc = {1,2,3,4,5,6,7,63}, mins m = {0,1,2,3,4,5,6,33}
// packed by hand as ggml's 12-byte layout:
//   bytes 0..3  = sc[0..3] | (sc[4..7] >> 4) << 6          -> 1, 2, 3, 4 | 3<<6 = 196
//   bytes 4..7  = m[0..3]  | (m[4..7]  >> 4) << 6          -> 0, 1, 2, 3 | 2<<6 = 131
//   bytes 8..11 = (sc[4..7] & 15) | (m[4..7] & 15) << 4    -> 69, 86, 103, 31
const uint8_t kK4Scales[12] = {1, 2, 3, 196, 0, 1, 2, 131, 69, 86, 103, 31};
const int kSc[8] = {1, 2, 3, 4, 5, 6, 7, 63};
const int kMin[8] = {0, 1, 2, 3, 4, 5, 6, 33};

// Q4_K: d = 1, dmin = 0.5; qs[32p + l] = (l & 15) | ((l + p) & 15) << 4. Element 64p + l is the
// low nibble (sub-block 2p), element 64p + 32 + l the high nibble (sub-block 2p + 1);
// value = d * sc * q - dmin * m.
TEST(Dequant, Q4_KHandBlock) {
  std::vector<uint8_t> b(144);
  put16(b, 0, kF16_1);
  put16(b, 2, kF16_0_5);
  std::memcpy(&b[4], kK4Scales, 12);
  for (int p = 0; p < 4; ++p)
    for (int l = 0; l < 32; ++l) b[16 + 32 * p + l] = static_cast<uint8_t>((l & 15) | (((l + p) & 15) << 4));
  const auto y = deq(DType::Q4_K, b, 256);
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      EXPECT_EQ(y[64 * p + l], 1.0f * kSc[2 * p] * (l & 15) - 0.5f * kMin[2 * p]) << p << "," << l;
      EXPECT_EQ(y[64 * p + 32 + l], 1.0f * kSc[2 * p + 1] * ((l + p) & 15) - 0.5f * kMin[2 * p + 1])
          << p << "," << l;
    }
  }
  EXPECT_EQ(y[255], 109.5f);  // 63 * ((31 + 3) & 15 = 2) - 0.5 * 33
}

// Q5_K: as Q4_K plus qh[l] = 7 * l mod 256: bit 2p adds 16 to element 64p + l, bit 2p + 1 to
// element 64p + 32 + l.
TEST(Dequant, Q5_KHandBlock) {
  std::vector<uint8_t> b(176);
  put16(b, 0, kF16_0_5);
  put16(b, 2, kF16_0_25);
  std::memcpy(&b[4], kK4Scales, 12);
  for (int l = 0; l < 32; ++l) b[16 + l] = static_cast<uint8_t>(7 * l);
  for (int p = 0; p < 4; ++p)
    for (int l = 0; l < 32; ++l) b[48 + 32 * p + l] = static_cast<uint8_t>((l & 15) | (((l + p) & 15) << 4));
  const auto y = deq(DType::Q5_K, b, 256);
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      const int qh = (7 * l) & 255;
      const int q0 = (l & 15) + 16 * ((qh >> (2 * p)) & 1);
      const int q1 = ((l + p) & 15) + 16 * ((qh >> (2 * p + 1)) & 1);
      EXPECT_EQ(y[64 * p + l], 0.5f * kSc[2 * p] * q0 - 0.25f * kMin[2 * p]) << p << "," << l;
      EXPECT_EQ(y[64 * p + 32 + l], 0.5f * kSc[2 * p + 1] * q1 - 0.25f * kMin[2 * p + 1]) << p << "," << l;
    }
  }
  // element 1: l = 1, qh = 7 (bit 0 set): q = 1 + 16; 0.5 * 1 * 17 - 0.25 * 0
  EXPECT_EQ(y[1], 8.5f);
}

// Q6_K: d = 0.5, scales[g] = g - 8 (signed). Element e = 128h + r: r < 32 -> low nibble of
// ql[64h + r], bits 0-1 of qh[32h + r]; r < 64 -> low nibble of ql[64h + r], bits 2-3 of
// qh[32h + r - 32]; r < 96 -> high nibble of ql[64h + r - 64], bits 4-5 of qh[32h + r - 64];
// else high nibble of ql[64h + r - 64], bits 6-7 of qh[32h + r - 96]. value = d*sc[e/16]*(q-32).
TEST(Dequant, Q6_KHandBlock) {
  std::vector<uint8_t> b(210);
  for (int k = 0; k < 128; ++k) b[k] = static_cast<uint8_t>(k * 37 + 11);
  for (int k = 0; k < 64; ++k) b[128 + k] = static_cast<uint8_t>(k * 91 + 5);
  for (int g = 0; g < 16; ++g) b[192 + g] = static_cast<uint8_t>(static_cast<int8_t>(g - 8));
  put16(b, 208, kF16_0_5);
  const auto y = deq(DType::Q6_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, r = e % 128;
    const uint8_t* ql = &b[64 * h];
    const uint8_t* qh = &b[128 + 32 * h];
    int lo, hi;
    if (r < 32) { lo = ql[r] & 15; hi = qh[r] & 3; }
    else if (r < 64) { lo = ql[r] & 15; hi = (qh[r - 32] >> 2) & 3; }
    else if (r < 96) { lo = ql[r - 64] >> 4; hi = (qh[r - 64] >> 4) & 3; }
    else { lo = ql[r - 64] >> 4; hi = (qh[r - 96] >> 6) & 3; }
    const int q = lo | (hi << 4);
    EXPECT_EQ(y[e], 0.5f * (e / 16 - 8) * (q - 32)) << e;
  }
  // element 0: ql[0] = 11 -> 11, qh[0] = 5 -> bits 0-1 = 1 -> q = 27; 0.5 * -8 * -5 = 20
  EXPECT_EQ(y[0], 20.0f);
}

TEST(Dequant, Q8_KHandBlock) {
  std::vector<uint8_t> b(292, 0);
  const float d = 0.25f;
  std::memcpy(&b[0], &d, 4);
  for (int j = 0; j < 256; ++j) b[4 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 128));
  const auto y = deq(DType::Q8_K, b, 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], 0.25f * (j - 128)) << j;
}

TEST(Dequant, MultipleBlocksAdvance) {
  // Two Q4_0 blocks with different d: each block uses its own scale.
  std::vector<uint8_t> b(36, 0x99);  // all nibbles 9 -> q - 8 = 1
  put16(b, 0, kF16_0_5);
  put16(b, 18, kF16_m1);
  const auto y = deq(DType::Q4_0, b, 64);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f);
  for (int j = 32; j < 64; ++j) EXPECT_EQ(y[j], -1.0f);
}

TEST(Dequant, Errors) {
  float out[64];
  uint8_t buf[256] = {};
  EXPECT_TRUE(can_dequantize(DType::Q6_K));
  EXPECT_FALSE(can_dequantize(DType::Q2_K));
  try {
    dequantize_row(DType::Q2_K, buf, out, 256);
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
  }
  try {
    dequantize_row(DType::Q4_0, buf, out, 33);
    FAIL() << "expected InvalidArgument";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("33"), std::string::npos);
  }
}

}  // namespace
}  // namespace larql::quant
