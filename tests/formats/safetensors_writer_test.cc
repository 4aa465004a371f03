// Safetensors writer (formats/safetensors_writer.h): the bytes it writes checked against the
// published layout (huggingface/safetensors README "Format": u64 little-endian header size, JSON
// header with data_offsets relative to the buffer, the buffer), built here by hand, then read back
// by the reader; a producer that writes the wrong number of bytes leaves no file.
#include "formats/safetensors_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace larql {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / ("larql-stw-" + std::to_string(::getpid()) + "-" + name)).string();
}

std::vector<uint8_t> read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

SafetensorsWriter::Producer bytes_of(std::vector<uint8_t> b, size_t piece = 3) {
  return [b, piece](const SafetensorsWriter::Sink& sink) {
    for (size_t i = 0; i < b.size(); i += piece) sink(b.data() + i, std::min(piece, b.size() - i));
  };
}

TEST(SafetensorsWriter, WritesThePublishedLayout) {
  const std::vector<float> a = {1, -2, 3.5f, 4, 5, 6};                     // F32 [2, 3]: 24 bytes
  const std::vector<uint8_t> bf = {0x80, 0x3f, 0x00, 0x40, 0x40, 0x40};  // BF16 [3]: 1, 2, 3
  const std::vector<uint8_t> h = {0x00, 0x3c};                           // F16 [1]: 1
  std::vector<uint8_t> ab(24);
  std::memcpy(ab.data(), a.data(), 24);
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.add("a", StDType::F32, {2, 3}, bytes_of(ab));
  w.add("b", StDType::BF16, {3}, bytes_of(bf));
  w.add("c", StDType::F16, {1}, bytes_of(h, 1));
  EXPECT_EQ(w.data_bytes(), 32u);
  const std::string path = temp_path("a.safetensors");
  uint64_t last = 0;
  w.write(path, [&](uint64_t done, uint64_t total) {
    EXPECT_EQ(total, w.file_size());
    last = done;
  });
  EXPECT_EQ(last, w.file_size());
  const auto file = read_all(path);
  ASSERT_EQ(file.size(), w.file_size());
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(file[static_cast<size_t>(i)]) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u);  // the buffer starts 8-byte aligned
  const auto header = nlohmann::json::parse(std::string(file.begin() + 8, file.begin() + 8 + static_cast<long>(n)));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["a"]["dtype"], "F32");
  EXPECT_EQ(header["a"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json({24, 30}));
  EXPECT_EQ(header["c"]["data_offsets"], nlohmann::json({30, 32}));
  std::vector<uint8_t> data(file.begin() + 8 + static_cast<long>(n), file.end());
  std::vector<uint8_t> want = ab;
  want.insert(want.end(), bf.begin(), bf.end());
  want.insert(want.end(), h.begin(), h.end());
  EXPECT_EQ(data, want);
  // The reader agrees.
  auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f->tensors().size(), 3u);
  std::vector<float> back(6);
  to_f32(*f->find("a"), back.data());
  EXPECT_EQ(back, a);
  to_f32(*f->find("b"), back.data());
  EXPECT_EQ(std::vector<float>(back.begin(), back.begin() + 3), (std::vector<float>{1, 2, 3}));
  std::filesystem::remove(path);
}

TEST(SafetensorsWriter, AProducerOfTheWrongSizeLeavesNoFile) {
  const std::string path = temp_path("short.safetensors");
  for (size_t bytes : {7u, 9u}) {
    SafetensorsWriter w;
    w.add("x", StDType::F32, {2}, bytes_of(std::vector<uint8_t>(bytes, 1)));
    try {
      w.write(path);
      FAIL() << "accepted " << bytes << " bytes for 8";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("tensor x"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(path));
  }
}

TEST(SafetensorsWriter, RefusesBadEntries) {
  SafetensorsWriter w;
  w.add("x", StDType::F32, {1}, bytes_of({0, 0, 0, 0}));
  EXPECT_THROW(w.add("x", StDType::F32, {1}, bytes_of({0, 0, 0, 0})), Error);
  EXPECT_THROW(w.add("__metadata__", StDType::F32, {1}, bytes_of({0, 0, 0, 0})), Error);
  EXPECT_THROW(w.add("", StDType::F32, {1}, bytes_of({0, 0, 0, 0})), Error);
  EXPECT_THROW(w.add("y", StDType::I32, {1}, bytes_of({0, 0, 0, 0})), Error);
  EXPECT_THROW(w.add("z", StDType::F32, {-1}, bytes_of({})), Error);
}

}  // namespace
}  // namespace larql
