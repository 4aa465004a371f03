#include "model/config_json.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace larql {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& where, const std::string& what) { throw Error(ErrorKind::Format, where + ": " + what); }

// `obj` is the JSON path of the object read ("model_config", "model_config.moe",
// "model_config.layers[3]"): every message names the key by its full path.
const json& need(const json& j, const char* key, const std::string& where, const std::string& obj) {
  if (!j.contains(key)) bad(where, obj + " has no \"" + key + "\"");
  return j.at(key);
}
int64_t count(const json& j, const char* key, const std::string& where, const std::string& obj, int64_t lo = 1) {
  const json& v = need(j, key, where, obj);
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() >= kMaxCount)
    bad(where, obj + "." + key + " = " + v.dump() + " is not an integer in [" + std::to_string(lo) + ", 2^31)");
  return v.get<int64_t>();
}
double number(const json& j, const char* key, const std::string& where, const std::string& obj) {
  const json& v = need(j, key, where, obj);
  if (!v.is_number() || !std::isfinite(v.get<double>())) bad(where, obj + "." + key + " = " + v.dump() + " is not a finite number");
  return v.get<double>();
}
bool flag(const json& j, const char* key, const std::string& where, const std::string& obj) {
  const json& v = need(j, key, where, obj);
  if (!v.is_boolean()) bad(where, obj + "." + key + " must be true or false");
  return v.get<bool>();
}

}  // namespace

std::string config_to_json(const ModelConfig& c) {
  json layers = json::array();
  for (const LayerConfig& l : c.layers)
    layers.push_back({{"sliding", l.sliding}, {"window", l.window}, {"rope_base", l.rope_base},
                      {"rope_freq_scale", l.rope_freq_scale}, {"rope_form", l.rope_form == RopeForm::NeoX ? "neox" : "adjacent"}});
  const json j = {{"arch", c.arch}, {"name", c.name}, {"n_layers", c.n_layers}, {"hidden", c.hidden}, {"ffn", c.ffn},
                  {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim}, {"vocab", c.vocab},
                  {"context_length", c.context_length}, {"norm_eps", c.norm_eps}, {"attn_scale", c.attn_scale},
                  {"embed_scale", c.embed_scale}, {"final_logit_softcap", c.final_logit_softcap},
                  {"attn_logit_softcap", c.attn_logit_softcap},
                  {"activation", c.activation == Activation::GeluTanh ? "gelu_tanh" : "silu"},
                  {"post_norms", c.post_norms}, {"qk_norm", c.qk_norm}, {"tied_embeddings", c.tied_embeddings},
                  {"qkv_bias", c.qkv_bias}, {"layers", layers}};
  json out = j;
  if (!c.rope_freq_factors.empty()) out["rope_freq_factors"] = c.rope_freq_factors;
  if (c.rope_attn_factor != 1.0) out["rope_attn_factor"] = c.rope_attn_factor;
  if (c.n_experts > 0)
    out["moe"] = {{"n_experts", c.n_experts}, {"n_experts_used", c.n_experts_used}, {"expert_ffn", c.expert_ffn},
                  {"expert_weights_norm", c.expert_weights_norm}, {"shared_expert_ffn", c.shared_expert_ffn}};
  return out.dump();
}

