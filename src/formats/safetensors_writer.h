// Safetensors writer (Hugging Face): the inverse of formats/safetensors.h's reader. Layout
// (huggingface/safetensors README, "Format"): an 8-byte little-endian header size N, N bytes of
// JSON — each tensor's {"dtype", "shape", "data_offsets": [begin, end]} and a "__metadata__"
// object of strings — padded with spaces so the byte buffer starts on an 8-byte boundary (as the
// reference writer pads), then the tensors end to end, in the order they were added.
// The bytes are streamed: each tensor is produced by a callback when its turn comes, so memory
// is one producer's working set, never the file.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "formats/safetensors.h"

namespace larql {

class SafetensorsWriter {
 public:
  /// Writes a tensor's bytes through `sink`, in any number of pieces; the pieces must add up to
  /// exactly the tensor's byte size (product(shape) x element size), row-major, little-endian.
  using Sink = std::function<void(const void* data, size_t n)>;
  using Producer = std::function<void(const Sink& sink)>;

  /// Adds a tensor (written in the order added). Errors: InvalidArgument for an empty or
  /// duplicate name, "__metadata__", a negative dimension, or a dtype other than F32, F16, BF16.
  void add(const std::string& name, StDType dtype, std::vector<int64_t> shape, Producer produce);
  /// Adds a "__metadata__" entry (e.g. {"format": "pt"}, as transformers writes).
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  size_t tensor_count() const { return tensors_.size(); }
  /// Bytes of the tensor data (the buffer after the header).
  uint64_t data_bytes() const { return data_bytes_; }
  /// The header JSON, padded (without the 8-byte size).
  std::string header() const;
  /// Bytes of the whole file.
  uint64_t file_size() const { return 8 + header().size() + data_bytes_; }

  /// Streams the file to `path` through an AtomicWriter (util/atomic_file.h: a temporary sibling,
  /// fsynced and renamed; a kill leaves no partial file at `path`). `progress` (may be empty) is
  /// called with the bytes written so far and file_size() after the header and each tensor.
  /// Errors: InvalidArgument when a producer writes more or fewer bytes than its tensor holds
  /// (naming it; nothing is committed); AtomicWriter's (Io with the OS reason).
  void write(const std::string& path, const std::function<void(uint64_t done, uint64_t total)>& progress = {}) const;

 private:
  struct Entry {
    std::string name;
    StDType dtype;
    std::vector<int64_t> shape;
    uint64_t nbytes = 0, offset = 0;
    Producer produce;
  };
  std::vector<Entry> tensors_;
  std::map<std::string, std::string> metadata_;
  uint64_t data_bytes_ = 0;
};

}  // namespace larql
