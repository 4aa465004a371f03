// GGUF reader (versions 2 and 3) and the GgufValue helpers.
// Layout: ggml/docs/gguf.md — little-endian throughout:
//   u32 magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count × { gguf_string key | u32 value_type | value }
//   tensor_count × { gguf_string name | u32 n_dims | u64 dims[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32) | tensor data (offsets relative to its start)
// where gguf_string = { u64 len | len bytes, no terminator } and an array value is
// { u32 elem_type | u64 count | count × value-without-type }.
// Version 1 used u32 for the counts and lengths; versions 2 and 3 are identical on the wire
// except that v3 allows big-endian files, which we reject (their version field reads byte-swapped).
#include "formats/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "util/error.h"

namespace larql {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxArrayDepth = 8;        // nesting limit for arrays of arrays
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr uint64_t kMaxKeyLength = 65535;  // spec: keys are at most 2^16-1 bytes

// Smallest encodings, used to bound counts by the bytes left before allocating anything.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, a 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim, type, offset

bool is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

const char* value_type_name(uint32_t t) {
  static const char* kNames[] = {"uint8",   "int8",  "uint16", "int16", "uint32",
                                 "int32",   "float32", "bool", "string", "array",
                                 "uint64",  "int64", "float64"};
  return t < 13 ? kNames[t] : "unknown";
}

// Encoded size of a fixed-size scalar type; 0 for string/array (variable) or unknown.
uint64_t scalar_size(uint32_t t) {
  switch (static_cast<GgufValueType>(t)) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16: case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64: case GgufValueType::INT64: case GgufValueType::FLOAT64: return 8;
    default: return 0;
  }
}

bool is_valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::FLOAT64); }

// Bounds-checked little-endian cursor over the file. Every read names its field so an
// error says what was being read and where; the message is built only on failure (`part` is
// appended to `field`), so walking a large array allocates nothing.
class Cursor {
 public:
  Cursor(const uint8_t* base, size_t size, const std::string& file)
      : base_(base), size_(size), file_(file) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return base_ + pos_; }

  [[noreturn]] void fail(const std::string& field, size_t at, const std::string& what) const {
    throw Error(ErrorKind::Format,
                file_ + ": " + field + " at byte " + std::to_string(at) + ": " + what);
  }

  void need(uint64_t n, const std::string& field, const char* part = "") const {
    if (n > remaining())
      fail(field + part, pos_, "needs " + std::to_string(n) + " bytes but only " +
                                   std::to_string(remaining()) + " remain (truncated file)");
  }

  void skip(uint64_t n, const std::string& field, const char* part = "") {
    need(n, field, part);
    pos_ += static_cast<size_t>(n);
  }

  void seek(size_t pos) { pos_ = pos; }  // callers pass a position already validated

  template <typename T>
  T read(const std::string& field, const char* part = "") {
    need(sizeof(T), field, part);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));  // host is little-endian (x86-64/aarch64)
    pos_ += sizeof(T);
    return v;
  }

  /// A gguf_string: u64 length, then that many bytes (returned as a view of them).
  std::string_view read_string(const std::string& field, const char* part = "") {
    const size_t at = pos_;
    const uint64_t len = read<uint64_t>(field, part[0] ? part : " length");
    if (len > remaining())
      fail(field + part, at, "string length " + std::to_string(len) + " exceeds the " +
                                 std::to_string(remaining()) + " bytes left in the file");
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& file_;
};

// Name used in errors from decoding an array already validated (or built by us): a failure
// there means a bug, but the cursor still refuses to read out of bounds.
const std::string kArrayName = "<gguf array>";

struct ArrayHeader {
  uint32_t elem;
  uint64_t count;
};

