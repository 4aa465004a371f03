// One architecture record per model family: everything larql knows about a family in one place
// — its GGUF key prefix and defaults, its tensors' names in GGUF and in Hugging Face checkpoints,
// how it computes (RoPE form, activation, norm convention, biases, q/k norms, soft-capping,
// which layers slide), and what the rest of the program may assume of it (markov-rs, export,
// vindex layer bands). llama.cpp keeps an architecture the same way (llama-arch.cpp,
// llama-model.cpp). The generic readers (config_from_gguf, config_from_hf_json), the weight
// sources, export, extract and the engines read these records; a family is one file in
// src/model/families/ plus its tests. docs/architecture.md "Architecture records".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/weight_source.h"
#include "vindex/index.h"

namespace larql {

class GgufFile;
class HfConfigReader;

/// A vindex's layer bands for one known model size (the original LARQL's table).
struct KnownBands {
  int64_t n_layers;
  int64_t syntax_lo, syntax_hi, knowledge_lo, knowledge_hi, output_lo, output_hi;
};

/// Everything about one family. Plain data plus two optional hooks; one constant instance per
/// family (src/model/families/*.cc), listed by arch_records().
struct ArchRecord {
  /// GGUF `general.architecture`, the metadata key prefix ("llama" -> "llama.block_count") and
  /// ModelConfig::arch.
  const char* arch = "";
  /// The family in words, for messages and docs ("Llama 2 / 3 / 3.1+, Mistral").
  const char* title = "";
  /// Hugging Face config.json `architectures[0]` and `model_type` values read as this family.
  std::vector<std::string> hf_architectures;
  std::vector<std::string> hf_model_types;

  // ---- how it computes (the forward pass reads these through ModelConfig) ----
  Activation activation = Activation::Silu;
  RopeForm rope_form = RopeForm::NeoX;
  bool post_norms = false;          ///< RMSNorm after attention and after the FFN (Gemma 2/3)
  bool qk_norm = false;             ///< per-head RMSNorm on q and k (Gemma 3, Qwen3)
  /// Q/K/V biases: always present (Qwen2); otherwise optional, read from the file (Llama's
  /// attention_bias / attn_q.bias).
  bool qkv_bias_always = false;
  bool embed_scale_sqrt_hidden = false;  ///< the looked-up embedding times sqrt(hidden) (Gemma)
  /// Attention scale 1/sqrt(query_pre_attn_scalar) (Gemma; the scalar defaults to head_dim), not
  /// 1/sqrt(head_dim).
  bool attn_scale_from_query_pre_attn_scalar = false;
  /// Hugging Face stores RMSNorm weights as w, used as 1 + w (Gemma); GGUF conversions already
  /// hold 1 + w (llama.cpp convert_hf_to_gguf.py adds it), so only HfSource adds it.
  bool hf_norm_plus_one = false;

  // ---- sliding window and RoPE defaults ----
  /// Which layers slide when the model has a window: 0 none (a window in the file is refused),
  /// 1 every layer (Mistral, Phi-3), n >= 2 every layer but each n-th (layer i slides iff
  /// i % n != n - 1: Gemma 2 with 2, Gemma 3 with 6; llama.cpp set_swa_pattern(n)).
  int64_t swa_pattern = 0;
  int64_t default_window = 0;       ///< window when the family always slides and the file is silent; 0 = none
  double rope_base = 10000;         ///< theta base when the file is silent
  /// The sliding layers' own base when the file is silent (Gemma 3: 10000); 0 = the global base.
  double rope_base_swa = 0;
  /// Linear RoPE scaling applies to global layers only (Gemma 3), not to every layer.
  bool rope_scaling_global_only = false;

  // ---- defaults where a file is silent ----
  int64_t default_context = 0;      ///< context_length; 0 = required
  double default_norm_eps = 0;      ///< GGUF layer_norm_rms_epsilon; 0 = required
  double hf_default_norm_eps = 1e-6;  ///< config.json rms_norm_eps default (transformers' config class)
  bool hf_default_tied = false;     ///< config.json tie_word_embeddings default
  int64_t hf_default_head_dim = 0;  ///< config.json head_dim default; 0 = hidden / heads
  int64_t hf_default_vocab = 0;     ///< config.json vocab_size default; 0 = required

  // ---- mixture of experts ----
  bool moe = false;                 ///< the family has mixture-of-experts models (expert_count > 0)
  /// The chosen experts' probabilities renormalised to sum 1 (llama.cpp's norm_w for the family;
  /// a config.json's norm_topk_prob overrides it).
  bool moe_weights_norm = false;
  bool moe_shared_expert = false;   ///< a sigmoid-gated shared expert beside the routed ones

  // ---- tensors ----
  /// llama.cpp's suffix of a fused Q/K/V matrix (rows Q then K then V) a GGUF may store instead
  /// of attn_q/k/v — any family (llama.cpp create_tensor_qkv), Phi-3 always — and of its fused
  /// bias. The sources split them when the file has them; nullptr: never fused.
  const char* gguf_fused_qkv = "attn_qkv.weight";
  const char* gguf_fused_qkv_bias = "attn_qkv.bias";
  /// llama.cpp's suffix of a fused gate/up matrix (Phi-3 "ffn_up.weight" with 2 x ffn rows, gate
  /// first); nullptr when separate.
  const char* gguf_fused_gate_up = nullptr;
  /// The Hugging Face name of a role's tensor (nullptr: hf_llama_name, the Llama naming).
  std::string (*hf_name)(TensorRole role, int64_t layer) = nullptr;
  /// The Hugging Face per-layer suffixes of the fused tensors, as gguf_fused_*.
  const char* hf_fused_qkv = nullptr;
  const char* hf_fused_qkv_bias = nullptr;
  const char* hf_fused_gate_up = nullptr;

