// config.json from a ModelConfig (extract/hf_export.h config_to_hf_json): the inverse of
// model/hf_config.cc's config_from_hf_json, checked by reading the text back with it. Keys as the
// transformers configuration classes name them (LlamaConfig, MistralConfig, MixtralConfig,
// Qwen2Config, Qwen2MoeConfig, Qwen3Config, Gemma2Config, Gemma3TextConfig, Phi3Config).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "extract/hf_export.h"
#include "model/arch.h"
#include "model/hf_source.h"
#include "util/error.h"

namespace larql::extract {
namespace {

using ojson = nlohmann::ordered_json;

/// The shortest decimal that reads back as `f` in float (1e-06, not 9.99999997e-07), as a double.
double shortest(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  double d = 0;
  std::from_chars(buf, r.ptr, d);
  return d;
}

/// Whether two factor lists agree to a few float ulps (llama.cpp's converter computes Llama 3.1's
/// rope_freqs in float32 torch, larql's llama3_rope_factors in double: the smooth band differs in
/// the last bits).
bool near(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::fabs(static_cast<double>(a[i]) - b[i]) > 1e-6 * std::fabs(static_cast<double>(a[i]))) return false;
  return true;
}

/// A llama3 rope_scaling that gives `factors` (model/arch.h llama3_rope_factors) to a few ulps, if
/// one of the usual parameter sets does.
std::optional<ojson> llama3_scaling(const ModelConfig& c, double base) {
  const float top = *std::max_element(c.rope_freq_factors.begin(), c.rope_freq_factors.end());
  std::vector<double> factors = {static_cast<double>(top)};
  for (double f : {2.0, 4.0, 8.0, 16.0, 32.0, 64.0})
    if (f != factors[0]) factors.push_back(f);
  for (double factor : factors)
    for (double low : {1.0, 2.0, 4.0})
      for (double high : {1.0, 2.0, 4.0, 8.0}) {
        if (high <= low) continue;
        for (double orig = 16; orig <= (1 << 22); orig *= 2) {
          std::vector<float> f;
          try {
            f = llama3_rope_factors(c.head_dim, base, factor, low, high, orig);
          } catch (const Error&) {
            continue;
          }
          if (near(f, c.rope_freq_factors))
            return ojson{{"rope_type", "llama3"}, {"factor", factor}, {"low_freq_factor", low}, {"high_freq_factor", high},
                         {"original_max_position_embeddings", static_cast<int64_t>(orig)}};
        }
      }
  return std::nullopt;
}

bool close(double a, double b) { return a == b || std::fabs(a - b) <= 1e-12 * std::max(std::fabs(a), std::fabs(b)); }

/// The first field the forward pass reads in which `a` and `b` differ ("" when none); the RoPE
/// pairing is not compared (a Hugging Face checkpoint always pairs NeoX halves).
std::string first_difference(const ModelConfig& a, const ModelConfig& b) {
#define LARQL_CMP(field) \
  if (!(a.field == b.field)) return #field;
  LARQL_CMP(arch) LARQL_CMP(n_layers) LARQL_CMP(hidden) LARQL_CMP(ffn) LARQL_CMP(n_heads) LARQL_CMP(n_kv_heads)
  LARQL_CMP(head_dim) LARQL_CMP(vocab) LARQL_CMP(context_length) LARQL_CMP(norm_eps) LARQL_CMP(attn_scale)
  LARQL_CMP(embed_scale) LARQL_CMP(final_logit_softcap) LARQL_CMP(attn_logit_softcap) LARQL_CMP(activation)
  LARQL_CMP(post_norms) LARQL_CMP(qk_norm) LARQL_CMP(tied_embeddings) LARQL_CMP(qkv_bias)
  LARQL_CMP(n_experts) LARQL_CMP(n_experts_used) LARQL_CMP(expert_ffn) LARQL_CMP(shared_expert_ffn)
#undef LARQL_CMP
  if (!near(a.rope_freq_factors, b.rope_freq_factors)) return "rope_freq_factors";
  if (a.n_experts > 0 && a.expert_weights_norm != b.expert_weights_norm) return "expert_weights_norm";
  if (!close(a.rope_attn_factor, b.rope_attn_factor)) return "rope_attn_factor";
  if (a.layers.size() != b.layers.size()) return "layers";
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const LayerConfig &x = a.layers[i], &y = b.layers[i];
    const std::string at = "layers[" + std::to_string(i) + "].";
    if (x.sliding != y.sliding) return at + "sliding";
    if (x.window != y.window) return at + "window";
    if (!close(x.rope_base, y.rope_base)) return at + "rope_base";
    if (!close(x.rope_freq_scale, y.rope_freq_scale)) return at + "rope_freq_scale";
  }
  return "";
}

}  // namespace

