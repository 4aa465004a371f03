// GGUF reader and writer (versions 2 and 3).
// Format spec: ggml/docs/gguf.md (header, metadata KV, tensor infos, aligned data section).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "util/dtype.h"
#include "util/mmap.h"

namespace larql {

/// Metadata value types, numbered as in the spec (gguf_metadata_value_type).
enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

struct GgufValue;

/// An array value, kept in its GGUF wire encoding and decoded on use, so a file's arrays cost no
/// memory beyond the file's own bytes. Read from a file, the array is a view into those bytes and
/// keeps the file alive; built by the factories below, it owns its encoding. Copies are cheap
/// (they share the bytes).
/// Cost: size(), elem_type() O(1); at(i) O(1) for fixed-size elements, O(i) for strings and
/// arrays (each element before i is skipped); items() and the typed decoders O(n) and allocate.
class GgufArray {
 public:
  GgufArray() = default;  ///< an empty array of UINT8
  /// Encodes `items`, which must all have type `elem`. Error{InvalidArgument} if one has
  /// another type, does not hold its declared type or does not fit it (e.g. UINT8 holding 300).
  GgufArray(GgufValueType elem, const std::vector<GgufValue>& items);

  GgufValueType elem_type() const { return elem_; }
  uint64_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  /// Element i, decoded. Error{InvalidArgument} if i >= size().
  GgufValue at(uint64_t i) const;
  /// Every element, decoded (about 48 bytes each: for small arrays, tests and tools).
  std::vector<GgufValue> items() const;
  /// Typed decoders. Error{Format} if elem_type() is not a matching type: strings() needs
  /// STRING; floats() FLOAT32 or FLOAT64 (narrowed to float); ints() any integer type (and a
  /// UINT64 element above INT64_MAX).
  std::vector<std::string> strings() const;
  std::vector<float> floats() const;
  std::vector<int64_t> ints() const;

  /// The elements' encoding: GGUF wire format without the element type and count.
  const uint8_t* data() const { return data_; }
  /// Bytes of that encoding (walks the elements for string and array elements).
  size_t encoded_size() const;

 private:
  friend class GgufFile;
  friend struct GgufValue;
  GgufArray(GgufValueType elem, uint64_t count, const uint8_t* data, size_t available,
            std::shared_ptr<const void> owner)
      : elem_(elem), count_(count), data_(data), available_(available), owner_(std::move(owner)) {}
  /// An array owning `encoding` (already valid for `count` elements of `elem`).
  static GgufArray owned(GgufValueType elem, uint64_t count, std::vector<uint8_t> encoding);

  GgufValueType elem_ = GgufValueType::UINT8;
  uint64_t count_ = 0;
  const uint8_t* data_ = nullptr;
  size_t available_ = 0;              ///< bytes readable from data_ (bounds every decode)
  std::shared_ptr<const void> owner_;  ///< keeps data_ alive: the file, or the owned encoding
};

/// One metadata value. Integers are widened into int64/uint64, floats into double;
/// `type` keeps the on-disk type so the writer round-trips it.
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> value;

  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue u64(uint64_t v);
  static GgufValue f32(float v);
  static GgufValue boolean(bool v);
  static GgufValue str(std::string v);
  /// Arrays: Error{InvalidArgument} as for GgufArray's constructor.
  static GgufValue array(GgufValueType elem, const std::vector<GgufValue>& items);
  static GgufValue string_array(const std::vector<std::string>& v);
  static GgufValue f32_array(const std::vector<float>& v);
  static GgufValue i32_array(const std::vector<int32_t>& v);
};

/// One entry of the tensor table. `dims` are GGUF order: dims[0] varies fastest
/// (a 2-D weight `[in, out]` is `out` rows of `in` elements).
struct GgufTensor {
  std::string name;
  DType type = DType::F32;
  std::vector<uint64_t> dims;
  uint64_t offset = 0;         ///< bytes, relative to the data section
  const uint8_t* data = nullptr;  ///< zero-copy view into the mapping
  size_t nbytes = 0;
  uint64_t n_elements() const;
  uint64_t n_rows() const;     ///< product of dims[1..]
  uint64_t row_length() const { return dims.empty() ? 1 : dims[0]; }
};

