// The engine state file: a versioned, self-describing header, the generation session, the
// engine's payload, and a checksum of everything before it.
//   magic "LARQLKV\0" | u32 version (2) | str engine | str config | str model fingerprint |
//   u64 n_past | session: u64 n + i32 history[n], str sampler, str rng |
//   payload ... | u64 XXH3-64 of every preceding byte
// (str = u32 length + bytes; little-endian). Written through util/atomic_file.h's AtomicWriter,
// so an interrupted save leaves the previous file intact. Every f32 in a payload must be finite.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "inference/kv_cache.h"
#include "kv/engine.h"
#include "util/hash.h"

namespace larql {

class AtomicWriter;

inline constexpr char kStateMagic[8] = {'L', 'A', 'R', 'Q', 'L', 'K', 'V', '\0'};
inline constexpr uint32_t kStateVersion = 2;

struct StateHeader {
  std::string engine;
  std::string config;
  std::string fingerprint;
  uint64_t n_past = 0;
  SessionState session{};
};

/// Sequential writer through an AtomicWriter; the checksum is appended by close(). Nothing
/// reaches `path` until close() succeeds. Errors: those of AtomicWriter (Error{InvalidArgument}
/// for a directory or an input of this process, Error{Io} with the OS reason).
class StateWriter {
 public:
  StateWriter(const std::string& path, const StateHeader& h);
  ~StateWriter();
  void u64(uint64_t v);
  void floats(const float* p, size_t n);
  void u32s(const uint32_t* p, size_t n);
  void bytes(const void* p, size_t n);
  void close();

 private:
  void raw(const void* p, size_t n);
  std::unique_ptr<AtomicWriter> out_;
  Xxh3Stream hash_;
};

/// Sequential reader with bounds checks. The constructor verifies the checksum of the whole
/// file, so damage anywhere is an Error{Format} before any field is used. Error{Format} naming the
/// byte offset on truncation or a non-finite float.
class StateReader {
 public:
  explicit StateReader(const std::string& path);
  /// The header; Error{InvalidArgument} if the engine or fingerprint differ from expected.
  StateHeader header(const std::string& expect_engine, const std::string& expect_fingerprint);
  /// As above, and the engine configuration string must equal `expect_config`.
  StateHeader header(const std::string& expect_engine, const std::string& expect_fingerprint,
                     const std::string& expect_config);
  uint64_t u64();
  /// n f32 values; Error{Format} if any is NaN or infinite.
  void floats(float* p, size_t n);
  void u32s(uint32_t* p, size_t n);
  void bytes(void* p, size_t n);
  /// Bytes not read yet (to bound a count before allocating for it).
  size_t remaining() const { return end_ - pos_; }
  void expect_end();
  const std::string& path() const { return path_; }

 private:
  void raw(void* p, size_t n);
  std::string str(size_t max_len);
  std::string path_;
  std::vector<uint8_t> data_;
  size_t pos_ = 0;
  size_t end_ = 0;  ///< where the payload ends (the checksum follows)
};

/// One layer's live K/V rows: u64 first_pos, u64 rows, then K and V [rows, kv_dim] f32.
void write_layer_kv(StateWriter& w, const LayerKv& layer);

/// Read what write_layer_kv wrote into `layer` (replacing its rows; kv_dim from `layer`). The rows
/// must end at `end_pos` and, when `first_pos` >= 0, start there. Errors: Error{Format} naming
/// `what` and the file on a mismatch or truncation.
void read_layer_kv(StateReader& r, LayerKv& layer, int64_t end_pos, int64_t first_pos, const std::string& what);

}  // namespace larql
