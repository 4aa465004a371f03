// config.json -> ModelConfig for every family: one generic reader driven by the family's
// architecture record (model/arch.h), plus the record's hook. Key names and defaults follow the
// transformers configuration classes (LlamaConfig, Qwen2Config, Gemma3TextConfig, ...).
#include "model/hf_config.h"

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "model/arch.h"
#include "model/hf_source.h"
#include "util/error.h"

namespace larql {

using nlohmann::json;

struct HfConfigReader::Impl {
  json j;
};

HfConfigReader::HfConfigReader(std::unique_ptr<Impl> impl, std::string where)
    : impl_(std::move(impl)), where_(std::move(where)) {}

HfConfigReader::HfConfigReader(std::string_view text, std::string where) : impl_(std::make_unique<Impl>()), where_(std::move(where)) {
  try {
    impl_->j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw Error(ErrorKind::Format, where_ + ": not valid JSON: " + e.what());
  }
  if (!impl_->j.is_object()) throw Error(ErrorKind::Format, where_ + ": not a JSON object");
}

HfConfigReader::~HfConfigReader() = default;
HfConfigReader::HfConfigReader(HfConfigReader&&) noexcept = default;

void HfConfigReader::bad(const std::string& key, const std::string& what) const {
  throw Error(ErrorKind::Format, where_ + ": " + key + " " + what);
}

void HfConfigReader::unsupported(const std::string& key, const std::string& what) const {
  throw Error(ErrorKind::Unsupported, where_ + ": " + key + " " + what);
}

bool HfConfigReader::has(const char* key) const { return impl_->j.contains(key) && !impl_->j.at(key).is_null(); }

int64_t HfConfigReader::count(const char* key, std::optional<int64_t> def) const {
  if (!has(key)) {
    if (def) return *def;
    bad(key, "is missing");
  }
  const json& v = impl_->j.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() >= kMaxCount)
    bad(key, "= " + v.dump() + " is not an integer in [1, 2^31)");
  return v.get<int64_t>();
}

double HfConfigReader::number(const char* key, double def) const {
  if (!has(key)) return def;
  const json& v = impl_->j.at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) bad(key, "= " + v.dump() + " is not a finite number");
  return v.get<double>();
}

bool HfConfigReader::flag(const char* key, bool def) const {
  if (!has(key)) return def;
  if (!impl_->j.at(key).is_boolean()) bad(key, "= " + impl_->j.at(key).dump() + " is not true or false");
  return impl_->j.at(key).get<bool>();
}

std::string HfConfigReader::str(const char* key, const std::string& def) const {
  if (!has(key)) return def;
  if (!impl_->j.at(key).is_string()) bad(key, "= " + impl_->j.at(key).dump() + " is not a string");
  return impl_->j.at(key).get<std::string>();
}

std::string HfConfigReader::array_string(const char* key, size_t index) const {
  if (!has(key)) return "";
  const json& a = impl_->j.at(key);
  if (!a.is_array() || index >= a.size() || !a[index].is_string()) return "";
  return a[index].get<std::string>();
}

double HfConfigReader::array_number(const char* key, size_t index) const {
  const json& a = impl_->j.at(key);
  if (!a.is_array() || index >= a.size() || !a[index].is_number())
    bad(std::string(key) + "[" + std::to_string(index) + "]", "is not a number");
  return a[index].get<double>();
}

std::optional<size_t> HfConfigReader::array_size(const char* key) const {
  if (!has(key)) return std::nullopt;
  if (!impl_->j.at(key).is_array()) bad(key, "is not an array");
  return impl_->j.at(key).size();
}

std::optional<HfConfigReader> HfConfigReader::object(const char* key) const {
  if (!has(key)) return std::nullopt;
  if (!impl_->j.at(key).is_object()) bad(key, "is not an object");
  auto impl = std::make_unique<Impl>();
  impl->j = impl_->j.at(key);
  return HfConfigReader(std::move(impl), where_ + ": " + key);
}