/// A parsed GGUF file. Every length, count and offset is validated against the file size before
/// use; any problem throws Error{Format} naming the field and byte offset (or Error{Unsupported}
/// for an unknown tensor dtype). Tensor data is a zero-copy view into the mapping.
/// Checked: magic, version (1 and big-endian files: Unsupported), counts against the bytes left
/// (before allocating), string/array lengths, value types, bool bytes 0/1, array nesting <= 8,
/// unique non-empty keys and unique tensor names, general.alignment an unsigned power of two,
/// 1..4 nonzero dims whose element and byte counts fit (checked multiplication), row length a
/// multiple of the type's block size, offsets a multiple of the alignment, and each tensor's
/// bytes inside the data section and not overlapping another tensor.
/// Memory: metadata is validated once and then decoded on use; the file keeps 16 bytes per
/// metadata entry (each takes at least 13 bytes of the file) and nothing per array element. The
/// tensor table is decoded into GgufTensor entries: about 140 bytes per tensor (each takes at
/// least 34 bytes of the file), so a hostile table costs at most ~4x its size.
class GgufFile : public std::enable_shared_from_this<GgufFile> {
 public:
  /// Map and parse a file. Errors: NotFound/Io from the OS, Format/Unsupported as above.
  static std::shared_ptr<GgufFile> open(const std::string& path);
  /// Parse a buffer (copied). Used by tests and the fuzzer. `name` appears in error messages.
  static std::shared_ptr<GgufFile> parse(const uint8_t* data, size_t size,
                                         const std::string& name = "<memory>");

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }  ///< bytes from file start to tensor data
  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }
  /// The file's bytes [file_size()] (the mapping, or the parsed copy).
  const uint8_t* bytes() const { return base_; }
  /// MappedFile::release_pages of the whole file.
  void release_pages() const { map_.release_pages(); }

  /// Metadata entries, in key order: i in [0, metadata_count()). The key views the file's
  /// bytes (valid while this file lives); the value is decoded on each call.
  size_t metadata_count() const { return entries_.size(); }
  std::string_view metadata_key(size_t i) const;
  GgufValue metadata_value(size_t i) const;
  /// The value of `key`, decoded (an array is a view that keeps this file alive); nullopt if absent.
  std::optional<GgufValue> find(std::string_view key) const;
  /// Typed getters: nullopt if absent; Error{Format} if present with an incompatible type.
  std::optional<uint64_t> get_uint(const std::string& key) const;
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  /// Array getters, decoded straight from the file's bytes; Error{Format} if the value is not
  /// an array of that element type (see GgufArray's typed decoders).
  std::optional<std::vector<std::string>> get_string_array(const std::string& key) const;
  std::optional<std::vector<float>> get_f32_array(const std::string& key) const;
  std::optional<std::vector<int64_t>> get_int_array(const std::string& key) const;
  /// Element count of an array value without decoding it; nullopt if absent, Error{Format} if
  /// the value is not an array.
  std::optional<uint64_t> get_array_size(const std::string& key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(const std::string& name) const;  ///< nullptr if absent

 private:
  /// One metadata entry: the key's bytes at key_at (after its length), its value type, and the
  /// value right after the 4-byte type tag.
  struct Entry {
    uint64_t key_at;
    uint32_t key_len;
    GgufValueType type;
    std::string_view key(const uint8_t* base) const {
      return {reinterpret_cast<const char*>(base + key_at), key_len};
    }
    size_t value_at() const { return static_cast<size_t>(key_at) + key_len + 4; }
  };
  static_assert(sizeof(Entry) == 16);

  GgufFile() = default;
  void parse_all(const std::string& name);
  const Entry* find_entry(std::string_view key) const;
  GgufValue decode(const Entry& e) const;
  GgufArray array_of(const std::string& key, const GgufValue& v, const char* wanted) const;

  MappedFile map_;
  std::vector<uint8_t> owned_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<Entry> entries_;  ///< sorted by key
  std::vector<GgufTensor> tensors_;
  std::vector<size_t> tensor_index_;    ///< tensor indices sorted by name
  std::vector<size_t> tensor_name_at_;  ///< while parsing: where each name starts (for errors)
};

/// Builds a GGUF v3 file in memory. Tensors are laid out in insertion order at `alignment`.
/// Metadata is written in insertion order. When `alignment` is not the default 32 and no
/// `general.alignment` key was set, one (UINT32) is written first; a `general.alignment` set
/// explicitly is written verbatim (tests use that to build invalid files).
/// serialize() raises Error{InvalidArgument} for an alignment that is not a power of two or a
/// scalar value whose variant does not match its `type` or does not fit it (e.g. UINT8 holding
/// 300); arrays are checked when they are built (GgufArray).
class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}
  /// Adds or replaces (keeping its position) a metadata entry. Error{InvalidArgument}: empty key.
  void set(const std::string& key, GgufValue value);
  /// `data` must hold exactly row_bytes(type, dims[0]) * rows bytes.
  /// Errors: InvalidArgument on a size mismatch or duplicate name.
  void add_tensor(const std::string& name, DType type, std::vector<uint64_t> dims,
                  const void* data, size_t nbytes);
  /// As add_tensor, without copying: `data` is read by serialize() / write() and must stay
  /// valid until then (a weight source's mapping). Errors: as add_tensor.
  void add_tensor_view(const std::string& name, DType type, std::vector<uint64_t> dims,
                       const void* data, size_t nbytes);
  std::vector<uint8_t> serialize() const;
  size_t metadata_count() const { return kv_.size(); }
  size_t tensor_count() const { return tensors_.size(); }
  /// Bytes of the file serialize() / write() produce.
  uint64_t file_size() const;
  /// Streams the file to `path` atomically (util/atomic_file.h: temporary sibling, fsync,
  /// rename), so a failure or a kill leaves any previous file whole and never a partial file at
  /// `path`. Memory: the header plus the writer's 1 MiB buffer; tensor bytes are written from
  /// where they live. `progress` (may be empty) is called with bytes written and file_size()
  /// after the header and after each tensor. Errors: those of AtomicWriter (Io with the OS
  /// reason, InvalidArgument for a directory or a file this process reads as input).
  void write(const std::string& path, const std::function<void(uint64_t done, uint64_t total)>& progress = {}) const;

 private:
  struct Pending {
    std::string name;
    DType type;
    std::vector<uint64_t> dims;
    std::vector<uint8_t> owned;     ///< the bytes, when copied (add_tensor)
    const uint8_t* view = nullptr;  ///< the caller's bytes (add_tensor_view)
    size_t nbytes = 0;
    const uint8_t* data() const { return view != nullptr ? view : owned.data(); }
  };
  void check_tensor(const std::string& name, DType type, const std::vector<uint64_t>& dims,
                    const void* data, size_t nbytes) const;
  /// Header, metadata, tensor infos and the padding up to the data section.
  std::vector<uint8_t> header() const;
  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Pending> tensors_;
};

}  // namespace larql
