// Safetensors reader: files built byte by byte from the published layout (huggingface/safetensors
// README, "Format": u64 little-endian header size, JSON header, data buffer), and one test per
// malformation the reader must reject with a Format error naming the tensor and field.
#include "formats/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "util/error.h"
#include "util/half.h"

namespace larql {
namespace {

using Bytes = std::vector<uint8_t>;

// header size (u64 LE) + header + data.
Bytes file_of(const std::string& header, const Bytes& data) {
  Bytes b;
  b.reserve(8 + header.size() + data.size());
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(n >> (8 * i)));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

Bytes f32_bytes(std::vector<float> v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::shared_ptr<const SafetensorsFile> parse(const Bytes& b) { return SafetensorsFile::parse(b.data(), b.size(), "t.safetensors"); }

void expect_error(const Bytes& b, ErrorKind kind, std::vector<std::string> needles) {
  try {
    parse(b);
    ADD_FAILURE() << "parse succeeded; expected an error mentioning " << needles[0];
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "message lacks '" << n << "': " << e.what();
  }
}

// Two tensors: "b" (F32 [2,2], bytes 0..16) and "a" (BF16 [3], bytes 16..22), listed out of
// order in the header, plus metadata.
Bytes two_tensors() {
  Bytes data = f32_bytes({1.0f, -2.0f, 0.5f, 4.0f});
  for (float f : {1.0f, -0.25f, 3.0f}) {
    const uint16_t h = f32_to_bf16(f);
    data.push_back(static_cast<uint8_t>(h & 0xff));
    data.push_back(static_cast<uint8_t>(h >> 8));
  }
  return file_of(R"({"a":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},)"
                 R"("__metadata__":{"format":"pt"},)"
                 R"("b":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}   )",
                 data);
}

TEST(SafetensorsTest, ReadsThePublishedLayout) {
  const Bytes b = two_tensors();
  const auto f = parse(b);
  ASSERT_EQ(f->tensors().size(), 2u);
  // File order (by offset), whatever the header's order.
  EXPECT_EQ(f->tensors()[0].name, "b");
  EXPECT_EQ(f->tensors()[1].name, "a");
  const SafetensorsTensor* t = f->find("b");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, StDType::F32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t->nbytes, 16u);
  const size_t header = b.size() - 22 - 8;
  EXPECT_EQ(t->offset, 8 + header);
  std::vector<float> out(4);
  to_f32(*t, out.data());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f, 0.5f, 4.0f}));
  const SafetensorsTensor* a = f->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->offset, 8 + header + 16);
  std::vector<float> av(3);
  to_f32(*a, av.data());
  EXPECT_EQ(av, (std::vector<float>{1.0f, -0.25f, 3.0f}));
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->find("c"), nullptr);
}

TEST(SafetensorsTest, AcceptsScalarsAndEmptyTensors) {
  const auto f = parse(file_of(R"({"s":{"dtype":"F16","shape":[],"data_offsets":[0,2]},)"
                               R"("e":{"dtype":"F32","shape":[0,4],"data_offsets":[2,2]}})",
                               Bytes{0x00, 0x3c}));  // f16 1.0
  ASSERT_EQ(f->tensors().size(), 2u);
  float one = 0;
  to_f32(*f->find("s"), &one);
  EXPECT_EQ(one, 1.0f);
  EXPECT_EQ(f->find("e")->n_elements(), 0);
}

TEST(SafetensorsTest, RejectsShortFilesAndHeaderSizes) {
  expect_error(Bytes{1, 0, 0}, ErrorKind::Format, {"too short"});
  Bytes b = two_tensors();
  b[0] = 0xff;
  b[1] = 0xff;
  b[2] = 0xff;  // ~16 MB header in a tiny file
  expect_error(b, ErrorKind::Format, {"runs past the end"});
  Bytes huge(16, 0);
  huge[4] = 1;  // 2^32
  expect_error(huge, ErrorKind::Format, {"exceeds the limit"});
}

TEST(SafetensorsTest, RejectsBadJson) {
  expect_error(file_of("[1,2]", {}), ErrorKind::Format, {"does not start with '{'"});
  expect_error(file_of(R"({"a": )", {}), ErrorKind::Format, {"not valid JSON"});
  expect_error(file_of("{\"a\xff\":1}", {}), ErrorKind::Format, {"not valid JSON"});
  expect_error(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                       f32_bytes({1, 2})),
               ErrorKind::Format, {"\"a\" twice"});
}

