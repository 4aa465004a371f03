// Architecture as data: everything the forward pass needs to know about a model family.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace larql {

class GgufFile;

enum class Activation { GeluTanh, Silu };

/// How RoPE pairs a head's dimensions (compute/ops.h): NeoX rotates i with i + head_dim/2
/// (Gemma, Qwen, GPT-NeoX; llama.cpp LLAMA_ROPE_TYPE_NEOX); Adjacent rotates 2i with 2i + 1
/// (Llama; llama.cpp LLAMA_ROPE_TYPE_NORM).
enum class RopeForm { NeoX, Adjacent };

/// Per-layer attention shape: which layers slide, their window, RoPE form, base and scaling.
struct LayerConfig {
  bool sliding = false;      ///< attends only to the last `window` positions (self included)
  int64_t window = 0;        ///< tokens; 0 when !sliding
  double rope_base = 10000;  ///< RoPE theta base for this layer
  double rope_freq_scale = 1.0;  ///< 1 / linear RoPE scaling factor (1 = none)
  RopeForm rope_form = RopeForm::NeoX;  ///< (last, so {sliding, window, base, scale} still initialises)
};

/// A model's architecture, read from GGUF metadata (or config.json later). One config drives
/// the single forward pass; an architecture record (model/arch.h) says how each family fills it in.
struct ModelConfig {
  std::string arch;          ///< the architecture record's name (model/arch.h): "gemma3", "llama", "qwen2", ...
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
  bool qkv_bias = false;     ///< Q/K/V projections have biases (added after the projection)
  /// RoPE frequency factors [head_dim / 2] dividing each frequency, on every layer (Llama 3.1's
  /// rope_freqs; llama.cpp ggml_rope_ext freq_factors): theta_i = pos * freq_scale *
  /// base^(-2i/head_dim) / factor_i. Empty: none.
  std::vector<float> rope_freq_factors;
  /// Multiplies RoPE's cos and sin (so q·k by its square): LongRoPE's attention factor
  /// sqrt(1 + ln(s) / ln(original context)) for s = context / original (Phi-3 128k); 1 = none.
  double rope_attn_factor = 1.0;
  /// Mixture of experts (0 = a dense FFN on every layer): each layer's FFN is n_experts gated
  /// FFNs of width expert_ffn, each token using the n_experts_used its router ranks first.
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  int64_t expert_ffn = 0;
  /// The chosen experts' softmax probabilities renormalised to sum 1 (Mixtral), or used as
  /// they are (Qwen2-MoE's norm_topk_prob = false).
  bool expert_weights_norm = false;
  /// A shared expert of this width every token uses, its output gated by sigmoid(w · x)
  /// (Qwen2-MoE); 0 = none.
  int64_t shared_expert_ffn = 0;
  std::vector<LayerConfig> layers;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

/// GGUF metadata keys of the model config, written after the "<arch>." prefix (llama.cpp's
/// LLM_KV names), so a family's reader and validate_config() name the same key.
namespace config_keys {
inline constexpr const char* kBlockCount = "block_count";
inline constexpr const char* kEmbeddingLength = "embedding_length";
inline constexpr const char* kFeedForwardLength = "feed_forward_length";
inline constexpr const char* kContextLength = "context_length";
inline constexpr const char* kHeadCount = "attention.head_count";
inline constexpr const char* kHeadCountKv = "attention.head_count_kv";
inline constexpr const char* kKeyLength = "attention.key_length";
inline constexpr const char* kValueLength = "attention.value_length";
inline constexpr const char* kRmsEpsilon = "attention.layer_norm_rms_epsilon";
inline constexpr const char* kSlidingWindow = "attention.sliding_window";
inline constexpr const char* kQueryPreAttnScalar = "attention.query_pre_attn_scalar";
inline constexpr const char* kFinalLogitSoftcap = "final_logit_softcapping";
inline constexpr const char* kAttnLogitSoftcap = "attn_logit_softcapping";
inline constexpr const char* kRopeFreqBase = "rope.freq_base";          ///< global layers
inline constexpr const char* kRopeFreqBaseSwa = "rope.freq_base_swa";   ///< sliding layers
inline constexpr const char* kRopeScalingFactor = "rope.scaling.factor";
inline constexpr const char* kRopeScalingType = "rope.scaling.type";
inline constexpr const char* kRopeDimensionCount = "rope.dimension_count";
inline constexpr const char* kTokens = "tokenizer.ggml.tokens";  ///< no prefix: the vocabulary
}  // namespace config_keys

/// Limits validate_config() enforces beyond each key's natural range.
inline constexpr int64_t kMaxHeadDim = 1024;          ///< even head_dim up to this
inline constexpr int64_t kMaxContextLength = 1 << 24;  ///< above any published model (10M); positions stay exact in f32
inline constexpr int64_t kMaxCount = int64_t{1} << 31; ///< any count read from metadata (layers, widths, heads)

/// Architectures this build can run (model/arch.h arch_records()), for error messages.
const std::vector<std::string>& supported_architectures();

/// Read the config from GGUF metadata (the generic reader of `<arch>.*` keys, driven by the
/// family's architecture record, model/arch.h, and its hook), then validate_config() it. Where
/// the file is silent the family's published defaults fill in (see its file in
/// src/model/families/ for sources). A `rope_freqs.weight` tensor (Llama 3.1) becomes
/// rope_freq_factors.
/// Errors: Error{Unsupported} naming the architecture and listing the supported ones;
/// Error{Format} for a missing key, a value of the wrong type or outside its valid range.
ModelConfig config_from_gguf(const GgufFile& file);

/// The one check of a config against its valid ranges and the file's tensors. Every error is
/// Error{Format} naming the GGUF key and its value, e.g.
/// `gemma3.attention.layer_norm_rms_epsilon = -1 is outside (0, 1)`. Checked:
///   - block_count >= 1, and no tensor of a block at or beyond it (blk.N with N >= block_count);
///   - embedding_length, feed_forward_length, head_count, head_count_kv >= 1;
///     head_count a multiple of head_count_kv; key_length even in [2, kMaxHeadDim]; without a
///     key_length key, embedding_length a multiple of head_count (head_dim is derived from it);
///   - context_length in [1, kMaxContextLength];
///   - layer_norm_rms_epsilon finite in (0, 1); query_pre_attn_scalar finite > 0;
///     final/attn logit softcapping finite >= 0;
///   - every sliding layer's window >= 1; every layer's RoPE base finite > 0 (freq_base for global
///     layers, freq_base_swa for sliding ones) and its scaling factor finite > 0;
///   - the vocabulary (tokenizer.ggml.tokens) has 1 .. 2^31-1 entries, as many as token_embd.weight
///     (and output.weight, when present) has rows; token_embd rows hold embedding_length values;
///     blk.0's q/k/ffn_up tensors have the rows the heads and widths imply.
/// Model::load still checks every tensor's shape by name.
void validate_config(const ModelConfig& config, const GgufFile& file);

/// A count from metadata: nullopt if absent; Error{Format} naming the key above kMaxCount (so it
/// fits int64 and nothing is sized by it before validate_config checks its real range).
std::optional<int64_t> read_count(const GgufFile& f, const std::string& key);
/// read_count, Error{Format} naming the key when absent.
int64_t require_count(const GgufFile& f, const std::string& key);

/// llama.cpp's name of a tensor: "blk.N.<suffix>" for per-layer roles (layer >= 0), `suffix`
/// itself otherwise (gguf-py's TENSOR_NAMES / llama.cpp LLM_TENSOR_NAMES).
std::string llama_cpp_tensor_name(const char* suffix, int64_t layer);

}  // namespace larql