// Reads an array's element type and count (cursor at the array value), checking the nesting
// depth, the type, and that `count` elements can fit in the bytes left: each takes at least its
// scalar size, 8 bytes (string length) or 12 bytes (array type + count).
ArrayHeader read_array_header(Cursor& c, int depth, const std::string& field) {
  const size_t at = c.pos();
  if (depth >= kMaxArrayDepth)
    c.fail(field, at, "arrays nested deeper than " + std::to_string(kMaxArrayDepth));
  const uint32_t et = c.read<uint32_t>(field, " element type");
  if (!is_valid_type(et)) c.fail(field + " element type", at, "unknown value type " + std::to_string(et));
  const uint64_t count = c.read<uint64_t>(field, " count");
  uint64_t min_elem = scalar_size(et);
  if (et == static_cast<uint32_t>(GgufValueType::STRING)) min_elem = 8;
  if (et == static_cast<uint32_t>(GgufValueType::ARRAY)) min_elem = 12;
  if (count > c.remaining() / min_elem)
    c.fail(field + " count", at + 4,
           "array of " + std::to_string(count) + " " + value_type_name(et) +
               " elements cannot fit in the " + std::to_string(c.remaining()) + " bytes left in the file");
  return {et, count};
}

void skip_value(Cursor& c, uint32_t t, int depth, const std::string& field);

// Skips `count` elements of type `et`, validating each (bool bytes, string lengths, nested
// arrays). Fixed-size elements other than bool are skipped in one step.
void skip_elements(Cursor& c, uint32_t et, uint64_t count, int depth, const std::string& field) {
  const uint64_t size = scalar_size(et);
  if (size != 0 && et != static_cast<uint32_t>(GgufValueType::BOOL)) {
    c.skip(size * count, field);  // count <= remaining / size: no overflow
    return;
  }
  for (uint64_t i = 0; i < count; ++i) skip_value(c, et, depth, field);
}

// Skips one value of on-disk type `t` (the type tag already consumed), validating it.
void skip_value(Cursor& c, uint32_t t, int depth, const std::string& field) {
  switch (static_cast<GgufValueType>(t)) {
    case GgufValueType::BOOL: {
      const size_t at = c.pos();
      const uint8_t b = c.read<uint8_t>(field);
      if (b > 1) c.fail(field, at, "bool value " + std::to_string(b) + " is not 0 or 1");
      break;
    }
    case GgufValueType::STRING: c.read_string(field); break;
    case GgufValueType::ARRAY: {
      const ArrayHeader h = read_array_header(c, depth, field);
      skip_elements(c, h.elem, h.count, depth + 1, field);
      break;
    }
    default:
      if (!is_valid_type(t)) c.fail(field, c.pos(), "unknown value type " + std::to_string(t));
      c.skip(scalar_size(t), field);
  }
}

// Decodes one value of type `t` other than ARRAY, advancing past it.
GgufValue decode_scalar(Cursor& c, uint32_t t, const std::string& field) {
  GgufValue v;
  v.type = static_cast<GgufValueType>(t);
  switch (v.type) {
    case GgufValueType::UINT8: v.value = uint64_t{c.read<uint8_t>(field)}; break;
    case GgufValueType::INT8: v.value = int64_t{c.read<int8_t>(field)}; break;
    case GgufValueType::UINT16: v.value = uint64_t{c.read<uint16_t>(field)}; break;
    case GgufValueType::INT16: v.value = int64_t{c.read<int16_t>(field)}; break;
    case GgufValueType::UINT32: v.value = uint64_t{c.read<uint32_t>(field)}; break;
    case GgufValueType::INT32: v.value = int64_t{c.read<int32_t>(field)}; break;
    case GgufValueType::UINT64: v.value = c.read<uint64_t>(field); break;
    case GgufValueType::INT64: v.value = c.read<int64_t>(field); break;
    case GgufValueType::FLOAT32: v.value = double{c.read<float>(field)}; break;
    case GgufValueType::FLOAT64: v.value = c.read<double>(field); break;
    case GgufValueType::BOOL: {
      const size_t at = c.pos();
      const uint8_t b = c.read<uint8_t>(field);
      if (b > 1) c.fail(field, at, "bool value " + std::to_string(b) + " is not 0 or 1");
      v.value = b != 0;
      break;
    }
    case GgufValueType::STRING: v.value = std::string(c.read_string(field)); break;
    default: c.fail(field, c.pos(), "cannot decode value type " + std::to_string(t) + " as a scalar");
  }
  return v;
}

std::string type_mismatch(const std::string& key, const GgufValue& v, const char* wanted) {
  return "metadata key '" + key + "' has type " + value_type_name(static_cast<uint32_t>(v.type)) +
         ", expected " + wanted;
}

