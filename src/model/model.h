// A loaded model: config and weight views into a weight source (model/weight_source.h), which
// the model keeps alive.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compute/tensor.h"
#include "model/config.h"
#include "model/weight_source.h"

namespace larql {

/// One transformer block's weights. Matrices are [out rows, in cols]; norm weights are owned
/// f32 vectors holding the full multiplier (GGUF already stores Gemma's 1 + w).
struct LayerWeights {
  std::vector<float> attn_norm;        ///< [hidden]
  TensorView wq;                       ///< [q_dim, hidden]
  TensorView wk;                       ///< [kv_dim, hidden]
  TensorView wv;                       ///< [kv_dim, hidden]
  std::vector<float> bq;               ///< [q_dim] added after the Q projection (empty if !qkv_bias)
  std::vector<float> bk;               ///< [kv_dim] (empty if !qkv_bias)
  std::vector<float> bv;               ///< [kv_dim] (empty if !qkv_bias)
  std::vector<float> q_norm;           ///< [head_dim] (empty if !qk_norm)
  std::vector<float> k_norm;           ///< [head_dim]
  TensorView wo;                       ///< [hidden, q_dim]
  std::vector<float> post_attn_norm;   ///< [hidden] (empty if !post_norms)
  std::vector<float> ffn_norm;         ///< [hidden]
  TensorView w_gate;                   ///< [ffn, hidden]
  TensorView w_up;                     ///< [ffn, hidden]
  TensorView w_down;                   ///< [hidden, ffn]
  std::vector<float> post_ffn_norm;    ///< [hidden]
  // Mixture of experts (ModelConfig::n_experts > 0; w_gate/w_up/w_down are then empty).
  TensorView router;                   ///< [n_experts, hidden]
  std::vector<TensorView> exp_gate;    ///< per expert [expert_ffn, hidden]: views into the stacked tensor
  std::vector<TensorView> exp_up;      ///< per expert [expert_ffn, hidden]
  std::vector<TensorView> exp_down;    ///< per expert [hidden, expert_ffn]
  std::vector<float> shexp_router;     ///< [hidden] the shared expert's gate (empty: none)
  TensorView shexp_gate;               ///< [shared_expert_ffn, hidden]
  TensorView shexp_up;                 ///< [shared_expert_ffn, hidden]
  TensorView shexp_down;               ///< [hidden, shared_expert_ffn]
};

struct ModelWeights {
  TensorView token_embd;               ///< [vocab, hidden]
  TensorView lm_head;                  ///< [vocab, hidden] (== token_embd when tied)
  std::vector<float> output_norm;      ///< [hidden]
  std::vector<LayerWeights> layers;
};

/// A model directory: true for a vindex (it has index.json), false for a Hugging Face model
/// (is_hf_model_dir: config.json, model.safetensors or its index). Error{NotFound} naming the
/// directory when it is neither (an empty directory, the models/ cache itself).
bool is_vindex_model_dir(const std::string& dir);

/// The part of a model a process holds (a shard of a split model; docs/sharding.md). Ranges are
/// half-open; the command line writes them inclusive ("0-8" is layers 0..8, parse_range). The
/// default is the whole model. A role left out, or a layer or expert outside the ranges, is not
/// read from the source (with a memory-mapped source its pages are never touched) and may be
/// absent from it: its views stay empty, and the forward pass refuses to use them (Forward says
/// which part is missing).
struct ModelPart {
  int64_t layer_begin = 0;
  int64_t layer_end = -1;   ///< -1: through the last layer
  int64_t expert_begin = 0;
  int64_t expert_end = -1;  ///< -1: through the last expert (MoE only); == expert_begin: none (router and shared expert only)
  bool embedding = true;    ///< token_embd, output_norm and lm_head
  bool attention = true;    ///< the owned layers' attention tensors (Q/K/V/O, their biases and q/k norms)
  bool ffn = true;          ///< the owned layers' FFN tensors (with the router and shared expert of an MoE)
  // The owned layers' four norms are always held.

  /// Ranges resolved against a config (-1 ends replaced by the model's counts).
  /// Errors: Error{InvalidArgument} for an empty or reversed range or one past the model's
  /// layers / experts (naming the range and the model's count), or an expert range on a dense
  /// model.
  ModelPart resolved(const ModelConfig& c) const;
  /// Whether every layer, expert and role is held (after resolved()).
  bool whole(const ModelConfig& c) const;
  bool has_layer(int64_t layer) const { return layer >= layer_begin && layer < layer_end; }
  bool has_expert(int64_t expert) const { return expert >= expert_begin && expert < expert_end; }
  /// In words, inclusive ranges: "layers 0-8, experts 0-3, no embedding" ("the whole model").
  std::string describe(const ModelConfig& c) const;
  /// "A-B" (inclusive, A <= B) or "A" into [begin, end) = [A, B + 1).
  /// Errors: Error{InvalidArgument} naming `what` (e.g. "--layers") and the text.
  static std::pair<int64_t, int64_t> parse_range(const std::string& text, const std::string& what);
};

/// A model: its config and weights, zero-copy views into a weight source that the model keeps
/// alive; or a part of one (ModelPart).
class Model {
 public:
  /// Open a GGUF file (GgufSource::open), a vindex directory (VindexSource::open) or a Hugging
  /// Face directory (HfSource::open; a directory without index.json that has config.json or
  /// safetensors, is_hf_model_dir) and load() it. Errors: NotFound/Io (file), Format (bad GGUF or vindex, missing tensor, wrong shape —
  /// naming the tensor and the expected shape), Unsupported (architecture, dtype, a vindex
  /// without model weights).
  static std::shared_ptr<Model> load(const std::string& path);
  /// Build the weights from a source: every tensor the config needs, shape-checked by role.
  /// Errors: Format/Unsupported as above, naming the source's tensor.
  static std::shared_ptr<Model> load(std::shared_ptr<const WeightSource> source);
  /// A part of the model: only the part's tensors are read and checked; a vindex slice holding
  /// just them opens (VindexSource::open with partial). Errors: as load, and ModelPart::resolved's.
  static std::shared_ptr<Model> load(const std::string& path, const ModelPart& part);
  static std::shared_ptr<Model> load(std::shared_ptr<const WeightSource> source, const ModelPart& part);

  /// What this process holds (resolved: no -1 ends).
  const ModelPart& part() const { return part_; }
  /// Error{InvalidArgument} naming what `what` needs (e.g. "layer 9", "the token embedding") and what
  /// this part holds, unless the part holds it. Cheap: the forward pass calls these per stage.
  void require_layer(int64_t layer, const char* what) const;
  void require_embedding(const char* what) const;

  const ModelConfig& config() const { return source_->config(); }
  const ModelWeights& weights() const { return weights_; }
  const WeightSource& source() const { return *source_; }
  const std::string& path() const { return source_->path(); }
  /// The source's fingerprint of its whole content (WeightSource::fingerprint), used to refuse
  /// state files from another model.
  const std::string& fingerprint() const { return source_->fingerprint(); }

 private:
  std::shared_ptr<const WeightSource> source_;
  ModelWeights weights_;
  ModelPart part_;
};

}  // namespace larql