  // ---- what the rest of the program may assume ----
  /// The residual entering each layer (plus the position) determines that layer's K/V (the
  /// conditions of kv/markov_rs.h residual_is_sufficient), checked by the engine contract tests
  /// on a model of this family.
  bool residual_sufficient = false;
  /// export_gguf can write this family for llama.cpp (fused tensors are not re-fused yet).
  bool exportable = true;
  /// Layer bands of a vindex for the family's published sizes (else the 2/5, 4/5 split).
  std::vector<KnownBands> bands;

  // ---- hooks for what the generic readers do not know (may be null) ----
  /// After the generic GGUF reader (model/gguf_config.cc), before validation.
  void (*gguf_hook)(const GgufFile& file, ModelConfig& config) = nullptr;
  /// After the generic config.json reader (model/hf_config.cc).
  void (*hf_hook)(const HfConfigReader& json, ModelConfig& config) = nullptr;
};

/// Every family this build runs, in a fixed order (supported_architectures()).
const std::vector<const ArchRecord*>& arch_records();
/// The record of `arch` (ModelConfig::arch / general.architecture), or nullptr.
const ArchRecord* find_arch(std::string_view arch);
/// find_arch, Error{Unsupported} naming `arch`, `where` and the supported ones when absent.
const ArchRecord& require_arch(std::string_view arch, const std::string& where);
/// The record whose hf_architectures holds `architecture` or whose hf_model_types holds
/// `model_type`, or nullptr.
const ArchRecord* find_arch_for_hf(std::string_view model_type, std::string_view architecture);

/// llama.cpp's tensor name of a role, the same for every family (llama-arch.cpp
/// LLM_TENSOR_NAMES): "blk.N.attn_q.weight" for per-layer roles (layer >= 0), "token_embd.weight"
/// ... otherwise. Whether a file has it is the file's business (biases, q/k norms, post norms
/// are optional roles; a fused family stores gguf_fused_* instead of the split roles).
std::string gguf_tensor_name(TensorRole role, int64_t layer);

/// The Hugging Face name of a role in the Llama naming (transformers modeling_llama.py):
/// model.embed_tokens.weight, lm_head.weight, model.norm.weight, model.layers.N.input_layernorm
/// .weight, self_attn.{q,k,v,o}_proj.weight / .bias, self_attn.{q,k}_norm.weight,
/// post_attention_layernorm.weight (the FFN's norm), mlp.{gate,up,down}_proj.weight.
std::string hf_llama_name(TensorRole role, int64_t layer);
/// The record's Hugging Face name of a role ("" for one it never stores).
std::string hf_tensor_name(const ArchRecord& arch, TensorRole role, int64_t layer);

/// Where a role lives in one of a record's fused matrices: rows [row0, row0 + rows) of the
/// per-layer tensor `suffix`.
struct FusedRows {
  const char* suffix;
  int64_t row0, rows;
  int64_t total;  ///< rows the fused tensor must have (q_dim + 2 kv_dim, or 2 ffn)
};
/// For AttnQ/K/V (and their biases) of a family with a fused Q/K/V matrix, FfnGate/FfnUp of one
/// with a fused gate/up matrix (hf: the Hugging Face suffix, else llama.cpp's); nullopt
/// otherwise. The sources use the fused tensor only when the file has it.
std::optional<FusedRows> fused_rows(const ArchRecord& arch, const ModelConfig& config, TensorRole role, bool hf);

/// The part `p` of the fused tensor `t` (dims [cols, total rows], or [total] for a fused bias) as a
/// tensor of its own: a zero-copy view, valid for any block type (rows are stored whole). Its
/// name is the tensor's with "[rows a:b]". Errors: Format naming `where` and the tensor when its
/// rows are not p.total or its bytes are not a whole number of rows.
SourceTensor slice_rows(const SourceTensor& t, const FusedRows& p, const std::string& where);

/// A vindex's layer bands for a model of `arch` with `n_layers`: the record's known size
/// (ArchRecord::bands, the original LARQL's table) or vindex::default_layer_bands.
std::map<std::string, vindex::Band> layer_bands_of(std::string_view arch, int64_t n_layers);

/// Which layers slide: layer i of n under `pattern` (ArchRecord::swa_pattern).
bool swa_layer_slides(int64_t pattern, int64_t layer);

/// Llama 3.1's RoPE frequency factors (transformers _compute_llama3_parameters; llama.cpp
/// convert_hf_to_gguf.py LlamaModel.generate_extra_tensors writes the same as rope_freqs):
/// for i < head_dim/2 with wavelength w = 2 pi base^(2i/head_dim): 1 when w < original /
/// high_freq_factor, `factor` when w > original / low_freq_factor, else
/// 1 / ((1 - s) / factor + s) with s = (original / w - low) / (high - low). theta_i is divided
/// by the factor. Errors: InvalidArgument for non-positive parameters or high <= low.
std::vector<float> llama3_rope_factors(int64_t head_dim, double base, double factor, double low_freq_factor,
                                       double high_freq_factor, double original_context);

}  // namespace larql
