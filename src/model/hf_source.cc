#include "model/hf_source.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tokenizer/hf_json.h"
#include "util/error.h"
#include "util/text_file.h"
#include "util/hash.h"
#include "util/mmap.h"

namespace larql {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Hugging Face Gemma 3 names (transformers modeling_gemma3.py).
std::string gemma3_hf_name(TensorRole role, int64_t layer) {
  const char* s = "";
  switch (role) {
    case TensorRole::TokenEmbd: return "model.embed_tokens.weight";
    case TensorRole::Output: return "lm_head.weight";
    case TensorRole::OutputNorm: return "model.norm.weight";
    case TensorRole::AttnNorm: s = "input_layernorm.weight"; break;
    case TensorRole::AttnQ: s = "self_attn.q_proj.weight"; break;
    case TensorRole::AttnK: s = "self_attn.k_proj.weight"; break;
    case TensorRole::AttnV: s = "self_attn.v_proj.weight"; break;
    case TensorRole::AttnQNorm: s = "self_attn.q_norm.weight"; break;
    case TensorRole::AttnKNorm: s = "self_attn.k_norm.weight"; break;
    case TensorRole::AttnOutput: s = "self_attn.o_proj.weight"; break;
    case TensorRole::PostAttnNorm: s = "post_attention_layernorm.weight"; break;
    case TensorRole::FfnNorm: s = "pre_feedforward_layernorm.weight"; break;
    case TensorRole::FfnGate: s = "mlp.gate_proj.weight"; break;
    case TensorRole::FfnUp: s = "mlp.up_proj.weight"; break;
    case TensorRole::FfnDown: s = "mlp.down_proj.weight"; break;
    case TensorRole::PostFfnNorm: s = "post_feedforward_layernorm.weight"; break;
    case TensorRole::AttnQBias:
    case TensorRole::AttnKBias:
    case TensorRole::AttnVBias: return "";  // Gemma has no attention biases
  }
  return "model.layers." + std::to_string(layer) + "." + s;
}

// Gemma's RMSNorm weights: stored as w, used as 1 + w.
bool is_norm_role(TensorRole r) {
  switch (r) {
    case TensorRole::OutputNorm:
    case TensorRole::AttnNorm:
    case TensorRole::AttnQNorm:
    case TensorRole::AttnKNorm:
    case TensorRole::PostAttnNorm:
    case TensorRole::FfnNorm:
    case TensorRole::PostFfnNorm: return true;
    default: return false;
  }
}

std::optional<DType> dtype_of(StDType t) {
  switch (t) {
    case StDType::F32: return DType::F32;
    case StDType::F16: return DType::F16;
    case StDType::BF16: return DType::BF16;
    default: return std::nullopt;
  }
}

class Reader {
 public:
  Reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {}
  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    throw Error(ErrorKind::Format, where_ + ": " + key + " " + what);
  }
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  int64_t count(const char* key, std::optional<int64_t> def = std::nullopt) const {
    if (!has(key)) {
      if (def) return *def;
      bad(key, "is missing");
    }
    const json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() >= kMaxCount)
      bad(key, "= " + v.dump() + " is not an integer in [1, 2^31)");
    return v.get<int64_t>();
  }
  double number(const char* key, double def) const {
    if (!has(key)) return def;
    const json& v = j_.at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>())) bad(key, "= " + v.dump() + " is not a finite number");
    return v.get<double>();
  }
  bool flag(const char* key, bool def) const {
    if (!has(key)) return def;
    if (!j_.at(key).is_boolean()) bad(key, "= " + j_.at(key).dump() + " is not true or false");
    return j_.at(key).get<bool>();
  }
  std::string str(const char* key, const std::string& def) const {
    if (!has(key)) return def;
    if (!j_.at(key).is_string()) bad(key, "= " + j_.at(key).dump() + " is not a string");
    return j_.at(key).get<std::string>();
  }

 private:
  const json& j_;
  std::string where_;
};

}  // namespace

bool is_hf_model_dir(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  if (fs::exists(d / "index.json", ec)) return false;  // a vindex
  return fs::exists(d / "config.json", ec) || fs::exists(d / "model.safetensors", ec) ||
         fs::exists(d / "model.safetensors.index.json", ec);
}