bool is_integer_type(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::UINT16:
    case GgufValueType::INT16: case GgufValueType::UINT32: case GgufValueType::INT32:
    case GgufValueType::UINT64: case GgufValueType::INT64: return true;
    default: return false;
  }
}

// Reads one integer element of type `t` widened to int64; UINT64 above INT64_MAX is an error.
int64_t read_int_element(Cursor& c, GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: return c.read<uint8_t>(kArrayName);
    case GgufValueType::INT8: return c.read<int8_t>(kArrayName);
    case GgufValueType::UINT16: return c.read<uint16_t>(kArrayName);
    case GgufValueType::INT16: return c.read<int16_t>(kArrayName);
    case GgufValueType::UINT32: return c.read<uint32_t>(kArrayName);
    case GgufValueType::INT32: return c.read<int32_t>(kArrayName);
    case GgufValueType::INT64: return c.read<int64_t>(kArrayName);
    case GgufValueType::UINT64: {
      const uint64_t u = c.read<uint64_t>(kArrayName);
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw Error(ErrorKind::Format, "array element " + std::to_string(u) + " does not fit int64");
      return static_cast<int64_t>(u);
    }
    default: throw Error(ErrorKind::Format, "array elements are not integers");
  }
}

}  // namespace

// ---- GgufValue factories (arrays: gguf_writer.cc, which owns the encoding) -------------------

GgufValue GgufValue::u32(uint32_t v) { return {GgufValueType::UINT32, uint64_t{v}}; }
GgufValue GgufValue::i32(int32_t v) { return {GgufValueType::INT32, int64_t{v}}; }
GgufValue GgufValue::u64(uint64_t v) { return {GgufValueType::UINT64, v}; }
GgufValue GgufValue::f32(float v) { return {GgufValueType::FLOAT32, double{v}}; }
GgufValue GgufValue::boolean(bool v) { return {GgufValueType::BOOL, v}; }
GgufValue GgufValue::str(std::string v) { return {GgufValueType::STRING, std::move(v)}; }

// ---- GgufArray: decoding on use --------------------------------------------------------------

GgufValue GgufArray::at(uint64_t i) const {
  if (i >= count_)
    throw Error(ErrorKind::InvalidArgument,
                "GgufArray::at: index " + std::to_string(i) + " out of range [0, " + std::to_string(count_) + ")");
  Cursor c(data_, available_, kArrayName);
  const uint32_t et = static_cast<uint32_t>(elem_);
  const uint64_t size = scalar_size(et);
  if (size != 0) {
    c.skip(size * i, kArrayName);
  } else {
    for (uint64_t k = 0; k < i; ++k) skip_value(c, et, 1, kArrayName);
  }
  if (elem_ != GgufValueType::ARRAY) return decode_scalar(c, et, kArrayName);
  const ArrayHeader h = read_array_header(c, 1, kArrayName);
  return {GgufValueType::ARRAY, GgufArray(static_cast<GgufValueType>(h.elem), h.count, c.here(), c.remaining(), owner_)};
}

std::vector<GgufValue> GgufArray::items() const {
  std::vector<GgufValue> out;
  out.reserve(static_cast<size_t>(count_));
  Cursor c(data_, available_, kArrayName);
  const uint32_t et = static_cast<uint32_t>(elem_);
  for (uint64_t i = 0; i < count_; ++i) {
    if (elem_ != GgufValueType::ARRAY) {
      out.push_back(decode_scalar(c, et, kArrayName));
      continue;
    }
    const ArrayHeader h = read_array_header(c, 1, kArrayName);
    out.push_back({GgufValueType::ARRAY,
                   GgufArray(static_cast<GgufValueType>(h.elem), h.count, c.here(), c.remaining(), owner_)});
    skip_elements(c, h.elem, h.count, 2, kArrayName);
  }
  return out;
}

size_t GgufArray::encoded_size() const {
  Cursor c(data_, available_, kArrayName);
  skip_elements(c, static_cast<uint32_t>(elem_), count_, 1, kArrayName);
  return c.pos();
}

std::vector<std::string> GgufArray::strings() const {
  if (elem_ != GgufValueType::STRING)
    throw Error(ErrorKind::Format, std::string("array of ") + value_type_name(static_cast<uint32_t>(elem_)) +
                                       " is not an array of strings");
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(count_));
  Cursor c(data_, available_, kArrayName);
  for (uint64_t i = 0; i < count_; ++i) out.emplace_back(c.read_string(kArrayName));
  return out;
}

