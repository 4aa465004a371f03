// GGUF v3 writer (little-endian). Layout as in gguf.cc / ggml/docs/gguf.md: header, metadata KVs
// in insertion order, tensor infos, zero padding to the alignment, then each tensor's data at the
// next multiple of the alignment (offsets relative to the data section).
#include <algorithm>
#include <cstring>
#include <limits>

#include "formats/gguf.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace larql {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF"

[[noreturn]] void bad(const std::string& what) { throw Error(ErrorKind::InvalidArgument, what); }

class Bytes {
 public:
  template <typename T>
  void put(T v) {
    const size_t n = out.size();
    out.resize(n + sizeof(T));
    std::memcpy(out.data() + n, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (out.size() % alignment != 0) out.push_back(0);
  }
  std::vector<uint8_t> out;
};

template <typename T, typename V>
T narrow(const V& v, const std::string& key) {
  if (v < static_cast<V>(std::numeric_limits<T>::lowest()) ||
      v > static_cast<V>(std::numeric_limits<T>::max()))
    bad("GgufWriter: value of key '" + key + "' does not fit its declared type");
  return static_cast<T>(v);
}

// Writes the payload of `v` (without its type tag), checking that the stored alternative
// matches the declared type. Errors: InvalidArgument naming the key.
void put_value(Bytes& b, const GgufValue& v, const std::string& key) {
  auto want = [&](auto* p) {
    if (!p) bad("GgufWriter: value of key '" + key + "' does not hold its declared type");
    return *p;
  };
  switch (v.type) {
    case GgufValueType::UINT8: b.put(narrow<uint8_t>(want(std::get_if<uint64_t>(&v.value)), key)); break;
    case GgufValueType::INT8: b.put(narrow<int8_t>(want(std::get_if<int64_t>(&v.value)), key)); break;
    case GgufValueType::UINT16: b.put(narrow<uint16_t>(want(std::get_if<uint64_t>(&v.value)), key)); break;
    case GgufValueType::INT16: b.put(narrow<int16_t>(want(std::get_if<int64_t>(&v.value)), key)); break;
    case GgufValueType::UINT32: b.put(narrow<uint32_t>(want(std::get_if<uint64_t>(&v.value)), key)); break;
    case GgufValueType::INT32: b.put(narrow<int32_t>(want(std::get_if<int64_t>(&v.value)), key)); break;
    case GgufValueType::UINT64: b.put(want(std::get_if<uint64_t>(&v.value))); break;
    case GgufValueType::INT64: b.put(want(std::get_if<int64_t>(&v.value))); break;
    case GgufValueType::FLOAT32: b.put(static_cast<float>(want(std::get_if<double>(&v.value)))); break;
    case GgufValueType::FLOAT64: b.put(want(std::get_if<double>(&v.value))); break;
    case GgufValueType::BOOL: b.put<uint8_t>(want(std::get_if<bool>(&v.value)) ? 1 : 0); break;
    case GgufValueType::STRING: b.put_string(want(std::get_if<std::string>(&v.value))); break;
    case GgufValueType::ARRAY: {
      // Arrays are checked when built (GgufArray's constructor) or were validated when read.
      const GgufArray* a = std::get_if<GgufArray>(&v.value);
      if (!a) bad("GgufWriter: value of key '" + key + "' does not hold an array");
      b.put(static_cast<uint32_t>(a->elem_type()));
      b.put<uint64_t>(a->size());
      b.out.insert(b.out.end(), a->data(), a->data() + a->encoded_size());
      break;
    }
    default: bad("GgufWriter: key '" + key + "' has an unknown value type");
  }
}

}  // namespace

// ---- arrays: encoded when built --------------------------------------------------------------

GgufArray GgufArray::owned(GgufValueType elem, uint64_t count, std::vector<uint8_t> encoding) {
  auto bytes = std::make_shared<const std::vector<uint8_t>>(std::move(encoding));
  const uint8_t* data = bytes->data();
  const size_t n = bytes->size();
  return GgufArray(elem, count, data, n, std::move(bytes));
}

GgufArray::GgufArray(GgufValueType elem, const std::vector<GgufValue>& items) {
  if (static_cast<uint32_t>(elem) > static_cast<uint32_t>(GgufValueType::FLOAT64))
    bad("GgufArray: unknown element type " + std::to_string(static_cast<uint32_t>(elem)));
  Bytes b;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].type != elem)
      bad("GgufArray: element " + std::to_string(i) + " has type " +
          std::to_string(static_cast<uint32_t>(items[i].type)) + ", not the array's element type " +
          std::to_string(static_cast<uint32_t>(elem)));
    put_value(b, items[i], "array element " + std::to_string(i));
  }
  *this = owned(elem, items.size(), std::move(b.out));
}

GgufValue GgufValue::array(GgufValueType elem, const std::vector<GgufValue>& items) {
  return {GgufValueType::ARRAY, GgufArray(elem, items)};
}

GgufValue GgufValue::string_array(const std::vector<std::string>& v) {
  Bytes b;
  for (const auto& s : v) b.put_string(s);
  return {GgufValueType::ARRAY, GgufArray::owned(GgufValueType::STRING, v.size(), std::move(b.out))};
}

GgufValue GgufValue::f32_array(const std::vector<float>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  return {GgufValueType::ARRAY,
          GgufArray::owned(GgufValueType::FLOAT32, v.size(), std::vector<uint8_t>(p, p + v.size() * sizeof(float)))};
}

