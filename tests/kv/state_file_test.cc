// The state file: checksum over everything, finite floats, the session section, atomic writes.
#include "kv/state_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "util/error.h"
#include "util/hash.h"

namespace larql {
namespace {

std::string tmp(const std::string& name) { return ::testing::TempDir() + "/larql-state-" + name; }

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary | std::ios::trunc) << s; }

Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorKind::BackendFailure, "");
}

void write_sample(const std::string& path, const std::vector<float>& values) {
  StateHeader h{"standard", "window=4", "fp", 3, {{2, 7, 9, 11}, "temperature=0", "rng-state"}};
  StateWriter w(path, h);
  w.u64(values.size());
  w.floats(values.data(), values.size());
  w.close();
}

TEST(StateFile, RoundTripWithSessionAndLayoutFromTheSpec) {
  const std::string p = tmp("rt");
  write_sample(p, {1.5f, -2.0f});
  StateReader r(p);
  const StateHeader h = r.header("standard", "fp", "window=4");
  EXPECT_EQ(h.n_past, 3u);
  EXPECT_EQ(h.session.history, (std::vector<int32_t>{2, 7, 9, 11}));
  EXPECT_EQ(h.session.sampler, "temperature=0");
  EXPECT_EQ(h.session.rng, "rng-state");
  EXPECT_EQ(r.u64(), 2u);
  float f[2];
  r.floats(f, 2);
  EXPECT_EQ(f[0], 1.5f);
  r.expect_end();
  // The layout documented in state_file.h, checked byte by byte from the end: the last 8 bytes
  // are XXH3-64 of everything before them; version 2 at byte 8.
  const std::string bytes = slurp(p);
  uint64_t sum = 0;
  std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
  EXPECT_EQ(sum, xxh3_64(bytes.data(), bytes.size() - 8));
  EXPECT_EQ(bytes.substr(0, 8), std::string("LARQLKV\0", 8));
  EXPECT_EQ(bytes[8], 2);
  std::remove(p.c_str());
}

TEST(StateFile, AnyFlippedBitOrTruncationIsAChecksumError) {
  const std::string p = tmp("flip");
  write_sample(p, std::vector<float>(64, 0.25f));
  const std::string good = slurp(p);
  for (size_t at : {size_t{13}, size_t{40}, good.size() / 2, good.size() - 9, good.size() - 1}) {
    std::string bad = good;
    bad[at] ^= 0x01;
    spit(p, bad);
    const Error e = error_of([&] { StateReader r(p); });
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << at << ": " << e.what();
  }
  spit(p, good.substr(0, good.size() - 5));
  EXPECT_EQ(error_of([&] { StateReader r(p); }).kind(), ErrorKind::Format);
  std::remove(p.c_str());
}

TEST(StateFile, NonFiniteFloatsAreRefusedEvenWithAValidChecksum) {
  const std::string p = tmp("nan");
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    write_sample(p, {1.0f, bad, 3.0f});
    StateReader r(p);
    r.header("standard", "fp");
    r.u64();
    float f[3];
    const Error e = error_of([&] { r.floats(f, 3); });
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
  }
  std::remove(p.c_str());
}

TEST(StateFile, OlderVersionAndForeignFilesAreRefused) {
  const std::string p = tmp("v1");
  write_sample(p, {1.0f});
  std::string bytes = slurp(p);
  bytes[8] = 1;  // version 1: no checksum, no session
  spit(p, bytes);
  EXPECT_NE(std::string(error_of([&] { StateReader r(p); }).what()).find("version 1"), std::string::npos);
  spit(p, "GGUF garbage that is not a state file");
  EXPECT_NE(std::string(error_of([&] { StateReader r(p); }).what()).find("not a larql state file"), std::string::npos);
  std::remove(p.c_str());
}

TEST(StateFile, AWriterThatDoesNotCloseLeavesThePreviousFile) {
  const std::string p = tmp("keep");
  write_sample(p, {1.0f});
  const std::string before = slurp(p);
  {
    StateWriter w(p, {"standard", "", "fp", 0, {}});
    w.u64(42);
  }  // destroyed without close(): an error path
  EXPECT_EQ(slurp(p), before);
  std::remove(p.c_str());
}

}  // namespace
}  // namespace larql
