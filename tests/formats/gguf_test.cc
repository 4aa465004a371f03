// GGUF reader/writer: byte layout against the spec (ggml/docs/gguf.md), round trips, and one
// test per corruption the reader must reject with a typed error naming the field.
#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "formats/gguf_bytes.h"
#include "util/error.h"

namespace larql {
namespace {

using testing::RawGguf;
using Bytes = std::vector<uint8_t>;

constexpr uint32_t kF32 = 0, kQ8_0 = 8, kQ4_K = 12;  // ggml_type ids (ggml.h)

std::shared_ptr<GgufFile> parse(const Bytes& b) { return GgufFile::parse(b.data(), b.size(), "t.gguf"); }

// Parses `b` and expects an Error of `kind` whose message contains every needle.
void expect_error(const Bytes& b, ErrorKind kind, std::vector<std::string> needles) {
  try {
    parse(b);
    ADD_FAILURE() << "parse succeeded; expected an error mentioning " << needles[0];
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message lacks '" << n << "': " << e.what();
  }
}

// A valid file: one KV and one F32 [8] tensor (32 bytes of data), 32-byte alignment.
RawGguf one_tensor_file(std::vector<uint64_t> dims = {8}, uint32_t type = kF32, uint64_t offset = 0,
                        size_t data_bytes = 32) {
  RawGguf g;
  g.header(3, 1, 1).kv_str("general.architecture", "x").tensor("w", dims, type, offset);
  g.pad(32).zeros(data_bytes);
  return g;
}

// ---- writer layout and round trips -----------------------------------------------------------

TEST(GgufWriter, BytesMatchTheSpecLayout) {
  const float a[3] = {1, 2, 3}, b[1] = {4};
  GgufWriter w;
  w.set("k", GgufValue::u32(7));
  w.add_tensor("v", DType::F32, {3}, a, sizeof a);
  w.add_tensor("w", DType::F32, {1}, b, sizeof b);
  RawGguf g;
  g.header(3, 2, 1).kv_u32("k", 7).tensor("v", {3}, kF32, 0).tensor("w", {1}, kF32, 32).pad(32);
  g.f32(1).f32(2).f32(3).pad(32).f32(4);  // second tensor at the next 32-byte boundary
  EXPECT_EQ(w.serialize(), g.bytes);
}

TEST(GgufWriter, NonDefaultAlignmentIsRecordedAndUsed) {
  const float a[1] = {1}, b[1] = {2};
  GgufWriter w(64);
  w.add_tensor("a", DType::F32, {1}, a, 4);
  w.add_tensor("b", DType::F32, {1}, b, 4);
  auto f = parse(w.serialize());
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->get_uint("general.alignment"), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->find_tensor("b")->offset, 64u);
  float x;
  std::memcpy(&x, f->find_tensor("b")->data, 4);
  EXPECT_EQ(x, 2.0f);
}

TEST(GgufWriter, RejectsBadTensors) {
  GgufWriter w;
  float d[8] = {};
  EXPECT_THROW(w.add_tensor("a", DType::F32, {8}, d, 16), Error);       // size mismatch
  EXPECT_THROW(w.add_tensor("a", DType::Q8_0, {8}, d, 32), Error);      // 8 % 32 != 0
  EXPECT_THROW(w.add_tensor("a", DType::F32, {0}, d, 0), Error);        // zero dim
  EXPECT_THROW(w.add_tensor("a", DType::F32, {}, d, 4), Error);         // no dims
  w.add_tensor("a", DType::F32, {8}, d, 32);
  try {
    w.add_tensor("a", DType::F32, {8}, d, 32);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  }
  // Arrays are checked when built: mixed element types, or an element that does not fit.
  EXPECT_THROW(GgufValue::array(GgufValueType::INT32, {GgufValue::i32(1), GgufValue::u32(2)}), Error);
  EXPECT_THROW(GgufValue::array(GgufValueType::UINT8, {{GgufValueType::UINT8, uint64_t{300}}}), Error);
}

TEST(GgufRoundTrip, EveryValueTypeAndNestedArrays) {
  GgufWriter w;
  w.set("u8", {GgufValueType::UINT8, uint64_t{255}});
  w.set("i8", {GgufValueType::INT8, int64_t{-128}});
  w.set("u16", {GgufValueType::UINT16, uint64_t{65535}});
  w.set("i16", {GgufValueType::INT16, int64_t{-32768}});
  w.set("u32", GgufValue::u32(4294967295u));
  w.set("i32", GgufValue::i32(-2147483647 - 1));
  w.set("u64", GgufValue::u64(18446744073709551615ull));
  w.set("i64", {GgufValueType::INT64, int64_t{-9223372036854775807ll - 1}});
  w.set("f32", GgufValue::f32(0.1f));
  w.set("f64", {GgufValueType::FLOAT64, 0.1});
  w.set("bool", GgufValue::boolean(true));
  w.set("str", GgufValue::str(std::string("a\0b", 3)));
  w.set("empty_str", GgufValue::str(""));
  w.set("strs", GgufValue::string_array({"x", "", "yz"}));
  w.set("f32s", GgufValue::f32_array({1.5f, -2.0f}));
  w.set("i32s", GgufValue::i32_array({-1, 0, 7}));
  w.set("empty", GgufValue::array(GgufValueType::UINT8, {}));
  w.set("nested", GgufValue::array(GgufValueType::ARRAY,
                                   {GgufValue::i32_array({1, 2}), GgufValue::i32_array({}),
                                    GgufValue::array(GgufValueType::ARRAY,
                                                     {GgufValue::string_array({"deep"})})}));
  const Bytes bytes = w.serialize();
  auto f = parse(bytes);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->metadata_count(), 18u);
  EXPECT_EQ(f->get_uint("u8"), 255u);
  EXPECT_EQ(f->get_int("i8"), -128);
  EXPECT_EQ(f->get_uint("u16"), 65535u);
  EXPECT_EQ(f->get_int("i16"), -32768);
  EXPECT_EQ(f->get_uint("u32"), 4294967295u);
  EXPECT_EQ(f->get_int("i32"), -2147483647 - 1);
  EXPECT_EQ(f->get_uint("u64"), 18446744073709551615ull);
  EXPECT_EQ(f->get_int("i64"), -9223372036854775807ll - 1);
  EXPECT_EQ(f->get_float("f32"), static_cast<double>(0.1f));
  EXPECT_EQ(f->get_float("f64"), 0.1);
  EXPECT_EQ(f->get_bool("bool"), true);
  EXPECT_EQ(f->get_string("str"), std::string("a\0b", 3));
  EXPECT_EQ(f->get_string("empty_str"), "");
  EXPECT_EQ(f->get_string_array("strs"), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(f->get_f32_array("f32s"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(f->get_int_array("i32s"), (std::vector<int64_t>{-1, 0, 7}));
  EXPECT_EQ(f->find("u8")->type, GgufValueType::UINT8);
  EXPECT_EQ(f->find("i16")->type, GgufValueType::INT16);
  EXPECT_EQ(f->find("f64")->type, GgufValueType::FLOAT64);
  const auto nested = std::get<GgufArray>(f->find("nested")->value);
  ASSERT_EQ(nested.elem_type(), GgufValueType::ARRAY);
  ASSERT_EQ(nested.size(), 3u);
  const auto first = std::get<GgufArray>(nested.items()[0].value);
  EXPECT_EQ(first.elem_type(), GgufValueType::INT32);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(std::get<int64_t>(first.items()[1].value), 2);
  EXPECT_EQ(std::get<int64_t>(first.at(1).value), 2);
  EXPECT_TRUE(std::get<GgufArray>(nested.at(1).value).empty());
  const auto third = std::get<GgufArray>(nested.at(2).value);
  const auto inner = std::get<GgufArray>(third.at(0).value);
  EXPECT_EQ(std::get<std::string>(inner.at(0).value), "deep");
  EXPECT_EQ(inner.strings(), (std::vector<std::string>{"deep"}));

  // Re-serialising what we read (same keys, sorted order) gives a file of the same size.
  GgufWriter again;
  for (size_t i = 0; i < f->metadata_count(); ++i)
    again.set(std::string(f->metadata_key(i)), f->metadata_value(i));
  EXPECT_EQ(again.serialize().size(), bytes.size());
}

TEST(GgufRoundTrip, TensorsKeepBytesDimsAndOffsets) {
  std::vector<float> a(32 * 3);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.5f;
  std::vector<uint8_t> q(34 * 2 * 2);  // Q8_0 [64, 2]: 2 blocks of 34 bytes per row
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(i * 7);
  GgufWriter w;
  w.add_tensor("a", DType::F32, {32, 3}, a.data(), a.size() * 4);
  w.add_tensor("q", DType::Q8_0, {64, 2}, q.data(), q.size());
  auto f = parse(w.serialize());
  ASSERT_EQ(f->tensors().size(), 2u);
  const GgufTensor* ta = f->find_tensor("a");
  const GgufTensor* tq = f->find_tensor("q");
  ASSERT_TRUE(ta && tq);
  EXPECT_EQ(f->find_tensor("missing"), nullptr);
  EXPECT_EQ(ta->dims, (std::vector<uint64_t>{32, 3}));
  EXPECT_EQ(ta->n_elements(), 96u);
  EXPECT_EQ(ta->n_rows(), 3u);
  EXPECT_EQ(ta->row_length(), 32u);
  EXPECT_EQ(ta->nbytes, 384u);
  EXPECT_EQ(std::memcmp(ta->data, a.data(), 384), 0);
  EXPECT_EQ(tq->type, DType::Q8_0);
  EXPECT_EQ(tq->offset, 384u);
  EXPECT_EQ(tq->nbytes, 136u);
  EXPECT_EQ(std::memcmp(tq->data, q.data(), q.size()), 0);
  EXPECT_EQ(tq->data, f->tensors()[0].data + 384);
}

TEST(GgufRoundTrip, WriteAndOpenFromDisk) {
  const std::string path = ::testing::TempDir() + "/larql_gguf_rt.gguf";
  float x[4] = {1, 2, 3, 4};
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.add_tensor("x", DType::F32, {4}, x, sizeof x);
  w.write(path);
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(std::memcmp(f->find_tensor("x")->data, x, sizeof x), 0);
  std::remove(path.c_str());
  try {
    GgufFile::open(path);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotFound);
  }
}

TEST(GgufReader, ParsesHandBuiltV2) {
  RawGguf g;
  g.header(2, 1, 2).kv_str("general.architecture", "gemma3").kv_u32("gemma3.block_count", 18);
  g.tensor("w", {2, 2}, kF32, 0).pad(32).f32(1).f32(2).f32(3).f32(4);
  auto f = parse(g.bytes);
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->get_string("general.architecture"), "gemma3");
  EXPECT_EQ(f->get_uint("gemma3.block_count"), 18u);
  // header 24 + kv (8+20+4+8+6 = 46) + kv (8+18+4+4 = 34) + info (8+1+4+16+4+8 = 41) = 145 -> 160
  EXPECT_EQ(f->data_offset(), 160u);
  float v[4];
  std::memcpy(v, f->tensors()[0].data, 16);
  EXPECT_EQ(v[3], 4.0f);
}

TEST(GgufReader, MetadataOnlyFileMayEndBeforePadding) {
  RawGguf g;
  g.header(3, 0, 1).kv_u32("k", 1);  // 41 bytes, no padding, no data
  auto f = parse(g.bytes);
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->get_uint("k"), 1u);
}

