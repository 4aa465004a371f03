// The engine state file: a versioned, self-describing header, then the engine's payload.
//   magic "LARQLKV\0" | u32 version | str engine | str config | str model fingerprint |
//   u64 n_past | payload...      (str = u32 length + bytes; little-endian)
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace larql {

inline constexpr char kStateMagic[8] = {'L', 'A', 'R', 'Q', 'L', 'K', 'V', '\0'};
inline constexpr uint32_t kStateVersion = 1;

struct StateHeader {
  std::string engine;
  std::string config;
  std::string fingerprint;
  uint64_t n_past = 0;
};

/// Sequential writer; Error{Io} on failure (checked at close()).
class StateWriter {
 public:
  StateWriter(const std::string& path, const StateHeader& h);
  void u64(uint64_t v);
  void floats(const float* p, size_t n);
  void close();

 private:
  void raw(const void* p, size_t n);
  std::string path_;
  std::ofstream out_;
};

/// Sequential reader with bounds checks; Error{Format} naming the byte offset on truncation.
class StateReader {
 public:
  explicit StateReader(const std::string& path);
  /// The header; Error{InvariantViolation} if the engine or fingerprint differ from expected.
  StateHeader header(const std::string& expect_engine, const std::string& expect_fingerprint);
  uint64_t u64();
  void floats(float* p, size_t n);
  void expect_end();

 private:
  void raw(void* p, size_t n);
  std::string str();
  std::string path_;
  std::vector<uint8_t> data_;
  size_t pos_ = 0;
};

}  // namespace larql