ModelConfig config_from_hf_json(std::string_view text, const std::string& where) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw Error(ErrorKind::Format, where + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(ErrorKind::Format, where + ": not a JSON object");
  const Reader r(j, where);
  const std::string model_type = r.str("model_type", "");
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch = j["architectures"][0].get<std::string>();
  if (model_type != "gemma3_text" && arch != "Gemma3ForCausalLM")
    throw Error(ErrorKind::Unsupported, where + ": model_type \"" + model_type + "\" / architectures \"" + arch +
                                            "\" is not supported (supported: Gemma3ForCausalLM, model_type gemma3_text)");

  ModelConfig c;
  c.arch = "gemma3";
  c.name = r.str("_name_or_path", "");
  if (c.name.empty()) c.name = fs::path(where).parent_path().filename().string();
  c.n_layers = r.count("num_hidden_layers");
  c.hidden = r.count("hidden_size");
  c.ffn = r.count("intermediate_size");
  c.n_heads = r.count("num_attention_heads");
  c.n_kv_heads = r.count("num_key_value_heads", c.n_heads);
  c.head_dim = r.count("head_dim", 256);
  if (c.n_heads % c.n_kv_heads != 0)
    r.bad("num_attention_heads", "= " + std::to_string(c.n_heads) + " is not a multiple of num_key_value_heads = " +
                                     std::to_string(c.n_kv_heads));
  if (c.head_dim % 2 != 0 || c.head_dim > kMaxHeadDim) r.bad("head_dim", "= " + std::to_string(c.head_dim) + " is not even in [2, 1024]");
  c.context_length = r.count("max_position_embeddings", 32768);
  if (c.context_length > kMaxContextLength) r.bad("max_position_embeddings", "= " + std::to_string(c.context_length) + " is above 2^24");
  c.vocab = r.count("vocab_size", 262144);
  c.norm_eps = static_cast<float>(r.number("rms_norm_eps", 1e-6));
  if (!(c.norm_eps > 0 && c.norm_eps < 1)) r.bad("rms_norm_eps", "= " + std::to_string(c.norm_eps) + " is outside (0, 1)");
  const double qpas = r.number("query_pre_attn_scalar", static_cast<double>(c.head_dim));
  if (!(qpas > 0)) r.bad("query_pre_attn_scalar", "= " + std::to_string(qpas) + " is not > 0");
  c.attn_scale = static_cast<float>(1.0 / std::sqrt(qpas));
  c.embed_scale = std::sqrt(static_cast<float>(c.hidden));
  c.final_logit_softcap = static_cast<float>(r.number("final_logit_softcapping", 0.0));
  c.attn_logit_softcap = static_cast<float>(r.number("attn_logit_softcapping", 0.0));
  if (c.final_logit_softcap < 0 || c.attn_logit_softcap < 0) r.bad("final/attn_logit_softcapping", "is negative");
  const std::string act = r.str("hidden_activation", r.str("hidden_act", "gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh")
    throw Error(ErrorKind::Unsupported, where + ": hidden_activation \"" + act + "\" is not supported (gelu_pytorch_tanh)");
  c.activation = Activation::GeluTanh;
  c.post_norms = true;
  c.qk_norm = true;
  c.qkv_bias = false;
  c.tied_embeddings = r.flag("tie_word_embeddings", true);

  const double global_base = r.number("rope_theta", 1000000.0);
  const double local_base = r.number("rope_local_base_freq", 10000.0);
  if (!(global_base > 1)) r.bad("rope_theta", "= " + std::to_string(global_base) + " is not > 1");
  if (!(local_base > 1)) r.bad("rope_local_base_freq", "= " + std::to_string(local_base) + " is not > 1");
  double factor = 1.0;
  if (r.has("rope_scaling")) {
    const json& s = j["rope_scaling"];
    if (!s.is_object()) r.bad("rope_scaling", "is not an object");
    const Reader rs(s, where + ": rope_scaling");
    const std::string type = rs.str("rope_type", rs.str("type", "linear"));
    if (type != "linear" && type != "default")
      throw Error(ErrorKind::Unsupported, where + ": rope_scaling type \"" + type + "\" is not supported (only linear)");
    factor = type == "linear" ? rs.number("factor", 1.0) : 1.0;
    if (!(factor > 0)) r.bad("rope_scaling.factor", "= " + std::to_string(factor) + " is not > 0");
  }
  const int64_t window = r.count("sliding_window", 512);
  std::vector<bool> global(static_cast<size_t>(c.n_layers));
  if (r.has("layer_types")) {
    const json& lt = j["layer_types"];
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c.n_layers)
      r.bad("layer_types", "must list one entry per layer (" + std::to_string(c.n_layers) + ")");
    for (size_t i = 0; i < lt.size(); ++i) {
      if (lt[i] != "full_attention" && lt[i] != "sliding_attention")
        r.bad("layer_types[" + std::to_string(i) + "]", "= " + lt[i].dump() + " is not full_attention or sliding_attention");
      global[i] = lt[i] == "full_attention";
    }
  } else {
    const int64_t pattern = r.count("sliding_window_pattern", 6);
    for (int64_t i = 0; i < c.n_layers; ++i) global[static_cast<size_t>(i)] = (i + 1) % pattern == 0;
  }
  c.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    LayerConfig& l = c.layers[static_cast<size_t>(i)];
    l.sliding = !global[static_cast<size_t>(i)];
    l.window = l.sliding ? window : 0;
    l.rope_form = RopeForm::NeoX;  // Hugging Face's rotate_half pairs i with i + head_dim/2
    l.rope_base = l.sliding ? local_base : global_base;
    l.rope_freq_scale = l.sliding ? 1.0 : 1.0 / factor;
  }
  return c;
}