std::vector<float> GgufArray::floats() const {
  if (elem_ != GgufValueType::FLOAT32 && elem_ != GgufValueType::FLOAT64)
    throw Error(ErrorKind::Format, std::string("array of ") + value_type_name(static_cast<uint32_t>(elem_)) +
                                       " is not an array of floats");
  Cursor c(data_, available_, kArrayName);
  std::vector<float> out(static_cast<size_t>(count_));
  if (elem_ == GgufValueType::FLOAT32) {
    c.need(count_ * sizeof(float), kArrayName);
    if (count_ > 0) std::memcpy(out.data(), c.here(), count_ * sizeof(float));
  } else {
    for (auto& f : out) f = static_cast<float>(c.read<double>(kArrayName));
  }
  return out;
}

std::vector<int64_t> GgufArray::ints() const {
  if (!is_integer_type(elem_))
    throw Error(ErrorKind::Format, std::string("array of ") + value_type_name(static_cast<uint32_t>(elem_)) +
                                       " is not an array of integers");
  Cursor c(data_, available_, kArrayName);
  std::vector<int64_t> out(static_cast<size_t>(count_));
  for (auto& x : out) x = read_int_element(c, elem_);
  return out;
}

// ---- GgufTensor ------------------------------------------------------------------------------

uint64_t GgufTensor::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;  // overflow excluded by the parser's checked product
  return n;
}

uint64_t GgufTensor::n_rows() const {
  uint64_t n = 1;
  for (size_t i = 1; i < dims.size(); ++i) n *= dims[i];
  return n;
}

// ---- GgufFile --------------------------------------------------------------------------------

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->map_ = MappedFile::open(path);
  f->base_ = f->map_.data();
  f->size_ = f->map_.size();
  f->path_ = path;
  f->parse_all(path);
  return f;
}

std::shared_ptr<GgufFile> GgufFile::parse(const uint8_t* data, size_t size,
                                          const std::string& name) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->owned_.assign(data, data + size);
  f->base_ = f->owned_.data();
  f->size_ = size;
  f->path_ = name;
  f->parse_all(name);
  return f;
}

