// A weight source that carries knowledge edits: a base source with whole tensors (role, layer)
// replaced by owned bytes of the same type and shape. Everything else is the base's. A model
// loaded from it (Model::load(source)) runs the edits in its plain forward pass; extract and the
// exporter read it like any other source. docs/lql.md ("Knowledge edits").
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/weight_source.h"

namespace larql {

/// What one FFN-feature edit changed in the stored blocks.
struct FeatureEditReport {
  /// Down-matrix columns (features) of the layer whose stored values changed: the edited one and
  /// any neighbour in a re-quantised block (none for Q6_K, whose scales are kept); as feature
  /// numbers (model/ffn_features.h).
  std::set<int64_t> changed_columns;
  /// Rows of the down column whose wanted value was outside what the block can hold (clamped).
  int64_t clamped = 0;
};

/// widen_ffn appends features in blocks of this many (a K-quant block: every block type's width
/// divides it).
constexpr int64_t kFfnAppendBlock = 256;
/// Whether `feature` is a range column of the appended features (widen_ffn): the first two of
/// every 16 past `base_ffn`, the base model's width. They hold no feature; an edit must not take
/// them.
inline bool ffn_append_range_column(int64_t feature, int64_t base_ffn) {
  return feature >= base_ffn && (feature - base_ffn) % 16 < 2;
}

class OverlaySource final : public WeightSource {
 public:
  /// An overlay with no replacements yet (its tensors are the base's, its fingerprint the base's).
  /// Errors: InvalidArgument for a null base.
  explicit OverlaySource(std::shared_ptr<const WeightSource> base);

  /// Replace tensor (role, layer) by `bytes`, which must be exactly the base tensor's byte size
  /// (same type and shape). Errors: NotFound when the base has no such tensor, InvalidArgument
  /// for a size mismatch (naming the tensor, both sizes).
  void replace(TensorRole role, int64_t layer, std::vector<uint8_t> bytes);

  /// Write FFN feature `feature` of `layer` (numbered as model/ffn_features.h: in a mixture of
  /// experts, the routed experts' features then the shared expert's): gate row and up row ([ffn, hidden] matrices; hidden
  /// floats each, re-quantised in the stored type), and down column ([hidden, ffn]; hidden floats:
  /// in each row only the block holding the column is re-quantised — for Q6_K only the column's
  /// own 6-bit value, keeping every scale, so a value beyond what its sub-block's scale holds is
  /// clamped, and no other feature's value moves).
  /// A null pointer leaves that part as it is. Copy-on-write: the first edit of a tensor copies
  /// the base's bytes. Errors: InvalidArgument for a layer or feature out of range; Unsupported
  /// for a stored type quant::quantize_row cannot write.
  FeatureEditReport set_ffn_feature(int64_t layer, int64_t feature, const float* gate, const float* up,
                                    const float* down);

  /// Read FFN feature `feature` of `layer` as stored now (dequantised): gate row, up row, down
  /// column, each [hidden]. Errors: as set_ffn_feature.
  void ffn_feature(int64_t layer, int64_t feature, std::vector<float>* gate, std::vector<float>* up,
                   std::vector<float>* down) const;

  /// Append `extra` features to the FFN of every layer (a dense model's; the config's `ffn` grows
  /// by `extra`, every layer alike, as GGUF's one feed_forward_length and llama.cpp require):
  /// gate and up rows of zeros, so an appended feature's activation is exactly act(0) * 0 = 0 and
  /// it adds nothing until an edit writes it; down columns of zeros except the range columns
  /// (ffn_append_range_column: +R and -R in every row, R the layer's largest |value| in the base
  /// down matrix), which keep every group of 16 or 32 appended columns scaled to [-R, R] so that
  /// later edits write their own codes there (set_ffn_feature) and never re-quantise the block.
  /// The model's output is unchanged bit for bit: the new blocks' products are exact zeros.
  /// Errors: InvalidArgument unless `extra` is a positive multiple of kFfnAppendBlock;
  /// Unsupported for a mixture-of-experts model.
  void widen_ffn(int64_t extra);
  /// Features appended by widen_ffn (0: none).
  int64_t appended_ffn() const { return cfg_.ffn - base_->config().ffn; }

  /// The tensors replaced so far.
  std::vector<std::pair<TensorRole, int64_t>> replaced() const;
  const std::shared_ptr<const WeightSource>& base() const { return base_; }

  const std::string& path() const override { return base_->path(); }
  std::string format() const override { return base_->format() + " + edits"; }
  const ModelConfig& config() const override { return cfg_; }
  std::optional<SourceTensor> tensor(TensorRole role, int64_t layer = -1) const override;
  std::string tensor_name(TensorRole role, int64_t layer = -1) const override { return base_->tensor_name(role, layer); }
  std::vector<SourceTensor> tensors() const override;
  VocabData vocabulary() const override { return base_->vocabulary(); }
  const SpecialTokens& special_tokens() const override { return base_->special_tokens(); }
  std::vector<MetadataEntry> metadata() const override { return base_->metadata(); }
  uint64_t byte_size() const override { return base_->byte_size(); }
  /// The base's fingerprint when nothing is replaced; else "overlay-xxh3-" + XXH3-64 over the
  /// base fingerprint and each replacement's (role, layer, bytes), in (role, layer) order.
  const std::string& fingerprint() const override { return fingerprint_; }

 private:
  using Key = std::pair<int, int64_t>;
  std::vector<uint8_t>& writable(TensorRole role, int64_t layer);
  void refresh_fingerprint();
  std::shared_ptr<const WeightSource> base_;
  std::map<Key, std::shared_ptr<std::vector<uint8_t>>> repl_;
  std::map<Key, std::vector<uint64_t>> dims_;  ///< widened tensors' dims (GGUF order)
  ModelConfig cfg_;
  std::string fingerprint_;
};

}  // namespace larql
