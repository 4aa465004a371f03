// GGUF reader against files written by other tools:
//  - the committed fuzz seeds, written by gguf-py (llama.cpp's Python writer) in fuzz/make_seeds.py;
//    expected values are the ones that script writes;
//  - the real default model; expected facts were read with gguf-py's GGUFReader (gguf 0.19.0).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "formats/gguf.h"
#include "testlib/paths.h"
#include "util/error.h"

namespace larql {
namespace {

// Seeds live in the source tree: LARQL_SOURCE_DIR under CTest, else found from this file's path
// so the binary also works when run by hand from any directory.
std::string seed(const std::string& name) {
  std::filesystem::path root = std::getenv("LARQL_SOURCE_DIR")
                                   ? std::filesystem::path(larql::testing::source_dir())
                                   : std::filesystem::path(__FILE__).parent_path() / ".." / "..";
  return (root / "fuzz/corpus/gguf" / name).string();
}

TEST(GgufSeeds, AllTypesWrittenByGgufPy) {
  for (const char* file : {"valid_all_types.gguf", "valid_v2.gguf"}) {
    SCOPED_TRACE(file);
    auto f = GgufFile::open(seed(file));
    EXPECT_EQ(f->version(), std::string(file) == "valid_v2.gguf" ? 2u : 3u);
    EXPECT_EQ(f->metadata_count(), 17u);
    EXPECT_EQ(f->get_string("general.architecture"), "larqltest");
    EXPECT_EQ(f->get_uint("t.u8"), 200u);
    EXPECT_EQ(f->get_int("t.i8"), -100);
    EXPECT_EQ(f->get_uint("t.u16"), 60000u);
    EXPECT_EQ(f->get_int("t.i16"), -30000);
    EXPECT_EQ(f->get_uint("t.u32"), 4000000000u);
    EXPECT_EQ(f->get_int("t.i32"), -2000000000);
    EXPECT_EQ(f->get_uint("t.u64"), (1ull << 63) + 5);
    EXPECT_EQ(f->get_int("t.i64"), -(1ll << 62));
    EXPECT_EQ(f->get_float("t.f32"), 1.5);
    EXPECT_EQ(f->get_float("t.f64"), -2.25);
    EXPECT_EQ(f->find("t.f64")->type, GgufValueType::FLOAT64);
    EXPECT_EQ(f->get_bool("t.bool"), true);
    EXPECT_EQ(f->get_string("t.str"), "h\xc3\xa9llo");
    EXPECT_EQ(f->get_int_array("t.arr_i32"), (std::vector<int64_t>{1, -2, 3}));
    EXPECT_EQ(f->get_f32_array("t.arr_f32"), (std::vector<float>{0.5f, -1.0f}));
    EXPECT_EQ(f->get_string_array("t.arr_str"), (std::vector<std::string>{"a", "", "ccc"}));
    const auto nested = std::get<GgufArray>(f->find("t.arr_nested")->value);
    ASSERT_EQ(nested.size(), 2u);
    const auto second = std::get<GgufArray>(nested.items()[1].value);
    EXPECT_EQ(second.elem_type(), GgufValueType::INT32);
    ASSERT_EQ(second.size(), 1u);
    EXPECT_EQ(std::get<int64_t>(second.at(0).value), 3);

    EXPECT_EQ(f->data_offset(), 704u);  // GGUFReader.data_offset
    ASSERT_EQ(f->tensors().size(), 3u);
    const GgufTensor* a = f->find_tensor("f32.weight");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->dims, (std::vector<uint64_t>{4, 2}));
    float v[8];
    std::memcpy(v, a->data, sizeof v);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(v[i], static_cast<float>(i));
    const GgufTensor* h = f->find_tensor("f16.weight");
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(h->type, DType::F16);
    EXPECT_EQ(h->data - f->tensors()[0].data, 736 - 704);
    const GgufTensor* q = f->find_tensor("q8.weight");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->type, DType::Q8_0);
    EXPECT_EQ(q->dims, (std::vector<uint64_t>{32, 1}));
    EXPECT_EQ(q->nbytes, 34u);
    EXPECT_EQ(q->data[0], 0x00);  // f16 1.0 = 0x3c00, little-endian
    EXPECT_EQ(q->data[1], 0x3c);
    EXPECT_EQ(q->data[2 + 31], 31);
  }
}

