// down_meta.bin: per FFN feature, the top-K tokens its down-projection column writes
// (lm_head · W_down[:, f]: the output matrix, which is the raw embedding when the model ties them),
// the "value label" of the feature.
// Layout (docs/vindex-format.md "down_meta.bin"; all little-endian):
//   header, 16 bytes:  u32 magic 0x444D4554 (bytes "TEMD"), u32 version = 1, u32 num_layers, u32 top_k
//   per layer:         u32 num_features (0: the layer has no records), then num_features records of
//                      8 + 8·top_k bytes: u32 top_token_id, f32 c_score (the top-1 logit), then top_k
//                      × (u32 token_id, f32 logit), best first, zero-padded when fewer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/atomic_file.h"
#include "util/mmap.h"

namespace larql::vindex {

/// One token of a feature's label and its logit (nats-free: a raw dot product).
struct TokenScore {
  uint32_t token = 0;
  float logit = 0.0f;
};

inline constexpr uint32_t kDownMetaMagic = 0x444D4554u;
inline constexpr uint32_t kDownMetaVersion = 1;

/// Writes down_meta.bin layer by layer through an AtomicWriter (nothing is visible until
/// commit()). Errors: Error{InvalidArgument} for top_k < 1, a layer added out of order or beyond
/// num_layers, a wrong number of entries, or commit() before every layer was added; the
/// AtomicWriter's errors for the file.
class DownMetaWriter {
 public:
  DownMetaWriter(const std::string& path, uint32_t num_layers, uint32_t top_k);
  /// Layer `layer` (the next one in order): entries [num_features * top_k], feature-major, best
  /// first; a feature whose first entry is {0, 0} has no metadata.
  void add_layer(uint32_t layer, uint32_t num_features, const std::vector<TokenScore>& entries);
  void commit();

 private:
  AtomicWriter out_;
  uint32_t num_layers_, top_k_, next_ = 0;
};

/// A memory-mapped down_meta.bin, validated at open: magic, version, counts against the bytes
/// that remain, and the file ending exactly after the last layer. Errors: NotFound/Io (the
/// file), Format naming the field and byte offset.
class DownMetaFile {
 public:
  static DownMetaFile open(const std::string& path);
  /// The same over bytes that outlive the result (tests, fuzzing); `name` appears in errors.
  static DownMetaFile parse(const uint8_t* data, size_t size, const std::string& name);

  uint32_t num_layers() const { return num_layers_; }
  uint32_t top_k() const { return top_k_; }
  /// Features recorded for `layer` (0 when absent). Errors: InvalidArgument for a bad layer.
  uint32_t num_features(uint32_t layer) const;
  /// Entry i (< top_k) of a feature, best first; {0, 0} for padding. Errors: InvalidArgument
  /// for a layer, feature or i out of range.
  TokenScore entry(uint32_t layer, uint32_t feature, uint32_t i) const;

 private:
  const uint8_t* record(uint32_t layer, uint32_t feature) const;
  MappedFile map_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  uint32_t num_layers_ = 0, top_k_ = 0;
  std::vector<size_t> layer_offset_;  ///< byte offset of each layer's first record
  std::vector<uint32_t> layer_count_;
};

}  // namespace larql::vindex