namespace {

Activation activation_of(const HfConfigReader& r, const ArchRecord& rec) {
  const char* key = r.has("hidden_activation") ? "hidden_activation" : "hidden_act";
  const std::string def = rec.activation == Activation::Silu ? "silu" : "gelu_pytorch_tanh";
  const std::string act = r.str(key, def);
  if (act == "silu" || act == "swish") return Activation::Silu;
  if (act == "gelu_pytorch_tanh" || act == "gelu_tanh") return Activation::GeluTanh;
  r.unsupported(key, "= \"" + act + "\" is not supported (silu, gelu_pytorch_tanh)");
}

/// One RoPE setting: base, linear factor (1 = none) and Llama 3.1's frequency factors.
struct Rope {
  double base = 10000;
  double linear = 1;
  std::vector<float> factors;
  double attn_factor = 1;
};

/// What a rope object may need from the rest of config.json.
struct RopeContext {
  int64_t head_dim;
  int64_t context;           ///< max_position_embeddings
  double original_context;   ///< top-level original_max_position_embeddings (0: absent)
};

/// LongRoPE's factor set (Phi-3 128k; transformers _compute_longrope_parameters): long_factor
/// when the model's context exceeds the original one, else short_factor — llama.cpp's choice by
/// context size (transformers chooses by the current sequence length, so it agrees once a
/// sequence is longer than the original context); the attention factor
/// sqrt(1 + ln(s) / ln(original)) for s = context / original > 1 unless attention_factor says.
std::vector<float> longrope_factors(const HfConfigReader& p, const RopeContext& rc, double* attn_factor) {
  const double original = p.number("original_max_position_embeddings", rc.original_context);
  if (!(original >= 1))
    p.bad("original_max_position_embeddings", original == 0 && !p.has("original_max_position_embeddings")
                                                  ? "is missing (LongRoPE needs it)"
                                                  : "= " + std::to_string(original) + " is not >= 1");
  const char* key = static_cast<double>(rc.context) > original ? "long_factor" : "short_factor";
  const auto n = p.array_size(key);
  if (!n || static_cast<int64_t>(*n) != rc.head_dim / 2)
    p.bad(key, "must list head_dim / 2 = " + std::to_string(rc.head_dim / 2) + " factors");
  std::vector<float> f(*n);
  for (size_t i = 0; i < *n; ++i) {
    const double x = p.array_number(key, i);
    if (!(std::isfinite(static_cast<float>(x)) && x > 0))
      p.bad(std::string(key) + "[" + std::to_string(i) + "]", "is not a finite number > 0 (as a float)");
    f[i] = static_cast<float>(x);
  }
  const double s = static_cast<double>(rc.context) / original;
  *attn_factor = p.number("attention_factor", s > 1 ? std::sqrt(1 + std::log(s) / std::log(original)) : 1.0);
  if (!(*attn_factor > 0)) p.bad("attention_factor", "is not > 0");
  return f;
}

/// The RoPE of `p`, an object holding rope_type (or type) and its parameters: transformers'
/// rope_scaling (with the base `base` beside it) or, from transformers 5, rope_parameters (with
/// rope_theta inside).
Rope read_rope(const HfConfigReader& p, double base, const RopeContext& rc) {
  const int64_t head_dim = rc.head_dim;
  Rope r;
  r.base = p.number("rope_theta", base);
  if (!(r.base > 1)) p.bad("rope_theta", "= " + std::to_string(r.base) + " is not > 1");
  if (p.has("partial_rotary_factor") && p.number("partial_rotary_factor", 1.0) != 1.0)
    p.unsupported("partial_rotary_factor", "!= 1 (partial rotary embeddings) is not supported");
  const std::string type = p.str("rope_type", p.str("type", "default"));
  if (type == "default") return r;
  // What transformers requires of each type (_validate_*_rope_parameters): nothing defaulted.
  auto need = [&](const char* key) {
    if (!p.has(key)) p.bad(key, "is missing (rope_type \"" + type + "\" needs it)");
  };
  if (type == "linear" || type == "llama3") need("factor");
  if (type == "llama3")
    for (const char* key : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) need(key);
  if (type == "longrope" || type == "su")
    for (const char* key : {"long_factor", "short_factor"}) need(key);
  const double factor = type == "longrope" || type == "su" ? 1.0 : p.number("factor", 1.0);
  if (!(factor > 0)) p.bad("factor", "= " + std::to_string(factor) + " is not > 0");
  if (type == "linear") {
    r.linear = factor;
  } else if (type == "llama3") {
    try {
      r.factors = llama3_rope_factors(head_dim, r.base, factor, p.number("low_freq_factor", 1.0),
                                      p.number("high_freq_factor", 4.0),
                                      p.number("original_max_position_embeddings", 8192.0));
    } catch (const Error& e) {
      p.bad("(llama3)", e.what());
    }
  } else if (type == "longrope" || type == "su") {
    r.factors = longrope_factors(p, rc, &r.attn_factor);
  } else {
    p.unsupported("rope_type", "\"" + type + "\" is not supported (default, linear, llama3, longrope)");
  }
  return r;
}

ModelConfig read_hf_config(std::string_view text, const std::string& where) {
  const HfConfigReader r(text, where);
  const std::string model_type = r.str("model_type", "");
  const std::string hf_arch = r.array_string("architectures", 0);
  const ArchRecord* rec = find_arch_for_hf(model_type, hf_arch);
  if (rec == nullptr) {
    std::string list;
    for (const ArchRecord* a : arch_records())
      for (const auto& n : a->hf_architectures) list += (list.empty() ? "" : ", ") + n;
    throw Error(ErrorKind::Unsupported, where + ": model_type \"" + model_type + "\" / architectures \"" + hf_arch +
                                            "\" is not supported (supported: " + list + ")");
  }
  if (r.has("partial_rotary_factor") && r.number("partial_rotary_factor", 1.0) != 1.0)
    r.unsupported("partial_rotary_factor", "!= 1 (partial rotary embeddings) is not supported");
  if (r.has("rope_scaling") && r.has("rope_parameters"))
    r.bad("rope_scaling", "and rope_parameters are both set");
  if (r.flag("mlp_bias", false)) r.unsupported("mlp_bias", "= true (FFN biases) is not supported");

  ModelConfig c;
  c.arch = rec->arch;
  c.name = r.str("_name_or_path", "");
  if (c.name.empty()) c.name = std::filesystem::path(where).parent_path().filename().string();
  c.n_layers = r.count("num_hidden_layers");
  c.hidden = r.count("hidden_size");
  c.ffn = r.count("intermediate_size");
  c.n_heads = r.count("num_attention_heads");
  c.n_kv_heads = r.count("num_key_value_heads", c.n_heads);
  if (!r.has("head_dim") && rec->hf_default_head_dim == 0 && c.hidden % c.n_heads != 0)
    r.bad("hidden_size", "= " + std::to_string(c.hidden) + " is not a multiple of num_attention_heads = " +
                             std::to_string(c.n_heads) + " (head_dim is derived from them when absent)");
  c.head_dim = r.count("head_dim", rec->hf_default_head_dim > 0 ? rec->hf_default_head_dim : c.hidden / c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    r.bad("num_attention_heads", "= " + std::to_string(c.n_heads) + " is not a multiple of num_key_value_heads = " +
                                     std::to_string(c.n_kv_heads));
  if (c.head_dim % 2 != 0 || c.head_dim > kMaxHeadDim)
    r.bad("head_dim", "= " + std::to_string(c.head_dim) + " is not even in [2, " + std::to_string(kMaxHeadDim) + "]");
  c.context_length = r.count("max_position_embeddings",
                             rec->default_context > 0 ? std::optional<int64_t>(rec->default_context) : std::nullopt);
  if (c.context_length > kMaxContextLength)
    r.bad("max_position_embeddings", "= " + std::to_string(c.context_length) + " is above 2^24");
  c.vocab = r.count("vocab_size", rec->hf_default_vocab > 0 ? std::optional<int64_t>(rec->hf_default_vocab) : std::nullopt);
  c.norm_eps = static_cast<float>(r.number("rms_norm_eps", rec->hf_default_norm_eps));
  if (!(c.norm_eps > 0 && c.norm_eps < 1)) r.bad("rms_norm_eps", "= " + std::to_string(c.norm_eps) + " is outside (0, 1)");
  double qpas = static_cast<double>(c.head_dim);
  if (rec->attn_scale_from_query_pre_attn_scalar) {
    qpas = r.number("query_pre_attn_scalar", qpas);
    if (!(qpas > 0)) r.bad("query_pre_attn_scalar", "= " + std::to_string(qpas) + " is not > 0");
  }
  c.attn_scale = static_cast<float>(1.0 / std::sqrt(qpas));
  c.embed_scale = rec->embed_scale_sqrt_hidden ? std::sqrt(static_cast<float>(c.hidden)) : 1.0f;
  c.final_logit_softcap = static_cast<float>(r.number("final_logit_softcapping", 0.0));
  c.attn_logit_softcap = static_cast<float>(r.number("attn_logit_softcapping", 0.0));
  if (c.final_logit_softcap < 0 || c.attn_logit_softcap < 0) r.bad("final/attn_logit_softcapping", "is negative");
  c.activation = activation_of(r, *rec);
  c.post_norms = rec->post_norms;
  c.qk_norm = rec->qk_norm;
  if (!rec->qkv_bias_always && r.flag("attention_bias", false))
    r.unsupported("attention_bias", "= true (biases on q/k/v and o_proj) is not supported");
  c.qkv_bias = rec->qkv_bias_always && r.flag("qkv_bias", true);  // transformers 5's Qwen2-MoE can turn them off
  c.tied_embeddings = r.flag("tie_word_embeddings", rec->hf_default_tied);

  // Mixture of experts: Mixtral's num_local_experts / Qwen2-MoE's num_experts, num_experts_per_tok,
  // each expert moe_intermediate_size (else intermediate_size) wide, norm_topk_prob.
  const char* experts_key = r.has("num_local_experts") ? "num_local_experts" : "num_experts";
  if (r.has(experts_key) || r.has("n_routed_experts")) {
    if (r.has("n_routed_experts")) r.unsupported("n_routed_experts", "(DeepSeek-style experts) is not supported");
    if (!rec->moe) r.unsupported(experts_key, "is set but " + std::string(rec->title) + " has no mixture-of-experts models");
    c.n_experts = r.count(experts_key);
    c.n_experts_used = r.count("num_experts_per_tok");
    if (c.n_experts_used > c.n_experts)
      r.bad("num_experts_per_tok", "= " + std::to_string(c.n_experts_used) + " is more than " + experts_key + " = " +
                                       std::to_string(c.n_experts));
    c.expert_ffn = r.count("moe_intermediate_size", c.ffn);
    c.expert_weights_norm = r.flag("norm_topk_prob", rec->moe_weights_norm);
    if (rec->moe_shared_expert) c.shared_expert_ffn = r.count("shared_expert_intermediate_size");
  }

  // RoPE of global and sliding layers: rope_theta / rope_local_base_freq with rope_scaling
  // (transformers 4), or rope_parameters, itself or per layer type (transformers 5).
  Rope global, swa;
  const RopeContext rc{c.head_dim, c.context_length, r.number("original_max_position_embeddings", 0.0)};
  const double base = r.number("rope_theta", rec->rope_base);
  const double base_swa = r.number("rope_local_base_freq", rec->rope_base_swa > 0 ? rec->rope_base_swa : 0);
  if (const auto rp = r.object("rope_parameters")) {
    if (const auto full = rp->object("full_attention")) {
      global = read_rope(*full, base, rc);
      const auto sl = rp->object("sliding_attention");
      swa = sl ? read_rope(*sl, base_swa > 0 ? base_swa : global.base, rc) : global;
    } else {
      global = read_rope(*rp, base, rc);
      swa = global;
      if (base_swa > 0) swa = Rope{base_swa, 1.0, {}};
    }
  } else {
    if (const auto rs = r.object("rope_scaling")) {
      global = read_rope(*rs, base, rc);
      global.base = base;  // rope_scaling does not carry the base
    } else {
      global.base = base;
    }
    if (!(global.base > 1)) r.bad("rope_theta", "= " + std::to_string(global.base) + " is not > 1");
    swa = global;
    if (base_swa > 0) swa = Rope{base_swa, 1.0, {}};
  }
  if (!(swa.base > 1)) r.bad("rope_local_base_freq", "= " + std::to_string(swa.base) + " is not > 1");
  if (!rec->rope_scaling_global_only && swa.linear != global.linear) swa.linear = global.linear;
  if (global.factors != swa.factors)
    r.unsupported("rope_parameters", "with frequency factors on some layers only is not supported");
  c.rope_freq_factors = global.factors;
  c.rope_attn_factor = global.attn_factor;

  // Which layers slide: layer_types when given, else the family's pattern (Gemma 3's
  // sliding_window_pattern overrides it) when the config has a window.
  const int64_t pattern = r.count("sliding_window_pattern", rec->swa_pattern);
  const bool has_window = rec->swa_pattern > 0 && (r.has("sliding_window") || rec->default_window > 0);
  const int64_t window = has_window ? r.count("sliding_window", rec->default_window) : 0;
  std::vector<bool> slides(static_cast<size_t>(c.n_layers));
  if (const auto n = r.array_size("layer_types")) {
    if (static_cast<int64_t>(*n) != c.n_layers)
      r.bad("layer_types", "must list one entry per layer (" + std::to_string(c.n_layers) + ")");
    for (size_t i = 0; i < *n; ++i) {
      const std::string t = r.array_string("layer_types", i);
      if (t != "full_attention" && t != "sliding_attention")
        r.bad("layer_types[" + std::to_string(i) + "]", "= \"" + t + "\" is not full_attention or sliding_attention");
      slides[i] = t == "sliding_attention";
      if (slides[i] && window == 0) r.bad("layer_types[" + std::to_string(i) + "]", "is sliding_attention but sliding_window is not set");
    }
  } else {
    for (int64_t i = 0; i < c.n_layers; ++i) slides[static_cast<size_t>(i)] = window > 0 && swa_layer_slides(pattern, i);
  }
  c.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    LayerConfig& l = c.layers[static_cast<size_t>(i)];
    l.sliding = slides[static_cast<size_t>(i)];
    l.window = l.sliding ? window : 0;
    l.rope_form = RopeForm::NeoX;  // transformers' rotate_half pairs i with i + head_dim/2 in every family
    const Rope& rope = l.sliding ? swa : global;
    l.rope_base = rope.base;
    l.rope_freq_scale = 1.0 / rope.linear;
  }
  if (rec->hf_hook != nullptr) rec->hf_hook(r, c);
  return c;
}

}  // namespace

ModelConfig config_from_hf_json(std::string_view text, const std::string& where) {
  // As vocab_from_hf_tokenizer: a JSON type a check missed is a Format error naming the file.
  try {
    return read_hf_config(text, where);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::Format, where + ": a value of the wrong JSON type: " + e.what());
  }
}

}  // namespace larql