TEST(GgufSeeds, Alignment64) {
  auto f = GgufFile::open(seed("valid_align64.gguf"));
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->find_tensor("b")->offset, 64u);
}

TEST(GgufSeeds, InvalidSeedsAreRejected) {
  const std::pair<const char*, ErrorKind> cases[] = {
      {"invalid_bad_magic.gguf", ErrorKind::Format},
      {"invalid_v1.gguf", ErrorKind::Unsupported},
      {"invalid_truncated.gguf", ErrorKind::Format},
      {"invalid_huge_kv_count.gguf", ErrorKind::Format},
      {"invalid_unknown_type.gguf", ErrorKind::Unsupported},
      {"invalid_misaligned.gguf", ErrorKind::Format},
      {"invalid_past_eof.gguf", ErrorKind::Format},
      {"invalid_nesting.gguf", ErrorKind::Format},
  };
  for (const auto& [file, kind] : cases) {
    try {
      GgufFile::open(seed(file));
      ADD_FAILURE() << file << " parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << file << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    }
  }
}

TEST(GgufRealModel, FactsMatchGgufPy) {
  LARQL_REQUIRE_MODEL(path);
  auto f = GgufFile::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->tensors().size(), 236u);
  EXPECT_EQ(f->metadata_count(), 33u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset(), 6525120u);
  EXPECT_EQ(f->get_string("general.architecture"), "gemma3");
  EXPECT_EQ(f->get_uint("gemma3.block_count"), 18u);
  EXPECT_EQ(f->find("gemma3.block_count")->type, GgufValueType::UINT32);
  EXPECT_EQ(f->get_uint("gemma3.embedding_length"), 640u);
  EXPECT_EQ(f->get_uint("gemma3.context_length"), 32768u);
  EXPECT_EQ(f->get_float("gemma3.rope.freq_base"), 1000000.0);
  EXPECT_EQ(f->get_bool("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(f->get_uint("tokenizer.ggml.bos_token_id"), 2u);

  const GgufTensor* emb = f->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, DType::Q8_0);
  EXPECT_EQ(emb->dims, (std::vector<uint64_t>{640, 262144}));
  EXPECT_EQ(emb->nbytes, 178257920u);
  EXPECT_EQ(f->data_offset() + emb->offset, 6527680u);
  const uint8_t first[8] = {0xf2, 0x10, 0xf4, 0x47, 0xc7, 0xdd, 0xec, 0x30};
  EXPECT_EQ(std::memcmp(emb->data, first, 8), 0);
  const GgufTensor* q = f->find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, DType::Q5_0);
  EXPECT_EQ(q->dims, (std::vector<uint64_t>{640, 1024}));
  EXPECT_EQ(q->offset, 178745344u);  // GGUFReader: tensor.data_offset - reader.data_offset

  int counts[31] = {};
  for (const auto& t : f->tensors()) counts[static_cast<int>(t.type)]++;
  EXPECT_EQ(counts[static_cast<int>(DType::F32)], 109);
  EXPECT_EQ(counts[static_cast<int>(DType::Q5_0)], 81);
  EXPECT_EQ(counts[static_cast<int>(DType::Q4_K)], 27);
  EXPECT_EQ(counts[static_cast<int>(DType::Q8_0)], 10);
  EXPECT_EQ(counts[static_cast<int>(DType::Q6_K)], 9);

  auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.has_value());
  ASSERT_EQ(tokens->size(), 262144u);
  EXPECT_EQ((*tokens)[0], "<pad>");
  EXPECT_EQ((*tokens)[2], "<bos>");
  EXPECT_EQ((*tokens)[106], "<end_of_turn>");
  EXPECT_EQ((*tokens)[262143], "<unused6241>");
  auto scores = f->get_f32_array("tokenizer.ggml.scores");
  ASSERT_TRUE(scores.has_value());
  EXPECT_EQ((*scores)[100], -1000.0f);
  auto types = f->get_int_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.has_value());
  EXPECT_EQ((*types)[0], 3);
}

TEST(GgufRealModel, HeaderWithoutDataSectionIsRejected) {
  LARQL_REQUIRE_MODEL(path);
  std::ifstream in(path, std::ios::binary);
  // Header and tables only (first 6.6 MB): the data section is cut off, so parsing must fail
  // cleanly naming a tensor whose data runs past the end.
  std::vector<uint8_t> head(6600000);
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  try {
    GgufFile::parse(head.data(), head.size(), "head");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find("past the end"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace larql