std::shared_ptr<HfSource> HfSource::open(const std::string& dir) {
  auto s = std::make_shared<HfSource>();
  s->dir_ = dir;
  const fs::path d(dir);
  const std::string cfg_path = (d / "config.json").string();
  s->config_text_ = read_text_file(cfg_path, "config.json", 16u << 20);
  s->config_ = config_from_hf_json(s->config_text_, cfg_path);
  s->ckpt_ = SafetensorsCheckpoint::open(dir);
  const ModelConfig& c = s->config_;

  // Every tensor is a float type; no layer beyond the config's.
  for (const SafetensorsTensor* t : s->ckpt_.tensors()) {
    if (!dtype_of(t->dtype))
      throw Error(ErrorKind::Unsupported, dir + ": tensor '" + t->name + "' has dtype " + st_dtype_name(t->dtype) +
                                              " (only F32, F16 and BF16 weights are read)");
    constexpr std::string_view kLayers = "model.layers.";
    if (t->name.compare(0, kLayers.size(), kLayers) == 0) {
      const long layer = std::strtol(t->name.c_str() + kLayers.size(), nullptr, 10);
      if (layer < 0 || layer >= c.n_layers)
        throw Error(ErrorKind::Format, dir + ": tensor '" + t->name + "' is of a layer at or beyond num_hidden_layers = " +
                                           std::to_string(c.n_layers));
    }
  }
  // Norms as Gemma's multiplier 1 + w, in f32.
  for (TensorRole role : {TensorRole::OutputNorm, TensorRole::AttnNorm, TensorRole::AttnQNorm, TensorRole::AttnKNorm,
                          TensorRole::PostAttnNorm, TensorRole::FfnNorm, TensorRole::PostFfnNorm}) {
    for (int64_t l = is_layer_role(role) ? 0 : -1; l < (is_layer_role(role) ? c.n_layers : 0); ++l) {
      const std::string name = gemma3_hf_name(role, l);
      const SafetensorsTensor* t = s->ckpt_.find(name);
      if (t == nullptr) continue;  // Model::load names what is missing
      std::vector<float> v(static_cast<size_t>(t->n_elements()));
      to_f32(*t, v.data());
      for (float& x : v) x += 1.0f;
      s->norms_[name] = std::move(v);
    }
  }
  // Tokenizer.
  const std::string tok_config = fs::exists(d / "tokenizer_config.json") ? read_text_file((d / "tokenizer_config.json").string(), "tokenizer_config.json", 64u << 20) : "";
  const std::string tok_json = read_text_file((d / "tokenizer.json").string(), "tokenizer.json", 256u << 20);
  s->vocab_ = vocab_from_hf_tokenizer(tok_json, tok_config);
  const VocabData& v = s->vocab_;
  if (static_cast<int64_t>(v.tokens.size()) != s->config_.vocab)
    throw Error(ErrorKind::Format, (d / "tokenizer.json").string() + ": " + std::to_string(v.tokens.size()) +
                                       " tokens, but config.json's vocab_size (the embedding's rows) is " +
                                       std::to_string(s->config_.vocab));
  s->specials_ = SpecialTokens{v.bos_id, v.eos_id, v.eot_id, v.pad_id, v.unk_id, v.add_bos};

  // Fingerprint and size: every byte that defines the model.
  Xxh3Stream h;
  for (const std::string* part : std::initializer_list<const std::string*>{&s->config_text_, &tok_json, &tok_config}) {
    h.update(part->data(), part->size());
    h.update("\n", 1);
  }
  s->bytes_ = s->config_text_.size() + tok_json.size() + tok_config.size();
  std::vector<const SafetensorsTensor*> all = s->ckpt_.tensors();
  std::sort(all.begin(), all.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
  for (const SafetensorsTensor* t : all) {
    std::string head = t->name + ":" + st_dtype_name(t->dtype);
    for (int64_t x : t->shape) head += "," + std::to_string(x);
    h.update(head.data(), head.size() + 1);
    h.update(t->data, t->nbytes);
  }
  for (const auto& shard : s->ckpt_.shards()) s->bytes_ += shard->file_size();
  s->fingerprint_ = "hf-xxh3-" + hex64(h.digest());
  return s;
}

std::string HfSource::format() const {
  return "Hugging Face safetensors (" + std::to_string(ckpt_.shards().size()) + " file" + (ckpt_.shards().size() == 1 ? "" : "s") + ")";
}

std::string HfSource::tensor_name(TensorRole role, int64_t layer) const {
  if (is_layer_role(role) != (layer >= 0) || layer >= config_.n_layers)
    throw Error(ErrorKind::InvalidArgument, "tensor role " + std::to_string(static_cast<int>(role)) + " at layer " +
                                                std::to_string(layer) + " (the model has " + std::to_string(config_.n_layers) + " layers)");
  return gemma3_hf_name(role, layer);
}

std::optional<SourceTensor> HfSource::tensor(TensorRole role, int64_t layer) const {
  const std::string name = tensor_name(role, layer);
  if (name.empty()) return std::nullopt;
  const SafetensorsTensor* t = ckpt_.find(name);
  if (t == nullptr) return std::nullopt;
  SourceTensor out;
  out.name = t->name;
  for (auto it = t->shape.rbegin(); it != t->shape.rend(); ++it) out.dims.push_back(static_cast<uint64_t>(*it));
  if (is_norm_role(role)) {
    const auto& v = norms_.at(name);
    out.type = DType::F32;
    out.data = reinterpret_cast<const uint8_t*>(v.data());
    out.nbytes = v.size() * sizeof(float);
    return out;
  }
  out.type = *dtype_of(t->dtype);
  out.data = t->data;
  out.nbytes = t->nbytes;
  return out;
}

std::vector<SourceTensor> HfSource::tensors() const {
  std::vector<SourceTensor> out;
  for (TensorRole r : {TensorRole::TokenEmbd, TensorRole::Output, TensorRole::OutputNorm})
    if (auto t = tensor(r, -1)) out.push_back(*t);
  for (int64_t l = 0; l < config_.n_layers; ++l)
    for (TensorRole r : {TensorRole::AttnNorm, TensorRole::AttnQ, TensorRole::AttnK, TensorRole::AttnV, TensorRole::AttnQNorm,
                         TensorRole::AttnKNorm, TensorRole::AttnOutput, TensorRole::PostAttnNorm, TensorRole::FfnNorm,
                         TensorRole::FfnGate, TensorRole::FfnUp, TensorRole::FfnDown, TensorRole::PostFfnNorm})
      if (auto t = tensor(r, l)) out.push_back(*t);
  return out;
}

std::vector<MetadataEntry> HfSource::metadata() const {
  std::vector<MetadataEntry> out;
  const json j = json::parse(config_text_);
  for (const auto& [k, v] : j.items()) {
    std::string type = v.is_string() ? "str" : v.is_boolean() ? "bool" : v.is_number_integer() ? "i64" : v.is_number() ? "f64"
                                            : v.is_array() ? "arr[" + std::to_string(v.size()) + "]" : v.is_null() ? "null" : "obj";
    std::string val = v.is_string() ? v.get<std::string>() : v.dump();
    if (val.size() > 200) val = val.substr(0, 200) + "...";
    out.push_back({k, type, val});
  }
  return out;
}

}  // namespace larql