TEST(GgufReader, TypedGettersRejectOtherTypes) {
  GgufWriter w;
  w.set("s", GgufValue::str("x"));
  w.set("neg", GgufValue::i32(-1));
  w.set("big", GgufValue::u64(1ull << 63));
  w.set("b", GgufValue::boolean(false));
  w.set("ints", GgufValue::i32_array({1}));
  auto f = parse(w.serialize());
  EXPECT_EQ(f->get_uint("absent"), std::nullopt);
  EXPECT_EQ(f->get_string_array("absent"), std::nullopt);
  EXPECT_THROW(f->get_uint("s"), Error);
  EXPECT_THROW(f->get_uint("neg"), Error);
  EXPECT_THROW(f->get_uint("b"), Error);
  EXPECT_THROW(f->get_int("big"), Error);
  EXPECT_THROW(f->get_string("neg"), Error);
  EXPECT_THROW(f->get_bool("s"), Error);
  EXPECT_THROW(f->get_float("s"), Error);
  EXPECT_THROW(f->get_string_array("ints"), Error);
  EXPECT_THROW(f->get_f32_array("ints"), Error);
  EXPECT_THROW(f->get_int_array("s"), Error);
  EXPECT_EQ(f->get_float("neg"), -1.0);
  try {
    f->get_string("neg");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find("'neg'"), std::string::npos) << e.what();
  }
}

