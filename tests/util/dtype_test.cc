// The dtype table against ggml's published block geometry (ggml/src/ggml-common.h block structs,
// ggml.h enum ggml_type): QK4_0 = QK5_0 = QK8_0 = 32, QK_K = 256.
#include <gtest/gtest.h>

#include "util/dtype.h"

namespace larql {
namespace {

struct Expect {
  uint32_t id;
  const char* name;
  uint32_t block, bytes;
};

// sizeof(block_*) computed by hand from ggml-common.h:
//   q4_0: f16 d + 16 qs = 18;  q4_1: 2*f16 + 16 = 20;  q5_0: f16 + 4 qh + 16 qs = 22;
//   q5_1: 2*f16 + 4 + 16 = 24;  q8_0: f16 + 32 = 34;  q8_1: 2*f16 + 32 = 36;
//   q2_K: 16 scales + 64 qs + 2*f16 = 84;  q3_K: 32 hmask + 64 qs + 12 scales + f16 = 110;
//   q4_K: 2*f16 + 12 + 128 = 144;  q5_K: 2*f16 + 12 + 32 + 128 = 176;
//   q6_K: 128 ql + 64 qh + 16 scales + f16 = 210;  q8_K: f32 + 256 + 16*i16 = 292.
const Expect kExpect[] = {
    {0, "F32", 1, 4},       {1, "F16", 1, 2},        {2, "Q4_0", 32, 18},    {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},     {8, "Q8_0", 32, 34},    {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},  {11, "Q3_K", 256, 110},  {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210}, {15, "Q8_K", 256, 292},  {30, "BF16", 1, 2},
};

TEST(DType, TableMatchesGgml) {
  for (const Expect& e : kExpect) {
    SCOPED_TRACE(e.name);
    const auto info = dtype_info(e.id);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(static_cast<uint32_t>(info->type), e.id);
    EXPECT_STREQ(info->name, e.name);
    EXPECT_EQ(info->block_size, e.block);
    EXPECT_EQ(info->type_size, e.bytes);
    EXPECT_STREQ(dtype_name(info->type), e.name);
    EXPECT_EQ(dtype_info(info->type).type_size, e.bytes);
    auto parsed = dtype_from_name(e.name);
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, info->type);
  }
}

TEST(DType, SupportedTypes) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K, DType::Q8_K})
    EXPECT_TRUE(dtype_info(t).supported) << dtype_name(t);
}

TEST(DType, UnknownIds) {
  EXPECT_FALSE(dtype_info(4u).has_value());   // removed Q4_2
  EXPECT_FALSE(dtype_info(5u).has_value());   // removed Q4_3
  EXPECT_FALSE(dtype_info(1000u).has_value());
  EXPECT_FALSE(dtype_info(0xFFFFFFFFu).has_value());
}

TEST(DType, NamesAreCaseInsensitive) {
  EXPECT_EQ(dtype_from_name("q4_k"), DType::Q4_K);
  EXPECT_EQ(dtype_from_name("f32"), DType::F32);
  EXPECT_EQ(dtype_from_name("bf16"), DType::BF16);
  EXPECT_FALSE(dtype_from_name("q4k").has_value());
  EXPECT_FALSE(dtype_from_name("").has_value());
  EXPECT_FALSE(dtype_from_name("Q4_K ").has_value());
}

TEST(DType, RowBytes) {
  EXPECT_EQ(row_bytes(DType::F32, 7), 28u);
  EXPECT_EQ(row_bytes(DType::F16, 7), 14u);
  EXPECT_EQ(row_bytes(DType::BF16, 3), 6u);
  EXPECT_EQ(row_bytes(DType::Q8_0, 64), 68u);
  EXPECT_EQ(row_bytes(DType::Q4_0, 32), 18u);
  EXPECT_EQ(row_bytes(DType::Q4_K, 512), 288u);
  EXPECT_EQ(row_bytes(DType::Q6_K, 256), 210u);
  EXPECT_EQ(row_bytes(DType::Q8_K, 768), 876u);
  EXPECT_EQ(row_bytes(DType::Q8_0, 0), 0u);
  EXPECT_FALSE(row_bytes(DType::Q8_0, 33).has_value());
  EXPECT_FALSE(row_bytes(DType::Q4_K, 128).has_value());
  EXPECT_FALSE(row_bytes(DType::Q6_K, 257).has_value());
}

}  // namespace
}  // namespace larql