GgufValue GgufValue::i32_array(const std::vector<int32_t>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  return {GgufValueType::ARRAY,
          GgufArray::owned(GgufValueType::INT32, v.size(), std::vector<uint8_t>(p, p + v.size() * sizeof(int32_t)))};
}

void GgufWriter::set(const std::string& key, GgufValue value) {
  if (key.empty()) bad("GgufWriter: empty metadata key");
  for (auto& kv : kv_)
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::check_tensor(const std::string& name, DType type, const std::vector<uint64_t>& dims,
                              const void* data, size_t nbytes) const {
  for (const auto& t : tensors_)
    if (t.name == name) bad("GgufWriter: duplicate tensor name '" + name + "'");
  if (dims.empty() || dims.size() > 4)
    bad("GgufWriter: tensor '" + name + "' needs 1..4 dims, got " + std::to_string(dims.size()));
  uint64_t rows = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0) bad("GgufWriter: tensor '" + name + "' has a zero dimension");
    if (i > 0 && __builtin_mul_overflow(rows, dims[i], &rows))
      bad("GgufWriter: tensor '" + name + "' is too large");
  }
  auto rb = row_bytes(type, dims[0]);
  if (!rb)
    bad("GgufWriter: tensor '" + name + "' row length " + std::to_string(dims[0]) +
        " is not a multiple of the " + dtype_name(type) + " block size");
  uint64_t expected = 0;
  if (__builtin_mul_overflow(uint64_t{*rb}, rows, &expected) || expected != nbytes)
    bad("GgufWriter: tensor '" + name + "' needs " + std::to_string(expected) + " bytes, got " +
        std::to_string(nbytes));
  if (nbytes > 0 && data == nullptr) bad("GgufWriter: tensor '" + name + "' has no data");
}

void GgufWriter::add_tensor(const std::string& name, DType type, std::vector<uint64_t> dims,
                            const void* data, size_t nbytes) {
  check_tensor(name, type, dims, data, nbytes);
  const auto* p = static_cast<const uint8_t*>(data);
  tensors_.push_back({name, type, std::move(dims), std::vector<uint8_t>(p, p + nbytes), nullptr, nbytes});
}

void GgufWriter::add_tensor_view(const std::string& name, DType type, std::vector<uint64_t> dims,
                                 const void* data, size_t nbytes) {
  check_tensor(name, type, dims, data, nbytes);
  tensors_.push_back({name, type, std::move(dims), {}, static_cast<const uint8_t*>(data), nbytes});
}

std::vector<uint8_t> GgufWriter::header() const {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0)
    bad("GgufWriter: alignment " + std::to_string(alignment_) + " is not a power of two");
  bool has_alignment_key = false;
  for (const auto& kv : kv_) has_alignment_key |= kv.first == "general.alignment";
  const bool auto_alignment = !has_alignment_key && alignment_ != 32;

  Bytes b;
  b.put(kMagic);
  b.put<uint32_t>(3);
  b.put<uint64_t>(tensors_.size());
  b.put<uint64_t>(kv_.size() + (auto_alignment ? 1 : 0));
  if (auto_alignment) {
    b.put_string("general.alignment");
    b.put(static_cast<uint32_t>(GgufValueType::UINT32));
    b.put(narrow<uint32_t>(alignment_, "general.alignment"));
  }
  for (const auto& [key, value] : kv_) {
    b.put_string(key);
    b.put(static_cast<uint32_t>(value.type));
    put_value(b, value, key);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    b.put_string(t.name);
    b.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) b.put(d);
    b.put(static_cast<uint32_t>(t.type));
    b.put(offset);
    offset += t.nbytes;
    offset = (offset + alignment_ - 1) / alignment_ * alignment_;
  }
  b.pad_to(alignment_);
  return std::move(b.out);
}

uint64_t GgufWriter::file_size() const {
  uint64_t n = header().size();
  for (const auto& t : tensors_) n = (n + alignment_ - 1) / alignment_ * alignment_ + t.nbytes;
  return n;
}

std::vector<uint8_t> GgufWriter::serialize() const {
  std::vector<uint8_t> out = header();
  const size_t data_start = out.size();
  for (const auto& t : tensors_) {
    out.resize(data_start + (out.size() - data_start + alignment_ - 1) / alignment_ * alignment_, 0);
    out.insert(out.end(), t.data(), t.data() + t.nbytes);
  }
  return out;
}

void GgufWriter::write(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress) const {
  const std::vector<uint8_t> head = header();
  uint64_t total = head.size();
  for (const auto& t : tensors_) total = (total + alignment_ - 1) / alignment_ * alignment_ + t.nbytes;
  AtomicWriter w(path, "GGUF output");
  w.write(head.data(), head.size());
  if (progress) progress(w.size(), total);
  // The data section starts aligned (header() pads), so file offsets and data offsets agree
  // modulo the alignment.
  static const std::vector<char> kZeros(4096, 0);
  for (const auto& t : tensors_) {
    uint64_t pad = (alignment_ - w.size() % alignment_) % alignment_;
    while (pad > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, kZeros.size()));
      w.write(kZeros.data(), n);
      pad -= n;
    }
    w.write(t.data(), t.nbytes);
    if (progress) progress(w.size(), total);
  }
  w.commit();
}

}  // namespace larql