TEST(GgufArray, ViewsDecodeOnUseAndKeepTheFileAlive) {
  GgufWriter w;
  w.set("strs", GgufValue::string_array({"a", "bc", ""}));
  w.set("u64s", GgufValue::array(GgufValueType::UINT64, {GgufValue::u64(1), GgufValue::u64(1ull << 63)}));
  w.set("f64s", GgufValue::array(GgufValueType::FLOAT64, {{GgufValueType::FLOAT64, 0.25}}));
  auto f = parse(w.serialize());
  EXPECT_EQ(f->get_array_size("strs"), 3u);
  EXPECT_EQ(f->get_array_size("absent"), std::nullopt);
  EXPECT_EQ(f->get_f32_array("f64s"), (std::vector<float>{0.25f}));
  try {
    f->get_int_array("u64s");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find("'u64s'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("9223372036854775808 does not fit int64"), std::string::npos) << e.what();
  }
  const GgufValue v = *f->find("strs");
  f.reset();  // the value's view holds the parsed bytes
  const auto& a = std::get<GgufArray>(v.value);
  EXPECT_EQ(a.elem_type(), GgufValueType::STRING);
  EXPECT_EQ(a.strings(), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(std::get<std::string>(a.at(1).value), "bc");
  EXPECT_EQ(a.encoded_size(), 3 * 8 + 3u);
  EXPECT_THROW(a.at(3), Error);
  EXPECT_THROW(a.floats(), Error);
  EXPECT_THROW(a.ints(), Error);
  EXPECT_TRUE(GgufArray().empty());
}

// ---- corruptions -----------------------------------------------------------------------------

TEST(GgufCorrupt, EveryTruncationIsAFormatError) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("gemma3"));
  w.set("nested", GgufValue::array(GgufValueType::ARRAY, {GgufValue::string_array({"a", "bc"})}));
  w.set("f", GgufValue::f32(2.0f));
  float x[8] = {};
  w.add_tensor("x", DType::F32, {8}, x, sizeof x);
  const Bytes full = w.serialize();
  ASSERT_NO_THROW(parse(full));
  for (size_t n = 0; n < full.size(); ++n) {
    Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    try {
      parse(cut);
      ADD_FAILURE() << "prefix of " << n << " bytes parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Format) << n << ": " << e.what();
    }
  }
}

