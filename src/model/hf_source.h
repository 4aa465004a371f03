// A weight source reading a Hugging Face model directory: `config.json`, the weights in one
// `model.safetensors` or in shards named by `model.safetensors.index.json` (formats/safetensors.h),
// and the tokenizer in `tokenizer.json` + `tokenizer_config.json` (tokenizer/hf_json.h).
// Families: every architecture record's (model/arch.h: hf_architectures / hf_model_types).
// docs/architecture.md ("Weight sources"), docs/gemma3.md (the family defaults).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/safetensors.h"
#include "model/weight_source.h"

namespace larql {

struct ArchRecord;

/// True when `dir` looks like a Hugging Face model directory rather than a vindex: no
/// index.json, and a config.json, model.safetensors or model.safetensors.index.json.
bool is_hf_model_dir(const std::string& dir);

/// The config of a Hugging Face `config.json`, validated: the family from `architectures[0]` or
/// `model_type` (model/arch.h find_arch_for_hf), then the generic reader (model/hf_config.cc)
/// with the record's defaults where the file is silent, then the record's hook. Keys (as the
/// transformers configuration classes name them): hidden_size, intermediate_size,
/// num_hidden_layers, num_attention_heads (required); num_key_value_heads (= heads), head_dim
/// (the record's default, else hidden / heads), rms_norm_eps, max_position_embeddings,
/// vocab_size, tie_word_embeddings, hidden_act / hidden_activation (silu, gelu_pytorch_tanh),
/// rope_theta, rope_local_base_freq (sliding layers), rope_scaling {rope_type/type: default,
/// linear, llama3}, sliding_window with layer_types or the record's pattern
/// (sliding_window_pattern overrides it), query_pre_attn_scalar (Gemma), final/attn logit
/// softcapping. Every family reads RoPE in NeoX pairing (transformers' rotate_half).
/// `where` (the file) prefixes every message. Errors: Format naming the key and its value (not
/// JSON, a missing or mistyped key, a count outside [1, 2^31), heads not a multiple of the KV
/// heads, an odd head_dim or one above kMaxHeadDim, an epsilon outside (0, 1), a RoPE base <= 1,
/// a window < 1, layer_types not one per layer); Unsupported for another architecture or model
/// type (naming it), an activation other than SiLU / tanh-GELU, RoPE scaling other than linear
/// or llama3, partial rotary, attention_bias / mlp_bias on a family without them, experts.
ModelConfig config_from_hf_json(std::string_view config_json, const std::string& where);

class HfSource final : public WeightSource {
 public:
  /// Open `dir`. Reads config.json (config_from_hf_json), maps the safetensors, parses the
  /// tokenizer files and fingerprints every byte. Errors: NotFound (no config.json, no
  /// safetensors, no tokenizer.json), Format (from the readers; a tensor of a layer at or beyond
  /// num_hidden_layers; a weight whose dtype is not F32, F16 or BF16 — Unsupported), each
  /// naming the file and the tensor. Shapes are checked by Model::load by name.
  static std::shared_ptr<HfSource> open(const std::string& dir);

  const std::string& path() const override { return dir_; }
  std::string format() const override;
  const ModelConfig& config() const override { return config_; }
  /// A zero-copy view of the safetensors bytes for matrices (a fused matrix's rows for a split
  /// role, ArchRecord::hf_fused_*), except experts: their tensors stacked into one
  /// [cols, rows, n_experts] copy at open (named with '*' for the expert index). Gemma's norm weights are returned as f32 holding the
  /// multiplier 1 + w (Hugging Face stores w; the GGUF and larql's forward use 1 + w), computed
  /// once at open in f32.
  std::optional<SourceTensor> tensor(TensorRole role, int64_t layer = -1) const override;
  /// The Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight".
  std::string tensor_name(TensorRole role, int64_t layer = -1) const override;
  std::vector<SourceTensor> tensors() const override;
  /// A copy of the vocabulary read at open.
  VocabData vocabulary() const override { return vocab_; }
  const SpecialTokens& special_tokens() const override { return specials_; }
  /// config.json's top-level entries, rendered as text.
  std::vector<MetadataEntry> metadata() const override;
  uint64_t byte_size() const override { return bytes_; }
  /// "hf-xxh3-" + 16 hex digits of XXH3-64 over config.json, the tokenizer files and every
  /// tensor (name, dtype, shape and bytes, in name order).
  const std::string& fingerprint() const override { return fingerprint_; }

 private:
  std::string dir_;
  std::string config_text_;
  ModelConfig config_;
  const ArchRecord* arch_ = nullptr;
  SafetensorsCheckpoint ckpt_;
  std::map<std::string, std::vector<float>, std::less<>> norms_;  ///< HF name -> 1 + w (f32)
  struct Stacked {
    DType type = DType::F32;
    std::vector<uint64_t> dims;  ///< [cols, rows, n_experts]
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, Stacked, std::less<>> stacked_;  ///< "…experts.*.w1.weight" -> the experts stacked
  VocabData vocab_;
  SpecialTokens specials_;
  std::string fingerprint_;
  uint64_t bytes_ = 0;
};

}  // namespace larql
