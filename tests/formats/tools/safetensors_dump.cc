// larql_safetensors_dump PATH
// Opens PATH with larql's safetensors reader — a .safetensors file, or a checkpoint directory
// (model.safetensors or model.safetensors.index.json) — and prints one line per tensor:
//   "<name>\t<dtype>\t<dim,dim,...>\t<file offset>\t<nbytes>\t<xxh-free checksum>\n"
// where the checksum is the sum of the tensor's bytes (mod 2^64), and for F32/F16/BF16 tensors a
// further column with the f32 values' sum in double ("%.9g"). Metadata lines follow as
// "META\t<key>\t<value>". For tests/python/test_safetensors.py, which writes files with the
// `safetensors` package and compares. Errors: the message on stderr, exit status 1.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "util/error.h"

namespace {

void print(const larql::SafetensorsTensor& t) {
  std::string dims;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i > 0) dims += ',';
    dims += std::to_string(t.shape[i]);
  }
  uint64_t sum = 0;
  for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
  std::printf("%s\t%s\t%s\t%zu\t%zu\t%llu", t.name.c_str(), larql::st_dtype_name(t.dtype), dims.c_str(), t.offset,
              t.nbytes, static_cast<unsigned long long>(sum));
  if (t.dtype == larql::StDType::F32 || t.dtype == larql::StDType::F16 || t.dtype == larql::StDType::BF16) {
    std::vector<float> v(static_cast<size_t>(t.n_elements()));
    larql::to_f32(t, v.data());
    double s = 0;
    for (float x : v) s += x;
    std::printf("\t%.9g", s);
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FILE.safetensors|CHECKPOINT_DIR\n", argv[0]);
    return 2;
  }
  try {
    if (std::filesystem::is_directory(argv[1])) {
      const auto c = larql::SafetensorsCheckpoint::open(argv[1]);
      for (const auto* t : c.tensors()) print(*t);
    } else {
      const auto f = larql::SafetensorsFile::open(argv[1]);
      for (const auto& t : f->tensors()) print(t);
      for (const auto& [k, v] : f->metadata()) std::printf("META\t%s\t%s\n", k.c_str(), v.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