ModelConfig config_from_json(std::string_view text, const std::string& where) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    bad(where, std::string("model_config is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad(where, "model_config is not an object");
  ModelConfig c;
  const std::string mc = "model_config";
  const json& arch = need(j, "arch", where, mc);
  if (!arch.is_string()) bad(where, "model_config.arch must be a string");
  c.arch = arch.get<std::string>();
  const auto& archs = supported_architectures();
  if (std::find(archs.begin(), archs.end(), c.arch) == archs.end())
    throw Error(ErrorKind::Unsupported, where + ": architecture \"" + c.arch + "\" is not one this build runs");
  c.name = j.value("name", std::string());
  c.n_layers = count(j, "n_layers", where, mc);
  c.hidden = count(j, "hidden", where, mc);
  c.ffn = count(j, "ffn", where, mc);
  c.n_heads = count(j, "n_heads", where, mc);
  c.n_kv_heads = count(j, "n_kv_heads", where, mc);
  c.head_dim = count(j, "head_dim", where, mc);
  c.vocab = count(j, "vocab", where, mc);
  c.context_length = count(j, "context_length", where, mc);
  if (c.n_heads % c.n_kv_heads != 0) bad(where, "model_config.n_heads is not a multiple of n_kv_heads");
  if (c.head_dim % 2 != 0 || c.head_dim > kMaxHeadDim) bad(where, "model_config.head_dim must be even and at most 1024");
  c.norm_eps = static_cast<float>(number(j, "norm_eps", where, mc));
  if (!(c.norm_eps > 0 && c.norm_eps < 1)) bad(where, "model_config.norm_eps is outside (0, 1)");
  c.attn_scale = static_cast<float>(number(j, "attn_scale", where, mc));
  c.embed_scale = static_cast<float>(number(j, "embed_scale", where, mc));
  c.final_logit_softcap = static_cast<float>(number(j, "final_logit_softcap", where, mc));
  c.attn_logit_softcap = static_cast<float>(number(j, "attn_logit_softcap", where, mc));
  const json& act = need(j, "activation", where, mc);
  if (act == "gelu_tanh") c.activation = Activation::GeluTanh;
  else if (act == "silu") c.activation = Activation::Silu;
  else bad(where, "model_config.activation " + act.dump() + " is not gelu_tanh or silu");
  c.post_norms = flag(j, "post_norms", where, mc);
  c.qk_norm = flag(j, "qk_norm", where, mc);
  c.tied_embeddings = flag(j, "tied_embeddings", where, mc);
  c.qkv_bias = flag(j, "qkv_bias", where, mc);
  if (j.contains("rope_freq_factors")) {
    const json& f = j.at("rope_freq_factors");
    if (!f.is_array() || static_cast<int64_t>(f.size()) != c.head_dim / 2)
      bad(where, "model_config.rope_freq_factors must list head_dim / 2 = " + std::to_string(c.head_dim / 2) + " numbers");
    for (const json& x : f) {
      if (!x.is_number() || !std::isfinite(x.get<double>()) || !(x.get<double>() > 0))
        bad(where, "model_config.rope_freq_factors holds " + x.dump() + " (factors must be finite and > 0)");
      c.rope_freq_factors.push_back(x.get<float>());
    }
  }
  if (j.contains("rope_attn_factor")) {
    c.rope_attn_factor = number(j, "rope_attn_factor", where, mc);
    if (!(c.rope_attn_factor > 0)) bad(where, "model_config.rope_attn_factor must be > 0");
  }
  if (j.contains("moe")) {
    const json& m = j.at("moe");
    const std::string moe = "model_config.moe";
    if (!m.is_object()) bad(where, "model_config.moe must be an object");
    c.n_experts = count(m, "n_experts", where, moe);
    c.n_experts_used = count(m, "n_experts_used", where, moe);
    if (c.n_experts_used > c.n_experts)
      bad(where, "model_config.moe.n_experts_used = " + std::to_string(c.n_experts_used) + " is more than model_config.moe.n_experts = " +
                     std::to_string(c.n_experts));
    c.expert_ffn = count(m, "expert_ffn", where, moe);
    c.expert_weights_norm = flag(m, "expert_weights_norm", where, moe);
    c.shared_expert_ffn = count(m, "shared_expert_ffn", where, moe, 0);
  }
  const json& layers = need(j, "layers", where, mc);
  if (!layers.is_array() || static_cast<int64_t>(layers.size()) != c.n_layers)
    bad(where, "model_config.layers must list one entry per layer (" + std::to_string(c.n_layers) + ")");
  for (size_t i = 0; i < layers.size(); ++i) {
    const json& l = layers[i];
    const std::string w = "model_config.layers[" + std::to_string(i) + "]";
    if (!l.is_object()) bad(where, w + " is not an object");
    LayerConfig lc;
    lc.sliding = flag(l, "sliding", where, w);
    lc.window = lc.sliding ? count(l, "window", where, w) : 0;
    lc.rope_base = number(l, "rope_base", where, w);
    lc.rope_freq_scale = number(l, "rope_freq_scale", where, w);
    if (!(lc.rope_base > 1) || !(lc.rope_freq_scale > 0)) bad(where, w + ".rope_base must be > 1 and " + w + ".rope_freq_scale > 0");
    const json& form = need(l, "rope_form", where, w);
    if (form == "neox") lc.rope_form = RopeForm::NeoX;
    else if (form == "adjacent") lc.rope_form = RopeForm::Adjacent;
    else bad(where, w + ".rope_form " + form.dump() + " is not neox or adjacent");
    c.layers.push_back(lc);
  }
  return c;
}

}  // namespace larql
