// A weight source reading a vindex directory (docs/vindex-format.md) extracted at level
// `inference` or above: every tensor found through weight_manifest.json, in the type it names
// (quant keep: the source's own blocks, byte for byte; none: floats; q4k: re-quantised); the config from index.json's model_config; the
// vocabulary from tokenizer.gguf (or, without it, tokenizer.json + tokenizer_config.json).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/weight_source.h"
#include "util/mmap.h"
#include "vindex/index.h"

namespace larql {

/// The manifest's name of a role ("attn_q", "ffn_down", "token_embd", ...).
const char* tensor_role_name(TensorRole role);
/// nullopt for an unknown name.
std::optional<TensorRole> tensor_role_from_name(std::string_view name);
/// Every role, in declaration order.
const std::vector<TensorRole>& all_tensor_roles();

/// Why a vindex cannot run a model, or "" when it can: the message names the directory, the
/// level it was extracted at, what it holds (from the files its index lists: a slice may hold
/// any subset), and that `verb` needs level inference:
/// "NAME.vindex was extracted at level browse: it holds gate vectors, embeddings and down_meta
/// for browsing; run needs level inference — re-extract with --level inference".
std::string vindex_not_runnable_reason(const std::string& dir, const vindex::VindexIndex& index,
                                       const std::string& verb = "running a model");

class VindexSource final : public WeightSource {
 public:
  /// Open `dir`. Errors: NotFound (no index.json), Format (index.json, model_config or
  /// weight_manifest.json malformed — naming the entry: unknown role, a layer out of range, an
  /// unknown dtype, a length that does not match the shape, a file outside the directory or not
  /// checksummed, bytes past the end of a file, a role given twice), Unsupported (a vindex
  /// without model weights, e.g. browse level, or with quant other than keep, none or q4k).
  /// `partial`: a slice holding only some weights (a shard's part, ModelPart) opens whatever its
  /// level, as long as it holds some model weights; Model::load then names any tensor its part
  /// needs and the slice lacks.
  static std::shared_ptr<VindexSource> open(const std::string& dir, bool partial = false);

  const std::string& path() const override { return dir_; }
  std::string format() const override;
  const ModelConfig& config() const override { return config_; }
  std::optional<SourceTensor> tensor(TensorRole role, int64_t layer = -1) const override;
  std::string tensor_name(TensorRole role, int64_t layer = -1) const override;
  std::vector<SourceTensor> tensors() const override;
  /// A copy of the vocabulary read at open.
  VocabData vocabulary() const override { return vocab_; }
  const SpecialTokens& special_tokens() const override { return specials_; }
  std::vector<MetadataEntry> metadata() const override;
  uint64_t byte_size() const override { return bytes_; }
  /// "vindex-sha256-" + the SHA-256 of index.json's checksums (every file's digest, in name
  /// order): it changes when any file's recorded digest does. It is not recomputed from the files
  /// at open (`larql verify` does that).
  const std::string& fingerprint() const override { return fingerprint_; }

  const vindex::VindexIndex& index() const { return index_; }

 private:
  struct Entry {
    SourceTensor tensor;
    TensorRole role;
    int64_t layer;
  };
  std::string dir_;
  vindex::VindexIndex index_;
  ModelConfig config_;
  SpecialTokens specials_;
  std::string fingerprint_;
  VocabData vocab_;  ///< read once at open (vocab_from_directory)
  uint64_t bytes_ = 0;
  std::map<std::string, std::shared_ptr<MappedFile>> files_;
  std::vector<Entry> entries_;
  std::map<std::pair<int, int64_t>, size_t> by_role_;
};

}  // namespace larql