void GgufFile::parse_all(const std::string& name) {
  static const uint8_t kEmpty[1] = {0};
  Cursor c(base_ ? base_ : kEmpty, size_, name);

  // Header.
  uint32_t magic = c.read<uint32_t>("header magic");
  if (magic != kMagic) {
    char shown[5] = {0};
    std::memcpy(shown, &magic, 4);
    for (int i = 0; i < 4; ++i)
      if (shown[i] < 0x20 || shown[i] > 0x7e) shown[i] = '?';
    c.fail("header magic", 0, std::string("expected \"GGUF\", found \"") + shown + "\"");
  }
  version_ = c.read<uint32_t>("header version");
  if (version_ != 2 && version_ != 3) {
    std::string why = "GGUF version " + std::to_string(version_) + " is not supported (only 2 and 3)";
    if (__builtin_bswap32(version_) == 2 || __builtin_bswap32(version_) == 3)
      why = "big-endian GGUF files are not supported";
    throw Error(ErrorKind::Unsupported, name + ": header version at byte 4: " + why);
  }
  const size_t tc_at = c.pos();
  uint64_t tensor_count = c.read<uint64_t>("header tensor_count");
  const size_t kc_at = c.pos();
  uint64_t kv_count = c.read<uint64_t>("header kv_count");
  if (kv_count > c.remaining() / kMinKvBytes)
    c.fail("header kv_count", kc_at, std::to_string(kv_count) + " metadata entries cannot fit in the " +
                                         std::to_string(c.remaining()) + " bytes left");
  if (tensor_count > c.remaining() / kMinTensorInfoBytes)
    c.fail("header tensor_count", tc_at,
           std::to_string(tensor_count) + " tensor infos cannot fit in the " +
               std::to_string(c.remaining()) + " bytes left");

  // Metadata: validated here, decoded on use. Each entry keeps only where its key is and its type.
  entries_.reserve(static_cast<size_t>(kv_count));
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string where = "metadata[" + std::to_string(i) + "]";
    const size_t key_at = c.pos();
    const std::string_view key = c.read_string(where + " key");
    if (key.empty()) c.fail(where + " key", key_at, "empty key");
    if (key.size() > kMaxKeyLength)
      c.fail(where + " key", key_at, "key longer than " + std::to_string(kMaxKeyLength) + " bytes");
    const std::string field = where + " '" + std::string(key) + "'";
    const size_t type_at = c.pos();
    const uint32_t t = c.read<uint32_t>(field, " type");
    if (!is_valid_type(t)) c.fail(field + " type", type_at, "unknown value type " + std::to_string(t));
    const size_t value_at = c.pos();
    if (key == "general.alignment") {
      const GgufValue v = t == static_cast<uint32_t>(GgufValueType::ARRAY) ? GgufValue{} : decode_scalar(c, t, field);
      const uint64_t* a = std::get_if<uint64_t>(&v.value);
      if (t == static_cast<uint32_t>(GgufValueType::ARRAY) || a == nullptr || v.type == GgufValueType::BOOL)
        c.fail("general.alignment", value_at,
               std::string("must be an unsigned integer, found ") + value_type_name(t));
      if (!is_pow2(*a))
        c.fail("general.alignment", value_at,
               "alignment " + std::to_string(*a) + " is not a nonzero power of two");
      alignment_ = *a;
    } else {
      skip_value(c, t, 0, field);
    }
    entries_.push_back({key_at + 8, static_cast<uint32_t>(key.size()), static_cast<GgufValueType>(t)});
  }
  // In place (no buffer): by key, then file position, so of two equal keys the later comes second.
  std::sort(entries_.begin(), entries_.end(), [&](const Entry& a, const Entry& b) {
    const int d = a.key(base_).compare(b.key(base_));
    return d != 0 ? d < 0 : a.key_at < b.key_at;
  });
  for (size_t k = 1; k < entries_.size(); ++k) {
    if (entries_[k - 1].key(base_) != entries_[k].key(base_)) continue;
    // entries_[k] is the later one in the file; its index there is how many entries start before it.
    const uint64_t at = entries_[k].key_at;
    const size_t index = static_cast<size_t>(std::count_if(
        entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key_at < at; }));
    c.fail("metadata[" + std::to_string(index) + "] key", static_cast<size_t>(at - 8),
           "duplicate metadata key '" + std::string(entries_[k].key(base_)) + "'");
  }

  // Tensor infos.
  tensors_.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    const std::string where = "tensor[" + std::to_string(i) + "]";
    const size_t name_at = c.pos();
    GgufTensor t;
    t.name = std::string(c.read_string(where + " name"));
    const std::string field = where + " '" + t.name + "'";
    const size_t nd_at = c.pos();
    uint32_t n_dims = c.read<uint32_t>(field, " n_dims");
    if (n_dims == 0 || n_dims > kMaxDims)
      c.fail(field + " n_dims", nd_at,
             std::to_string(n_dims) + " dimensions (must be 1.." + std::to_string(kMaxDims) + ")");
    t.dims.resize(n_dims);
    uint64_t n_elem = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const size_t dim_at = c.pos();
      const std::string df = field + " dims[" + std::to_string(d) + "]";
      t.dims[d] = c.read<uint64_t>(df);
      if (t.dims[d] == 0) c.fail(df, dim_at, "zero-sized dimension");
      if (t.dims[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          mul_overflows(n_elem, t.dims[d], &n_elem) ||
          n_elem > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        c.fail(df, dim_at, "element count overflows 63 bits");
    }
    const size_t type_at = c.pos();
    uint32_t type_id = c.read<uint32_t>(field, " type");
    auto info = dtype_info(type_id);
    if (!info)
      throw Error(ErrorKind::Unsupported, name + ": " + field + " type at byte " +
                                              std::to_string(type_at) + ": unknown ggml type id " +
                                              std::to_string(type_id));
    t.type = info->type;
    if (t.dims[0] % info->block_size != 0)
      c.fail(field + " dims[0]", nd_at + 4,
             "row length " + std::to_string(t.dims[0]) + " is not a multiple of the " +
                 info->name + " block size " + std::to_string(info->block_size));
    uint64_t nbytes = 0;
    if (mul_overflows(t.dims[0] / info->block_size, info->type_size, &nbytes) ||
        mul_overflows(nbytes, t.n_rows(), &nbytes))
      c.fail(field + " dims", nd_at, "byte size overflows 64 bits");
    const size_t off_at = c.pos();
    t.offset = c.read<uint64_t>(field, " offset");
    if (t.offset % alignment_ != 0)
      c.fail(field + " offset", off_at,
             "data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                 std::to_string(alignment_));
    t.nbytes = static_cast<size_t>(nbytes);
    tensors_.push_back(std::move(t));
    tensor_name_at_.push_back(name_at);
  }
  // Name index, and no duplicate names (reported at the later of the two).
  tensor_index_.resize(tensors_.size());
  for (size_t i = 0; i < tensor_index_.size(); ++i) tensor_index_[i] = i;
  std::sort(tensor_index_.begin(), tensor_index_.end(), [&](size_t a, size_t b) {
    const int d = tensors_[a].name.compare(tensors_[b].name);
    return d != 0 ? d < 0 : a < b;
  });
  for (size_t k = 1; k < tensor_index_.size(); ++k) {
    const size_t i = tensor_index_[k];
    if (tensors_[tensor_index_[k - 1]].name == tensors_[i].name)
      c.fail("tensor[" + std::to_string(i) + "] name", tensor_name_at_[i],
             "duplicate tensor name '" + tensors_[i].name + "'");
  }
  tensor_name_at_ = {};

  // Data section: starts at the first multiple of the alignment after the tensor infos.
  const size_t header_end = c.pos();
  uint64_t aligned = 0;
  if (__builtin_add_overflow(uint64_t{header_end}, alignment_ - 1, &aligned))
    c.fail("data section", header_end, "aligned offset overflows");
  aligned &= ~(alignment_ - 1);
  if (aligned > size_) {
    if (!tensors_.empty())
      c.fail("data section", header_end,
             "padding to alignment " + std::to_string(alignment_) + " runs past the end of the " +
                 std::to_string(size_) + "-byte file");
    aligned = size_;  // no tensors: a file may end right after its metadata
  }
  data_offset_ = static_cast<size_t>(aligned);
  const uint64_t data_size = size_ - data_offset_;

  // Tensor extents: inside the file and not overlapping one another.
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (auto& t : tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      throw Error(ErrorKind::Format,
                  name + ": tensor '" + t.name + "' data at byte " +
                      std::to_string(data_offset_) + "+" + std::to_string(t.offset) + ": " +
                      std::to_string(t.nbytes) + " bytes run past the end of the " +
                      std::to_string(size_) + "-byte file");
    t.data = base_ + data_offset_ + t.offset;
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const auto& prev = tensors_[order[k - 1]];
    const auto& cur = tensors_[order[k]];
    if (prev.offset + prev.nbytes > cur.offset)
      throw Error(ErrorKind::Format,
                  name + ": tensor '" + cur.name + "' data at byte " +
                      std::to_string(data_offset_) + "+" + std::to_string(cur.offset) +
                      ": overlaps tensor '" + prev.name + "'");
  }
}

