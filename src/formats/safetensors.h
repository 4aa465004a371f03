// Safetensors reader (Hugging Face), single files and sharded checkpoints.
// Format spec: huggingface/safetensors README, "Format": an 8-byte little-endian unsigned header
// size N; N bytes of UTF-8 JSON, an object mapping each tensor name to
//   {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
// plus an optional "__metadata__" object of string -> string (the header may end in 0x20
// padding); then the byte buffer. Offsets are relative to the buffer's start; tensors are
// row-major, little-endian. Like the reference reader, this one requires the buffer to be
// indexed entirely: tensors laid end to end from offset 0 without holes or overlaps, the last
// ending at the end of the file. Sharded checkpoints: `model.safetensors.index.json`
// ({"metadata": {...}, "weight_map": {tensor name: shard file name}}) beside the shards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/mmap.h"

namespace larql {

/// Element types of the spec. Sizes in bytes: BOOL/U8/I8/F8_* 1, I16/U16/F16/BF16 2,
/// I32/U32/F32 4, I64/U64/F64 8.
enum class StDType { BOOL, U8, I8, F8_E4M3, F8_E5M2, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64 };

/// "F32" ...; the spec's spelling.
const char* st_dtype_name(StDType t);
/// Bytes per element.
size_t st_dtype_size(StDType t);
/// nullopt for a name the spec does not define (or one of its sub-byte types, which larql
/// does not read: F4, F6_*, E8M0).
std::optional<StDType> st_dtype_from_name(std::string_view name);

/// One tensor: a view into the file's buffer. `data` is not necessarily aligned for its type
/// (the spec does not require it): read through memcpy or to_f32().
struct SafetensorsTensor {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;  ///< outermost first; empty for a scalar
  const uint8_t* data = nullptr;
  size_t nbytes = 0;           ///< product(shape) * st_dtype_size(dtype)
  size_t offset = 0;           ///< byte offset of data in the file (8 + N + begin)

  int64_t n_elements() const;
};

/// A parsed safetensors file. Tensors are listed in file order (ascending offset).
class SafetensorsFile {
 public:
  /// Map and parse a file. Errors: NotFound/Io (the file), Format (anything malformed — named
  /// with the file, the tensor and the field), Unsupported (a dtype the spec defines that larql
  /// does not read).
  static std::shared_ptr<const SafetensorsFile> open(const std::string& path);
  /// Parse bytes that outlive the result (tests, fuzzing). `name` appears in errors.
  static std::shared_ptr<const SafetensorsFile> parse(const uint8_t* data, size_t size, const std::string& name);

  const std::string& name() const { return name_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  /// nullptr if absent.
  const SafetensorsTensor* find(std::string_view tensor) const;
  /// The "__metadata__" entries (empty if none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t file_size() const { return size_; }

 private:
  void parse_header();

  std::string name_;
  MappedFile map_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  ///< name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

/// A checkpoint directory: one `model.safetensors`, or shards named by
/// `model.safetensors.index.json`. Every tensor name resolves to one shard.
class SafetensorsCheckpoint {
 public:
  /// Open `dir`. Errors: NotFound (no model.safetensors and no index), Format (a malformed
  /// index; a shard name that is not a plain file name in `dir`, e.g. "../x"; a tensor the
  /// index names that its shard lacks; a tensor in two shards), plus SafetensorsFile::open's.
  static SafetensorsCheckpoint open(const std::string& dir);

  /// nullptr if absent.
  const SafetensorsTensor* find(std::string_view tensor) const;
  /// Every tensor of every shard, shard by shard in file order.
  std::vector<const SafetensorsTensor*> tensors() const;
  const std::vector<std::shared_ptr<const SafetensorsFile>>& shards() const { return shards_; }

 private:
  std::vector<std::shared_ptr<const SafetensorsFile>> shards_;
  std::map<std::string, const SafetensorsTensor*, std::less<>> by_name_;
};

/// Converts a F32, F16 or BF16 tensor to f32: out [n_elements()]. Error{Unsupported} for other
/// dtypes (named).
void to_f32(const SafetensorsTensor& t, float* out);

}  // namespace larql