TEST(GgufCorrupt, BadMagic) {
  Bytes b = one_tensor_file().bytes;
  b[3] = 'X';
  expect_error(b, ErrorKind::Format, {"magic", "at byte 0", "GGUX"});
}

TEST(GgufCorrupt, UnsupportedVersions) {
  for (uint32_t v : {0u, 1u, 4u}) {
    RawGguf g;
    g.header(v, 0, 0);
    expect_error(g.bytes, ErrorKind::Unsupported, {"version " + std::to_string(v)});
  }
  RawGguf be;
  be.header(0x03000000u, 0, 0);
  expect_error(be.bytes, ErrorKind::Unsupported, {"big-endian"});
}

TEST(GgufCorrupt, TruncatedHeader) {
  RawGguf g;
  g.header(3, 0, 0);
  g.bytes.resize(20);
  expect_error(g.bytes, ErrorKind::Format, {"kv_count", "at byte 16", "truncated"});
}

TEST(GgufCorrupt, HugeCountsAreRejectedBeforeAllocating) {
  RawGguf kv;
  kv.header(3, 0, 1ull << 60).kv_u32("a", 1);
  expect_error(kv.bytes, ErrorKind::Format, {"kv_count", "at byte 16"});
  RawGguf tc;
  tc.header(3, ~0ull, 0);
  expect_error(tc.bytes, ErrorKind::Format, {"tensor_count", "at byte 8"});
  RawGguf arr;  // array of 2^61 uint32 in a tiny file
  arr.header(3, 0, 1).str("a").u32(9).u32(4).u64(1ull << 61);
  expect_error(arr.bytes, ErrorKind::Format, {"'a' count", "cannot fit"});
  RawGguf strs;  // 2^40 strings: each needs at least its 8-byte length
  strs.header(3, 0, 1).str("a").u32(9).u32(8).u64(1ull << 40).zeros(64);
  expect_error(strs.bytes, ErrorKind::Format, {"'a' count"});
}

TEST(GgufCorrupt, StringLongerThanFile) {
  RawGguf g;
  g.header(3, 0, 1).u64(1000).zeros(10);  // key claims 1000 bytes at byte 24
  expect_error(g.bytes, ErrorKind::Format, {"metadata[0] key", "at byte 24", "string length 1000"});
  RawGguf v;
  v.header(3, 0, 1).str("k").u32(8).u64(~0ull);
  expect_error(v.bytes, ErrorKind::Format, {"'k'", "string length"});
}