std::string_view GgufFile::metadata_key(size_t i) const {
  if (i >= entries_.size())
    throw Error(ErrorKind::InvalidArgument, "metadata index " + std::to_string(i) + " out of range");
  return entries_[i].key(base_);
}

GgufValue GgufFile::metadata_value(size_t i) const {
  if (i >= entries_.size())
    throw Error(ErrorKind::InvalidArgument, "metadata index " + std::to_string(i) + " out of range");
  return decode(entries_[i]);
}

const GgufFile::Entry* GgufFile::find_entry(std::string_view key) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [&](const Entry& e, std::string_view k) { return e.key(base_) < k; });
  return it != entries_.end() && it->key(base_) == key ? &*it : nullptr;
}

GgufValue GgufFile::decode(const Entry& e) const {
  Cursor c(base_, size_, path_);
  c.seek(e.value_at());
  const std::string field = "metadata '" + std::string(e.key(base_)) + "'";
  if (e.type != GgufValueType::ARRAY) return decode_scalar(c, static_cast<uint32_t>(e.type), field);
  const ArrayHeader h = read_array_header(c, 0, field);
  return {GgufValueType::ARRAY, GgufArray(static_cast<GgufValueType>(h.elem), h.count, c.here(),
                                          c.remaining(), shared_from_this())};
}

