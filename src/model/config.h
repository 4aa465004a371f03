// Architecture as data: everything the forward pass needs to know about a model family.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace larql {

class GgufFile;

enum class Activation { GeluTanh, Silu };

/// Per-layer attention shape: which layers slide, their window, RoPE base and scaling.
struct LayerConfig {
  bool sliding = false;      ///< attends only to the last `window` positions (self included)
  int64_t window = 0;        ///< tokens; 0 when !sliding
  double rope_base = 10000;  ///< RoPE theta base for this layer
  double rope_freq_scale = 1.0;  ///< 1 / linear RoPE scaling factor (1 = none)
};

/// A model's architecture, read from GGUF metadata (or config.json later). One config drives
/// the single forward pass; a family file only fills this in and maps tensor names.
struct ModelConfig {
  std::string arch;          ///< "gemma3"
  std::string name;          ///< general.name
  int64_t n_layers = 0;
  int64_t hidden = 0;        ///< embedding length
  int64_t ffn = 0;           ///< feed-forward width
  int64_t n_heads = 0;       ///< query heads
  int64_t n_kv_heads = 0;    ///< key/value heads (grouped-query attention)
  int64_t head_dim = 0;      ///< per head, K and V
  int64_t vocab = 0;
  int64_t context_length = 0;  ///< tokens the model was trained for
  float norm_eps = 1e-6f;
  float attn_scale = 0;      ///< multiplies q·k; Gemma: 1/sqrt(query_pre_attn_scalar)
  float embed_scale = 1;     ///< multiplies the looked-up embedding; Gemma: sqrt(hidden)
  float final_logit_softcap = 0;  ///< 0 = none
  float attn_logit_softcap = 0;   ///< 0 = none
  Activation activation = Activation::GeluTanh;
  bool post_norms = false;   ///< Gemma's post-attention / post-FFN RMSNorms
  bool qk_norm = false;      ///< per-head RMSNorm on q and k
  bool tied_embeddings = true;  ///< lm_head is token_embd
  std::vector<LayerConfig> layers;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

/// Architectures this build can run, for error messages.
const std::vector<std::string>& supported_architectures();

/// Read the config from GGUF metadata. Where the file is silent the family's published
/// defaults fill in (see the family file for sources).
/// Errors: Error{Unsupported} naming the architecture and listing the supported ones;
/// Error{Format} for a missing or inconsistent required key.
ModelConfig config_from_gguf(const GgufFile& file);

/// Gemma 3 (src/model/gemma3.cc).
ModelConfig gemma3_config_from_gguf(const GgufFile& file);

}  // namespace larql
