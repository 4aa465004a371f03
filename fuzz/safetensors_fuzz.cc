// libFuzzer target for the safetensors reader: parse arbitrary bytes, then touch every byte of
// every tensor it hands out and convert the float ones, so ASan/UBSan catch any view that escapes
// the buffer. The only acceptable failure is a larql::Error. Run via scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/safetensors.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto f = larql::SafetensorsFile::parse(data, size, "fuzz");
    volatile uint64_t sink = 0;
    size_t covered = 0;
    for (const auto& t : f->tensors()) {
      if (f->find(t.name) != &t) __builtin_trap();
      if (static_cast<uint64_t>(t.n_elements()) * larql::st_dtype_size(t.dtype) != t.nbytes) __builtin_trap();
      uint64_t h = 0;
      for (size_t i = 0; i < t.nbytes; ++i) h += t.data[i];
      covered += t.nbytes;
      sink = sink + h;
      if (t.dtype == larql::StDType::F32 || t.dtype == larql::StDType::F16 || t.dtype == larql::StDType::BF16) {
        std::vector<float> v(static_cast<size_t>(t.n_elements()));
        larql::to_f32(t, v.data());
      }
    }
    // The buffer is indexed entirely: the tensors' bytes plus the header are the file.
    if (!f->tensors().empty() && covered != size - f->tensors()[0].offset) __builtin_trap();
    for (const auto& [k, v] : f->metadata()) sink = sink + k.size() + v.size();
    (void)sink;
  } catch (const larql::Error&) {
    // rejected input: fine
  }
  return 0;
}
