// down_meta.bin: bytes laid out by hand from the published layout (docs/vindex-format.md), read
// back; the writer's bytes equal them; every malformation is a Format error naming the byte.
#include "vindex/down_meta_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <unistd.h>

#include "util/error.h"

namespace larql::vindex {
namespace {

using Bytes = std::vector<uint8_t>;

void u32(Bytes& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void f32(Bytes& b, float f) {
  uint32_t v;
  std::memcpy(&v, &f, 4);
  u32(b, v);
}

// Two layers, top_k 2: layer 0 has one feature (tokens 7 @ 1.5, 9 @ 0.25), layer 1 none.
Bytes sample() {
  Bytes b = {'T', 'E', 'M', 'D'};
  u32(b, 1);
  u32(b, 2);
  u32(b, 2);
  u32(b, 1);  // layer 0: one feature
  u32(b, 7);
  f32(b, 1.5f);  // top token, c_score
  u32(b, 7);
  f32(b, 1.5f);
  u32(b, 9);
  f32(b, 0.25f);
  u32(b, 0);  // layer 1: none
  return b;
}

void expect_format(const Bytes& b, const std::string& needle) {
  try {
    DownMetaFile::parse(b.data(), b.size(), "dm.bin");
    ADD_FAILURE() << "parsed; expected " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(DownMetaFileTest, ReadsThePublishedLayout) {
  const Bytes b = sample();
  const auto f = DownMetaFile::parse(b.data(), b.size(), "dm.bin");
  EXPECT_EQ(f.num_layers(), 2u);
  EXPECT_EQ(f.top_k(), 2u);
  EXPECT_EQ(f.num_features(0), 1u);
  EXPECT_EQ(f.num_features(1), 0u);
  EXPECT_EQ(f.entry(0, 0, 0).token, 7u);
  EXPECT_EQ(f.entry(0, 0, 1).logit, 0.25f);
  EXPECT_THROW(f.entry(0, 1, 0), Error);
  EXPECT_THROW(f.entry(0, 0, 2), Error);
  EXPECT_THROW(f.num_features(2), Error);
}

TEST(DownMetaFileTest, WriterProducesTheSameBytes) {
  const auto path = std::filesystem::temp_directory_path() / ("larql-dm-" + std::to_string(::getpid()) + ".bin");
  DownMetaWriter w(path.string(), 2, 2);
  w.add_layer(0, 1, {{7, 1.5f}, {9, 0.25f}});
  EXPECT_THROW(w.add_layer(0, 0, {}), Error);  // out of order
  EXPECT_THROW(w.commit(), Error);             // a layer missing
  w.add_layer(1, 0, {});
  w.commit();
  std::ifstream in(path, std::ios::binary);
  const Bytes got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, sample());
  EXPECT_EQ(DownMetaFile::open(path.string()).entry(0, 0, 0).token, 7u);
  std::filesystem::remove(path);
}

TEST(DownMetaFileTest, RejectsMalformedFiles) {
  const Bytes good = sample();
  expect_format(Bytes(good.begin(), good.begin() + 10), "shorter than the 16-byte header");
  Bytes b = good;
  b[0] = 'X';
  expect_format(b, "bad magic");
  b = good;
  b[4] = 2;
  expect_format(b, "version 2");
  b = good;
  b[12] = 0;
  expect_format(b, "top_k 0");
  b = good;
  b[16] = 200;  // layer 0 claims 200 features
  expect_format(b, "layer 0 claims 200 features");
  b = good;
  b.push_back(0);
  expect_format(b, "1 bytes follow the last layer");
  b = Bytes(good.begin(), good.end() - 4);  // layer 1's count cut off
  expect_format(b, "before layer 1");
}

}  // namespace
}  // namespace larql::vindex
