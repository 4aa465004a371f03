// libFuzzer target for the vindex metadata readers: the input is split at its first NUL byte;
// the part before is parsed as index.json (and, if accepted, serialised and parsed again, which
// must succeed and give the same layers), the part after as down_meta.bin (every entry of every
// feature is read). The only acceptable failure is a larql::Error. Run via scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "util/error.h"
#include "vindex/down_meta_file.h"
#include "vindex/index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t json_len = nul ? static_cast<size_t>(nul - data) : size;
  try {
    const auto x = larql::vindex::parse_index(std::string(reinterpret_cast<const char*>(data), json_len));
    try {
      const auto y = larql::vindex::parse_index(larql::vindex::serialize_index(x));
      if (y.layers.size() != x.layers.size() || y.checksums != x.checksums) __builtin_trap();
    } catch (const larql::Error&) {
      __builtin_trap();
    }
  } catch (const larql::Error&) {
  }
  if (nul) {
    try {
      const auto f = larql::vindex::DownMetaFile::parse(nul + 1, size - json_len - 1, "fuzz");
      volatile uint64_t sink = 0;
      for (uint32_t l = 0; l < f.num_layers(); ++l)
        for (uint32_t ft = 0; ft < f.num_features(l); ++ft)
          for (uint32_t i = 0; i < f.top_k(); ++i) sink = sink + f.entry(l, ft, i).token;
      (void)sink;
    } catch (const larql::Error&) {
    }
  }
  return 0;
}
