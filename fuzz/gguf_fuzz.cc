// libFuzzer target for the GGUF reader: parse arbitrary bytes, then touch every metadata value
// (arrays are decoded on use: every element, and the last one by index) and every tensor byte
// the reader hands out, so ASan/UBSan catch any view that escapes the buffer; re-encode the
// metadata with GgufWriter and parse it again. The only acceptable failure is a larql::Error.
// Run via scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "formats/gguf.h"
#include "util/error.h"

namespace {

uint64_t touch(const larql::GgufValue& v) {
  uint64_t h = static_cast<uint64_t>(v.type);
  if (auto* s = std::get_if<std::string>(&v.value)) {
    for (char c : *s) h = h * 31 + static_cast<unsigned char>(c);
  } else if (auto* a = std::get_if<larql::GgufArray>(&v.value)) {
    h += a->size() + a->encoded_size();
    for (const auto& item : a->items()) h += touch(item);
    if (!a->empty()) h += touch(a->at(a->size() - 1));
  } else if (auto* u = std::get_if<uint64_t>(&v.value)) {
    h ^= *u;
  }
  return h;
}

template <typename F>
void try_getter(F&& f) {
  try {
    f();
  } catch (const larql::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = larql::GgufFile::parse(data, size, "fuzz");
    volatile uint64_t sink = f->version() + f->alignment() + f->data_offset();
    for (size_t i = 0; i < f->metadata_count(); ++i) {
      const std::string key(f->metadata_key(i));
      sink = sink + touch(f->metadata_value(i)) + key.size();
      if (!f->find(key)) __builtin_trap();
      try_getter([&] { (void)f->get_uint(key); });
      try_getter([&] { (void)f->get_int(key); });
      try_getter([&] { (void)f->get_float(key); });
      try_getter([&] { (void)f->get_bool(key); });
      try_getter([&] { (void)f->get_string(key); });
      try_getter([&] { (void)f->get_string_array(key); });
      try_getter([&] { (void)f->get_f32_array(key); });
      try_getter([&] { (void)f->get_int_array(key); });
      try_getter([&] { (void)f->get_array_size(key); });
    }
    // Metadata decoded on use re-encodes to a file that parses to the same entries; any error
    // on this valid input is a bug.
    try {
      larql::GgufWriter w;
      for (size_t i = 0; i < f->metadata_count(); ++i)
        w.set(std::string(f->metadata_key(i)), f->metadata_value(i));
      const std::vector<uint8_t> again = w.serialize();
      auto g = larql::GgufFile::parse(again.data(), again.size(), "fuzz-again");
      if (g->metadata_count() != f->metadata_count()) __builtin_trap();
      for (size_t i = 0; i < g->metadata_count(); ++i)
        if (g->metadata_key(i) != f->metadata_key(i)) __builtin_trap();
    } catch (const larql::Error&) {
      __builtin_trap();
    }
    for (const auto& t : f->tensors()) {
      if (f->find_tensor(t.name) != &t) __builtin_trap();
      if (t.n_elements() == 0 || t.row_length() * t.n_rows() != t.n_elements()) __builtin_trap();
      uint64_t h = 0;
      for (size_t i = 0; i < t.nbytes; ++i) h += t.data[i];
      sink = sink + h;
    }
    (void)sink;
  } catch (const larql::Error&) {
    // rejected input: fine
  }
  return 0;
}
