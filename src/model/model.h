// A loaded model: config, weight views into the mapped file, and the tokenizer's source file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compute/tensor.h"
#include "model/config.h"

namespace larql {

class GgufFile;

/// One transformer block's weights. Matrices are [out rows, in cols]; norm weights are owned
/// f32 vectors holding the full multiplier (GGUF already stores Gemma's 1 + w).
struct LayerWeights {
  std::vector<float> attn_norm;        ///< [hidden]
  TensorView wq;                       ///< [q_dim, hidden]
  TensorView wk;                       ///< [kv_dim, hidden]
  TensorView wv;                       ///< [kv_dim, hidden]
  std::vector<float> q_norm;           ///< [head_dim] (empty if !qk_norm)
  std::vector<float> k_norm;           ///< [head_dim]
  TensorView wo;                       ///< [hidden, q_dim]
  std::vector<float> post_attn_norm;   ///< [hidden] (empty if !post_norms)
  std::vector<float> ffn_norm;         ///< [hidden]
  TensorView w_gate;                   ///< [ffn, hidden]
  TensorView w_up;                     ///< [ffn, hidden]
  TensorView w_down;                   ///< [hidden, ffn]
  std::vector<float> post_ffn_norm;    ///< [hidden]
};

struct ModelWeights {
  TensorView token_embd;               ///< [vocab, hidden]
  TensorView lm_head;                  ///< [vocab, hidden] (== token_embd when tied)
  std::vector<float> output_norm;      ///< [hidden]
  std::vector<LayerWeights> layers;
};

/// A model opened from a GGUF file. Weights are zero-copy views into the file mapping, which
/// the model keeps alive.
class Model {
 public:
  /// Open and validate. Errors: NotFound/Io (file), Format (bad GGUF, missing tensor, wrong
  /// shape — naming the tensor and the expected shape), Unsupported (architecture or dtype).
  static std::shared_ptr<Model> load(const std::string& path);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const GgufFile& file() const { return *file_; }
  std::shared_ptr<const GgufFile> file_ptr() const { return file_; }
  const std::string& path() const { return path_; }
  /// A short fingerprint of the file (size + hash of the header and first bytes), used to
  /// refuse state files from another model.
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  std::string path_;
  std::string fingerprint_;
  std::shared_ptr<const GgufFile> file_;
  ModelConfig config_;
  ModelWeights weights_;
};

/// Build a TensorView for a GGUF tensor with the expected [rows, cols], or throw
/// Error{Format}/Error{Unsupported} naming the tensor.
TensorView tensor_view(const GgufFile& file, const std::string& name, int64_t rows, int64_t cols);

}  // namespace larql
