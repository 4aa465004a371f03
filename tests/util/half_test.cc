// f16 / bf16 conversions against hand-picked values (IEEE 754-2008 binary16; bfloat16 = upper half
// of binary32) and an independent exhaustive reference written from the format definition.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "util/half.h"

namespace larql {
namespace {

float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Independent decode from the binary16 definition: (-1)^s * 2^(e-15) * (1 + m/1024), subnormal
// (e == 0): (-1)^s * 2^-14 * m/1024.
double f16_value(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0) v = std::ldexp(static_cast<double>(m), -24);
  else if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else v = std::ldexp(1024.0 + m, e - 25);
  return s ? -v : v;
}

TEST(Half, F16HandPickedToF32) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));   // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03FF), 1023.0f * std::ldexp(1.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));   // smallest normal
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f32_bits(f16_to_f32(0x0000)), 0x00000000u);
  EXPECT_EQ(f32_bits(f16_to_f32(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(f16_to_f32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7C01)));
}

TEST(Half, F32ToF16HandPicked) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);  // below the midpoint 65520
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // tie between 65504 (odd) and 65536 (= inf): even -> inf
  EXPECT_EQ(f32_to_f16(1e6f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-1e6f), 0xFC00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f32_to_f16(1023.0f * std::ldexp(1.0f, -24)), 0x03FF);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);  // a quarter unit: zero
  const uint16_t nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
}

TEST(Half, F32ToF16RoundsToNearestEven) {
  // ulp(1) in f16 is 2^-10; midpoints are at odd multiples of 2^-11.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie, 0x3C00 even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie between 0x3C01 and 0x3C02
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);  // just above
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11) - std::ldexp(1.0f, -22)), 0x3C00);  // just below
  // Subnormal ties: 2^-25 is half the smallest subnormal -> 0 (even); 3 * 2^-25 -> 2 units (even).
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(f32_to_f16(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(f32_to_f16(5 * std::ldexp(1.0f, -25)), 0x0002);  // 2.5 units -> 2
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25) + std::ldexp(1.0f, -40)), 0x0001);
  EXPECT_EQ(f32_to_f16(-3 * std::ldexp(1.0f, -25)), 0x8002);
  // The largest subnormal + half a unit is a tie with the smallest normal (0x0400, even).
  EXPECT_EQ(f32_to_f16(1023.5f * std::ldexp(1.0f, -24)), 0x0400);
}

// Every f16 decodes to the value the format defines, and every finite one round-trips.
TEST(Half, ExhaustiveDecodeAndRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double ref = f16_value(static_cast<uint16_t>(h));
    const float got = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(got), ref) << std::hex << h;
    ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
    ASSERT_EQ(f32_to_f16(got), h) << std::hex << h;
  }
}

// The midpoint between two adjacent positive f16 values rounds to the one with an even mantissa;
// a nudge either side picks the nearer one.
TEST(Half, ExhaustiveMidpoints) {
  for (uint32_t h = 0; h < 0x7BFF; ++h) {
    const double lo = f16_value(static_cast<uint16_t>(h)), hi = f16_value(static_cast<uint16_t>(h + 1));
    const double mid = 0.5 * (lo + hi);  // exact in double, and exactly representable in f32
    const float fmid = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(fmid), mid);
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    ASSERT_EQ(f32_to_f16(fmid), even) << std::hex << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(fmid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(fmid, 1e9f)), h + 1) << std::hex << h;
  }
}

TEST(Half, Bf16) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xC040), -3.0f);
  EXPECT_EQ(f32_to_bf16(-3.0f), 0xC040);
  // Ties: the dropped half is exactly 0x8000.
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3F808000u)), 0x3F80);  // lower 0x3F80 even
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3F818000u)), 0x3F82);  // lower 0x3F81 odd -> up
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3F808001u)), 0x3F81);  // above the tie
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3F817FFFu)), 0x3F81);  // below the tie
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0xBF818000u)), 0xBF82);  // sign symmetric
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX rounds up to inf
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  // NaN stays NaN (even one whose payload is only in the low half) and is quiet.
  for (uint32_t nan_bits : {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu}) {
    const uint16_t b = f32_to_bf16(bits_to_f32(nan_bits));
    EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << nan_bits;
    EXPECT_NE(b & 0x0040, 0) << "quiet bit, " << std::hex << nan_bits;
    EXPECT_EQ(b & 0x8000, (nan_bits >> 16) & 0x8000);
  }
  // Every non-NaN bf16 round-trips.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_to_f32(static_cast<uint16_t>(b));
    EXPECT_EQ(f32_bits(f), b << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), b) << std::hex << b;
    }
  }
}

}  // namespace
}  // namespace larql