std::string config_to_hf_json(const ModelConfig& c, const SpecialTokens& sp, const std::string& torch_dtype) {
  const ArchRecord* rec = find_arch(c.arch);
  if (rec == nullptr || rec->hf_architectures.empty())
    throw Error(ErrorKind::Unsupported, "compile: no Hugging Face config mapping for architecture '" + c.arch + "'");
  const std::string what = "compile: this " + std::string(rec->title) + " model ";
  if (c.layers.empty()) throw Error(ErrorKind::InvalidArgument, what + "has no layers");
  const bool any_slide = std::any_of(c.layers.begin(), c.layers.end(), [](const LayerConfig& l) { return l.sliding; });
  const bool all_slide = std::all_of(c.layers.begin(), c.layers.end(), [](const LayerConfig& l) { return l.sliding; });
  // Which transformers class: a llama record with experts is Mixtral, one that slides everywhere Mistral.
  std::string hf_arch = rec->hf_architectures[0];
  auto pick = [&](const char* name) {
    if (std::find(rec->hf_architectures.begin(), rec->hf_architectures.end(), name) != rec->hf_architectures.end()) hf_arch = name;
  };
  if (c.n_experts > 0) pick("MixtralForCausalLM");
  else if (all_slide) pick("MistralForCausalLM");
  const size_t ai = static_cast<size_t>(std::find(rec->hf_architectures.begin(), rec->hf_architectures.end(), hf_arch) -
                                        rec->hf_architectures.begin());
  const std::string model_type = rec->hf_model_types[std::min(ai, rec->hf_model_types.size() - 1)];

  ojson j;
  j["architectures"] = {hf_arch};
  j["model_type"] = model_type;
  if (!c.name.empty()) j["_name_or_path"] = c.name;
  j["hidden_size"] = c.hidden;
  j["intermediate_size"] = c.ffn;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.context_length;
  j["vocab_size"] = c.vocab;
  j["rms_norm_eps"] = shortest(c.norm_eps);
  j[rec->activation == Activation::GeluTanh ? "hidden_activation" : "hidden_act"] =
      c.activation == Activation::Silu ? "silu" : "gelu_pytorch_tanh";
  j["tie_word_embeddings"] = c.tied_embeddings;
  if (rec->qkv_bias_always) {
    if (!c.qkv_bias) j["qkv_bias"] = false;
  } else {
    if (c.qkv_bias)
      throw Error(ErrorKind::Unsupported, what + "has Q/K/V biases, which transformers' " + hf_arch +
                                              " expresses only with attention_bias (which also adds an o_proj bias)");
    j["attention_bias"] = false;
  }
  if (rec->attn_scale_from_query_pre_attn_scalar) {
    const double q = 1.0 / (static_cast<double>(c.attn_scale) * c.attn_scale);
    const double r = std::round(q);
    if (r >= 1 && static_cast<float>(1.0 / std::sqrt(r)) == c.attn_scale) j["query_pre_attn_scalar"] = static_cast<int64_t>(r);
    else j["query_pre_attn_scalar"] = q;
  }
  // Soft-capping: explicit (null when off) for the families whose transformers class has it, so
  // its default (Gemma 2: 30 and 50) does not apply.
  auto cap = [&](const char* key, float v) {
    if (v > 0) j[key] = shortest(v);
    else if (rec->attn_scale_from_query_pre_attn_scalar) j[key] = nullptr;
  };
  cap("final_logit_softcapping", c.final_logit_softcap);
  cap("attn_logit_softcapping", c.attn_logit_softcap);
  // Experts.
  if (c.n_experts > 0) {
    if (rec->moe_shared_expert) {
      j["num_experts"] = c.n_experts;
      j["moe_intermediate_size"] = c.expert_ffn;
      j["shared_expert_intermediate_size"] = c.shared_expert_ffn;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = ojson::array();
    } else {
      j["num_local_experts"] = c.n_experts;
      if (c.expert_ffn != c.ffn) j["moe_intermediate_size"] = c.expert_ffn;
    }
    j["num_experts_per_tok"] = c.n_experts_used;
    j["norm_topk_prob"] = c.expert_weights_norm;
  }
  // RoPE: the global layers' base and scaling; the sliding layers' own base.
  const auto global_it = std::find_if(c.layers.begin(), c.layers.end(), [](const LayerConfig& l) { return !l.sliding; });
  const auto slide_it = std::find_if(c.layers.begin(), c.layers.end(), [](const LayerConfig& l) { return l.sliding; });
  const LayerConfig& global = global_it != c.layers.end() ? *global_it : c.layers[0];
  j["rope_theta"] = global.rope_base;
  if (slide_it != c.layers.end() && (slide_it->rope_base != global.rope_base || rec->rope_base_swa > 0))
    j["rope_local_base_freq"] = slide_it->rope_base;
  if (!c.rope_freq_factors.empty()) {
    if (auto l3 = llama3_scaling(c, global.rope_base); l3 && c.rope_attn_factor == 1.0 && global.rope_freq_scale == 1.0) {
      j["rope_scaling"] = *l3;
    } else {
      // LongRoPE with both factor sets equal: the factors in effect, whatever the sequence length.
      j["rope_scaling"] = {{"rope_type", "longrope"},
                           {"long_factor", c.rope_freq_factors},
                           {"short_factor", c.rope_freq_factors},
                           {"original_max_position_embeddings", c.context_length},
                           {"attention_factor", c.rope_attn_factor}};
      j["original_max_position_embeddings"] = c.context_length;
    }
  } else if (global.rope_freq_scale != 1.0) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 1.0 / global.rope_freq_scale}};
  }
  // Sliding window.
  if (any_slide) {
    const int64_t window = slide_it->window;
    for (const LayerConfig& l : c.layers)
      if (l.sliding && l.window != window)
        throw Error(ErrorKind::Unsupported, what + "slides with different windows on different layers; config.json has one");
    j["sliding_window"] = window;
  } else {
    j["sliding_window"] = nullptr;
  }
  // Which layers slide, explicitly (transformers 5 writes layer_types for every family).
  ojson types = ojson::array();
  for (const LayerConfig& l : c.layers) types.push_back(l.sliding ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  if (rec->swa_pattern >= 2) {
    // Older transformers read the pattern instead of layer_types.
    for (int64_t p = 1; p <= c.n_layers + 1 && any_slide; ++p) {
      bool follows = true;
      for (size_t i = 0; i < c.layers.size(); ++i) follows &= c.layers[i].sliding == swa_layer_slides(p, static_cast<int64_t>(i));
      if (follows) {
        if (p != rec->swa_pattern) j["sliding_window_pattern"] = p;
        break;
      }
    }
  } else if (any_slide && !all_slide) {
    throw Error(ErrorKind::Unsupported, what + "slides on some layers only, but transformers' " + hf_arch +
                                            " applies sliding_window to every layer");
  }
  if (model_type.rfind("qwen", 0) == 0) j["use_sliding_window"] = false;
  auto id = [](int32_t v) { return v >= 0 ? ojson(v) : ojson(nullptr); };
  j["bos_token_id"] = id(sp.bos);
  j["eos_token_id"] = id(sp.eos);
  j["pad_token_id"] = id(sp.pad);
  j["torch_dtype"] = torch_dtype;
  const std::string text = j.dump(2) + "\n";

  // Read it back as larql reads a Hugging Face directory: it must be this config.
  ModelConfig back;
  try {
    back = config_from_hf_json(text, "config.json (compiled)");
  } catch (const Error& e) {
    throw Error(ErrorKind::Unsupported, what + "cannot be written as a config.json larql reads back: " + e.what());
  }
  if (const std::string d = first_difference(c, back); !d.empty())
    throw Error(ErrorKind::Unsupported, what + "cannot be expressed in transformers' config.json keys: its " + d +
                                            " does not survive the round trip through config.json");
  return text;
}

}  // namespace larql::extract
