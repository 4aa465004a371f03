// Content checksums for larql's own files: XXH3-64 from the xxHash library (Debian libxxhash-dev;
// spec: https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md). Not cryptographic:
// it detects damage (bit flips, truncation, a stray edit), not tampering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace larql {

/// XXH3-64 of n bytes (seed 0).
uint64_t xxh3_64(const void* data, size_t n);
inline uint64_t xxh3_64(std::string_view s) { return xxh3_64(s.data(), s.size()); }

/// 16 lower-case hex digits of a 64-bit checksum.
std::string hex64(uint64_t v);

/// Streaming XXH3-64: update() in pieces gives the same digest as xxh3_64() of the whole.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void update(const void* data, size_t n);
  uint64_t digest() const;
  void reset();

 private:
  void* state_;  ///< XXH3_state_t
};

}  // namespace larql
