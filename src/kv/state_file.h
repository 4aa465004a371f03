// The engine state file: a versioned, self-describing header, then the engine's payload.
//   magic "LARQLKV\0" | u32 version | str engine | str config | str model fingerprint |
//   u64 n_past | payload...      (str = u32 length + bytes; little-endian)
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "inference/kv_cache.h"

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
  void u32s(const uint32_t* p, size_t n);
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
  /// As above, and the engine configuration string must equal `expect_config`.
  StateHeader header(const std::string& expect_engine, const std::string& expect_fingerprint,
                     const std::string& expect_config);
  uint64_t u64();
  void floats(float* p, size_t n);
  void u32s(uint32_t* p, size_t n);
  /// Bytes not read yet (to bound a count before allocating for it).
  size_t remaining() const { return data_.size() - pos_; }
  void expect_end();
  const std::string& path() const { return path_; }

 private:
  void raw(void* p, size_t n);
  std::string str();
  std::string path_;
  std::vector<uint8_t> data_;
  size_t pos_ = 0;
};

/// One layer's live K/V rows: u64 first_pos, u64 rows, then K and V [rows, kv_dim] f32.
void write_layer_kv(StateWriter& w, const LayerKv& layer);

/// Read what write_layer_kv wrote into `layer` (replacing its rows; kv_dim from `layer`). The rows
/// must end at `end_pos` and, when `first_pos` >= 0, start there. Errors: Error{Format} naming
/// `what` and the file on a mismatch or truncation.
void read_layer_kv(StateReader& r, LayerKv& layer, int64_t end_pos, int64_t first_pos, const std::string& what);

}  // namespace larql