std::optional<GgufValue> GgufFile::find(std::string_view key) const {
  const Entry* e = find_entry(key);
  if (e == nullptr) return std::nullopt;
  return decode(*e);
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = std::lower_bound(tensor_index_.begin(), tensor_index_.end(), name,
                             [&](size_t i, const std::string& n) { return tensors_[i].name < n; });
  return it != tensor_index_.end() && tensors_[*it].name == name ? &tensors_[*it] : nullptr;
}

std::optional<uint64_t> GgufFile::get_uint(const std::string& key) const {
  const auto v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::BOOL) {
    if (auto* u = std::get_if<uint64_t>(&v->value)) return *u;
    if (auto* i = std::get_if<int64_t>(&v->value); i && *i >= 0) return static_cast<uint64_t>(*i);
  }
  throw Error(ErrorKind::Format, path_ + ": " + type_mismatch(key, *v, "a non-negative integer"));
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const auto v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::BOOL) {
    if (auto* i = std::get_if<int64_t>(&v->value)) return *i;
    if (auto* u = std::get_if<uint64_t>(&v->value);
        u && *u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return static_cast<int64_t>(*u);
  }
  throw Error(ErrorKind::Format, path_ + ": " + type_mismatch(key, *v, "an integer fitting int64"));
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const auto v = find(key);
  if (!v) return std::nullopt;
  if (auto* d = std::get_if<double>(&v->value)) return *d;
  if (v->type != GgufValueType::BOOL) {
    if (auto* u = std::get_if<uint64_t>(&v->value)) return static_cast<double>(*u);
    if (auto* i = std::get_if<int64_t>(&v->value)) return static_cast<double>(*i);
  }
  throw Error(ErrorKind::Format, path_ + ": " + type_mismatch(key, *v, "a number"));
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const auto v = find(key);
  if (!v) return std::nullopt;
  if (auto* b = std::get_if<bool>(&v->value)) return *b;
  throw Error(ErrorKind::Format, path_ + ": " + type_mismatch(key, *v, "bool"));
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  auto v = find(key);
  if (!v) return std::nullopt;
  if (auto* s = std::get_if<std::string>(&v->value)) return std::move(*s);
  throw Error(ErrorKind::Format, path_ + ": " + type_mismatch(key, *v, "string"));
}

GgufArray GgufFile::array_of(const std::string& key, const GgufValue& v, const char* wanted) const {
  const auto* a = std::get_if<GgufArray>(&v.value);
  if (a == nullptr) throw Error(ErrorKind::Format, path_ + ": metadata key '" + key + "' is not " + wanted);
  return *a;
}

std::optional<uint64_t> GgufFile::get_array_size(const std::string& key) const {
  const auto v = find(key);
  if (!v) return std::nullopt;
  return array_of(key, *v, "an array").size();
}

std::optional<std::vector<std::string>> GgufFile::get_string_array(const std::string& key) const {
  const auto v = find(key);
  if (!v) return std::nullopt;
  const GgufArray a = array_of(key, *v, "an array of strings");
  if (a.elem_type() != GgufValueType::STRING)
    throw Error(ErrorKind::Format, path_ + ": metadata key '" + key + "' is not an array of strings");
  return a.strings();
}

std::optional<std::vector<float>> GgufFile::get_f32_array(const std::string& key) const {
  const auto v = find(key);
  if (!v) return std::nullopt;
  const GgufArray a = array_of(key, *v, "an array of floats");
  if (a.elem_type() != GgufValueType::FLOAT32 && a.elem_type() != GgufValueType::FLOAT64)
    throw Error(ErrorKind::Format, path_ + ": metadata key '" + key + "' is not an array of floats");
  return a.floats();
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(const std::string& key) const {
  const auto v = find(key);
  if (!v) return std::nullopt;
  const GgufArray a = array_of(key, *v, "an array of integers");
  if (!is_integer_type(a.elem_type()))
    throw Error(ErrorKind::Format, path_ + ": metadata key '" + key + "' is not an array of integers");
  try {
    return a.ints();
  } catch (const Error& e) {
    throw Error(ErrorKind::Format, path_ + ": metadata key '" + key + "': " + e.what());
  }
}

}  // namespace larql