TEST(SafetensorsTest, RejectsMalformedTensorEntries) {
  const Bytes d4 = f32_bytes({1});
  expect_error(file_of(R"({"w":5})", {}), ErrorKind::Format, {"tensor \"w\"", "not an object"});
  expect_error(file_of(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", d4), ErrorKind::Format,
               {"tensor \"w\"", "unknown dtype \"F33\""});
  expect_error(file_of(R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", Bytes{0}), ErrorKind::Unsupported,
               {"tensor \"w\"", "F4"});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", d4), ErrorKind::Format,
               {"tensor \"w\" shape entry", "non-negative"});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", d4), ErrorKind::Format,
               {"shape entry"});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[1]}})", d4), ErrorKind::Format, {"no data_offsets"});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", d4), ErrorKind::Format,
               {"begin 4 > end 0"});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", d4), ErrorKind::Format,
               {"tensor \"w\"", "holds 4 bytes", "need 8"});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", d4), ErrorKind::Format,
               {"past the end of the data"});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", d4),
               ErrorKind::Format, {"tensor \"w\""});
  expect_error(file_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})", d4), ErrorKind::Format,
               {"unknown field \"extra\""});
  expect_error(file_of(R"({"__metadata__":{"k":1}})", {}), ErrorKind::Format, {"__metadata__[\"k\"]"});
}

TEST(SafetensorsTest, RequiresTheBufferIndexedEntirely) {
  const Bytes d8 = f32_bytes({1, 2});
  // A hole before "b".
  expect_error(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}})", d8),
               ErrorKind::Format, {"hole", "\"b\""});
  // Overlap.
  expect_error(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8),
               ErrorKind::Format, {"overlaps"});
  // Trailing bytes no tensor owns.
  expect_error(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d8), ErrorKind::Format,
               {"holds 8 bytes but the tensors cover 4"});
}

TEST(SafetensorsTest, ToF32RefusesIntegerTypes) {
  const auto f = parse(file_of(R"({"i":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", Bytes{1, 0, 0, 0}));
  float x;
  try {
    to_f32(*f->find("i"), &x);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("I32"), std::string::npos);
  }
}

// Sharded checkpoints from a temporary directory.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("larql-st-" + std::to_string(::getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const Bytes& b) {
    std::ofstream(dir_ / name, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  void write(const std::string& name, const std::string& s) { write(name, Bytes(s.begin(), s.end())); }
  void expect_open_error(ErrorKind kind, const std::string& needle) {
    try {
      SafetensorsCheckpoint::open(dir_.string());
      ADD_FAILURE() << "open succeeded; expected " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  std::filesystem::path dir_;
};

const char* kShard1 = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
const char* kShard2 = R"({"y":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST_F(CheckpointTest, OpensShardsThroughTheIndex) {
  write("model-00001-of-00002.safetensors", file_of(kShard1, f32_bytes({7})));
  write("model-00002-of-00002.safetensors", file_of(kShard2, f32_bytes({8, 9})));
  write("model.safetensors.index.json", R"({"metadata":{"total_size":12},"weight_map":{)"
                                        R"("x":"model-00001-of-00002.safetensors","y":"model-00002-of-00002.safetensors"}})");
  const auto c = SafetensorsCheckpoint::open(dir_.string());
  EXPECT_EQ(c.shards().size(), 2u);
  ASSERT_NE(c.find("y"), nullptr);
  float y[2];
  to_f32(*c.find("y"), y);
  EXPECT_EQ(y[1], 9.0f);
  EXPECT_EQ(c.tensors().size(), 2u);
}

TEST_F(CheckpointTest, OpensASingleFile) {
  write("model.safetensors", file_of(kShard2, f32_bytes({8, 9})));
  const auto c = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_NE(c.find("y"), nullptr);
  EXPECT_EQ(c.find("x"), nullptr);
}

TEST_F(CheckpointTest, RejectsBadIndexes) {
  expect_open_error(ErrorKind::NotFound, "neither model.safetensors");
  write("model-00001-of-00002.safetensors", file_of(kShard1, f32_bytes({7})));
  write("model.safetensors.index.json", R"({"weight_map":{"x":"../model-00001-of-00002.safetensors"}})");
  expect_open_error(ErrorKind::Format, "not a file in");
  write("model.safetensors.index.json", R"({"weight_map":{"x":"model-00001-of-00002.safetensors","z":"model-00001-of-00002.safetensors"}})");
  expect_open_error(ErrorKind::Format, "\"z\" in model-00001-of-00002.safetensors, which does not hold it");
  write("model.safetensors.index.json", R"({"weight_map":{"x":"missing.safetensors"}})");
  expect_open_error(ErrorKind::NotFound, "missing.safetensors");
  write("model.safetensors.index.json", R"({"weights":{}})");
  expect_open_error(ErrorKind::Format, "weight_map");
  // "x" in both shards.
  write("model-00002-of-00002.safetensors",
        file_of(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                f32_bytes({7, 8, 9})));
  write("model.safetensors.index.json", R"({"weight_map":{"x":"model-00001-of-00002.safetensors","y":"model-00002-of-00002.safetensors"}})");
  expect_open_error(ErrorKind::Format, "\"x\" is in more than one shard");
}

}  // namespace
}  // namespace larql
