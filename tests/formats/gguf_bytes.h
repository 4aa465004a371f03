// Hand-assembles GGUF bytes straight from the spec (ggml/docs/gguf.md), independently of
// GgufWriter, so tests can build both valid files and every kind of corruption.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace larql::testing {

class RawGguf {
 public:
  std::vector<uint8_t> bytes;

  RawGguf& u8(uint8_t v) { return put(v); }
  RawGguf& u32(uint32_t v) { return put(v); }
  RawGguf& u64(uint64_t v) { return put(v); }
  RawGguf& i32(int32_t v) { return put(v); }
  RawGguf& f32(float v) { return put(v); }
  RawGguf& str(const std::string& s) {
    u64(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
    return *this;
  }
  /// magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
  RawGguf& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bytes.insert(bytes.end(), {'G', 'G', 'U', 'F'});
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  /// key | u32 type 4 (UINT32) | u32 value
  RawGguf& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  /// key | u32 type 8 (STRING) | string
  RawGguf& kv_str(const std::string& key, const std::string& v) { return str(key).u32(8).str(v); }
  /// name | u32 n_dims | u64 dims... | u32 ggml type | u64 offset
  RawGguf& tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
                  uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  RawGguf& pad(size_t alignment) {
    while (bytes.size() % alignment) bytes.push_back(0);
    return *this;
  }
  RawGguf& zeros(size_t n) {
    bytes.insert(bytes.end(), n, 0);
    return *this;
  }
  template <typename T>
  RawGguf& put(T v) {
    const size_t n = bytes.size();
    bytes.resize(n + sizeof(T));
    std::memcpy(bytes.data() + n, &v, sizeof(T));
    return *this;
  }
};

}  // namespace larql::testing