TEST(GgufCorrupt, UnknownValueTypeAndBadBool) {
  RawGguf t;
  t.header(3, 0, 1).str("k").u32(13).u32(0);
  expect_error(t.bytes, ErrorKind::Format, {"'k' type", "unknown value type 13"});
  RawGguf et;
  et.header(3, 0, 1).str("k").u32(9).u32(77).u64(0);
  expect_error(et.bytes, ErrorKind::Format, {"element type", "77"});
  RawGguf b;
  b.header(3, 0, 1).str("k").u32(7).u8(2);
  expect_error(b.bytes, ErrorKind::Format, {"'k'", "bool"});
}

TEST(GgufCorrupt, NestingDepthLimit) {
  RawGguf g;
  g.header(3, 0, 1).str("deep").u32(9);
  for (int i = 0; i < 20; ++i) g.u32(9).u64(1);
  g.u32(0).u64(0);
  expect_error(g.bytes, ErrorKind::Format, {"'deep'", "nested deeper"});
}

TEST(GgufCorrupt, DuplicateKeysAndTensors) {
  RawGguf k;
  k.header(3, 0, 2).kv_u32("a", 1).kv_u32("a", 2);
  expect_error(k.bytes, ErrorKind::Format, {"metadata[1] key", "duplicate", "'a'"});
  RawGguf t;
  t.header(3, 2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad(32).zeros(64);
  expect_error(t.bytes, ErrorKind::Format, {"tensor[1] name", "duplicate tensor name 'w'"});
  RawGguf e;
  e.header(3, 0, 1).kv_u32("", 1);
  expect_error(e.bytes, ErrorKind::Format, {"metadata[0] key", "empty"});
}

TEST(GgufCorrupt, Alignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    RawGguf g;
    g.header(3, 0, 1).kv_u32("general.alignment", a);
    expect_error(g.bytes, ErrorKind::Format, {"general.alignment", "power of two"});
  }
  RawGguf s;
  s.header(3, 0, 1).kv_str("general.alignment", "32");
  expect_error(s.bytes, ErrorKind::Format, {"general.alignment", "unsigned integer"});
}

TEST(GgufCorrupt, TensorDataPastEndOfFile) {
  expect_error(one_tensor_file({8}, kF32, 0, 31).bytes, ErrorKind::Format,
               {"tensor 'w'", "past the end"});
  expect_error(one_tensor_file({8}, kF32, 1ull << 62).bytes, ErrorKind::Format, {"tensor 'w'"});
  expect_error(one_tensor_file({8}, kF32, ~0ull & ~31ull).bytes, ErrorKind::Format, {"tensor 'w'"});
}

TEST(GgufCorrupt, OverlappingTensors) {
  RawGguf t;
  t.header(3, 2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32).pad(32).zeros(64);
  expect_error(t.bytes, ErrorKind::Format, {"overlaps"});
}

TEST(GgufCorrupt, ElementCountOverflow) {
  expect_error(one_tensor_file({1ull << 32, 1ull << 32}).bytes, ErrorKind::Format,
               {"'w' dims[1]", "overflow"});
  expect_error(one_tensor_file({~0ull}).bytes, ErrorKind::Format, {"'w' dims[0]", "overflow"});
  // elements fit in 63 bits but bytes do not: 2^62 F32 elements = 2^64 bytes
  expect_error(one_tensor_file({1ull << 31, 1ull << 31}).bytes, ErrorKind::Format,
               {"'w'", "overflow"});
}

TEST(GgufCorrupt, UnknownDtypeIsUnsupported) {
  expect_error(one_tensor_file({8}, 99).bytes, ErrorKind::Unsupported,
               {"'w'", "type id 99"});
}

TEST(GgufCorrupt, MisalignedOffset) {
  expect_error(one_tensor_file({4}, kF32, 16).bytes, ErrorKind::Format,
               {"'w' offset", "alignment 32"});
}

TEST(GgufCorrupt, RowNotMultipleOfBlock) {
  expect_error(one_tensor_file({48}, kQ8_0).bytes, ErrorKind::Format,
               {"'w' dims[0]", "block size 32"});
  expect_error(one_tensor_file({128, 2}, kQ4_K).bytes, ErrorKind::Format, {"Q4_K", "256"});
}

TEST(GgufCorrupt, ZeroAndTooManyDims) {
  expect_error(one_tensor_file({8, 0}).bytes, ErrorKind::Format, {"'w' dims[1]", "zero"});
  expect_error(one_tensor_file({}).bytes, ErrorKind::Format, {"'w' n_dims", "0 dimensions"});
  expect_error(one_tensor_file({8, 1, 1, 1, 1}).bytes, ErrorKind::Format,
               {"'w' n_dims", "5 dimensions"});
}

}  // namespace
}  // namespace larql
