// larql_dequant_dump MODEL.gguf [NAME...]
// Dequantises every tensor of a GGUF file (or only the named ones) with larql::quant and streams
// them to stdout for tests/python/test_dequant.py to compare with the `gguf` Python package.
// Stream format, per tensor:  "<name>\t<dtype>\t<n_elements>\n" followed by n_elements
// little-endian float32 values; the stream ends with "END\n". Rows are dequantised one at a time,
// so memory stays at one row (plus the mapped file). Errors go to stderr with exit status 1.
#include <cstdio>
#include <exception>
#include <set>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "quant/quant.h"
#include "util/error.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [TENSOR_NAME...]\n", argv[0]);
    return 2;
  }
  try {
    const auto file = larql::GgufFile::open(argv[1]);
    const std::set<std::string> only(argv + 2, argv + argc);
    std::vector<float> row;
    for (const auto& t : file->tensors()) {
      if (!only.empty() && !only.count(t.name)) continue;
      const uint64_t len = t.row_length(), rows = t.n_rows();
      const auto rb = larql::row_bytes(t.type, len);
      if (!rb || *rb * rows != t.nbytes)
        throw larql::Error(larql::ErrorKind::Format,
                           "tensor " + t.name + ": row length " + std::to_string(len) +
                               " does not fit its " + larql::dtype_name(t.type) + " data");
      std::fprintf(stdout, "%s\t%s\t%llu\n", t.name.c_str(), larql::dtype_name(t.type),
                   static_cast<unsigned long long>(len * rows));
      row.resize(len);
      for (uint64_t r = 0; r < rows; ++r) {
        larql::quant::dequantize_row(t.type, t.data + r * *rb, row.data(), static_cast<int64_t>(len));
        if (std::fwrite(row.data(), sizeof(float), len, stdout) != len)
          throw larql::Error(larql::ErrorKind::Io, "write to stdout failed");
      }
    }
    std::fputs("END\n", stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "larql_dequant_dump: %s\n", e.what());
    return 1;
  }
}
