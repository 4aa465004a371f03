#include "model/hf_source.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "model/arch.h"
#include "tokenizer/hf_json.h"
#include "util/error.h"
#include "util/text_file.h"
#include "util/hash.h"
#include "util/mmap.h"

namespace larql {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;


std::optional<DType> dtype_of(StDType t) {
  switch (t) {
    case StDType::F32: return DType::F32;
    case StDType::F16: return DType::F16;
    case StDType::BF16: return DType::BF16;
    default: return std::nullopt;
  }
}

}  // namespace

bool is_hf_model_dir(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  if (fs::exists(d / "index.json", ec)) return false;  // a vindex
  return fs::exists(d / "config.json", ec) || fs::exists(d / "model.safetensors", ec) ||
         fs::exists(d / "model.safetensors.index.json", ec);
}

std::shared_ptr<HfSource> HfSource::open(const std::string& dir) {
  auto s = std::make_shared<HfSource>();
  s->dir_ = dir;
  const fs::path d(dir);
  const std::string cfg_path = (d / "config.json").string();
  s->config_text_ = read_text_file(cfg_path, "config.json", 16u << 20);
  s->config_ = config_from_hf_json(s->config_text_, cfg_path);
  s->arch_ = &require_arch(s->config_.arch, cfg_path);
  s->ckpt_ = SafetensorsCheckpoint::open(dir);
  const ModelConfig& c = s->config_;
  // The embedding's rows are the vocabulary: check them before anything is sized by vocab_size.
  if (const SafetensorsTensor* e = s->ckpt_.find(hf_tensor_name(*s->arch_, TensorRole::TokenEmbd, -1));
      e != nullptr && (e->shape.size() != 2 || e->shape[0] != c.vocab))
    throw Error(ErrorKind::Format, cfg_path + ": vocab_size = " + std::to_string(c.vocab) + " but tensor '" + e->name +
                                       "' has " + std::to_string(e->shape.empty() ? 0 : e->shape[0]) + " rows");

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
    if (!s->arch_->hf_norm_plus_one) break;
    for (int64_t l = is_layer_role(role) ? 0 : -1; l < (is_layer_role(role) ? c.n_layers : 0); ++l) {
      const std::string name = hf_tensor_name(*s->arch_, role, l);
      if (name.empty()) continue;
      const SafetensorsTensor* t = s->ckpt_.find(name);
      if (t == nullptr) continue;  // Model::load names what is missing
      std::vector<float> v(static_cast<size_t>(t->n_elements()));
      to_f32(*t, v.data());
      for (float& x : v) x += 1.0f;
      s->norms_[name] = std::move(v);
    }
  }
  // Experts: transformers stores each as its own tensor (…experts.E.w1.weight); the model reads
  // them stacked, as GGUF stores them ([cols, rows, n_experts]): copied together once at open.
  if (c.n_experts > 0) {
    for (int64_t l = 0; l < c.n_layers; ++l) {
      for (TensorRole role : {TensorRole::FfnGateExps, TensorRole::FfnUpExps, TensorRole::FfnDownExps}) {
        const std::string pattern = hf_tensor_name(*s->arch_, role, l);
        const size_t star = pattern.find('*');
        if (star == std::string::npos) continue;
        Stacked st;
        for (int64_t e = 0; e < c.n_experts; ++e) {
          const std::string name = pattern.substr(0, star) + std::to_string(e) + pattern.substr(star + 1);
          const SafetensorsTensor* t = s->ckpt_.find(name);
          if (t == nullptr)
            throw Error(ErrorKind::Format, dir + ": tensor '" + name + "' is missing (expert " + std::to_string(e) +
                                               " of num_experts = " + std::to_string(c.n_experts) + ")");
          if (t->shape.size() != 2)
            throw Error(ErrorKind::Format, dir + ": tensor '" + name + "' is not a matrix");
          if (e == 0) {
            st.type = *dtype_of(t->dtype);
            st.dims = {static_cast<uint64_t>(t->shape[1]), static_cast<uint64_t>(t->shape[0]),
                       static_cast<uint64_t>(c.n_experts)};
            st.bytes.reserve(t->nbytes * static_cast<size_t>(c.n_experts));
          } else if (*dtype_of(t->dtype) != st.type || static_cast<uint64_t>(t->shape[1]) != st.dims[0] ||
                     static_cast<uint64_t>(t->shape[0]) != st.dims[1]) {
            throw Error(ErrorKind::Format, dir + ": tensor '" + name + "' differs in dtype or shape from expert 0's");
          }
          st.bytes.insert(st.bytes.end(), t->data, t->data + t->nbytes);
        }
        s->stacked_[pattern] = std::move(st);
      }
    }
  }
  // Tokenizer.
  const std::string tok_config = fs::exists(d / "tokenizer_config.json") ? read_text_file((d / "tokenizer_config.json").string(), "tokenizer_config.json", 64u << 20) : "";
  const std::string tok_json = read_text_file((d / "tokenizer.json").string(), "tokenizer.json", 256u << 20);
  s->vocab_ = vocab_from_hf_tokenizer(tok_json, tok_config);
  VocabData& v = s->vocab_;
  // transformers 5 saves the chat template beside the tokenizer, not in tokenizer_config.json.
  std::string template_file;
  if (v.chat_template.empty() && fs::exists(d / "chat_template.jinja")) {
    template_file = read_text_file((d / "chat_template.jinja").string(), "chat_template.jinja", 4u << 20);
    v.chat_template = template_file;
  }
  if (static_cast<int64_t>(v.tokens.size()) > s->config_.vocab)
    throw Error(ErrorKind::Format, (d / "tokenizer.json").string() + ": " + std::to_string(v.tokens.size()) +
                                       " tokens, but config.json's vocab_size (the embedding's rows) is " +
                                       std::to_string(s->config_.vocab));
  // Embedding rows beyond the tokenizer's ids (Qwen2 pads to a multiple of 128): unused tokens,
  // named as llama.cpp's converter names them ("[PAD<id>]").
  for (int64_t id = static_cast<int64_t>(v.tokens.size()); id < s->config_.vocab; ++id) {
    v.tokens.push_back("[PAD" + std::to_string(id) + "]");
    v.scores.push_back(0.0f);
    v.types.push_back(TokenType::Unused);
  }
  s->specials_ = SpecialTokens{v.bos_id, v.eos_id, v.eot_id, v.pad_id, v.unk_id, v.add_bos};

  // Fingerprint and size: every byte that defines the model.
  Xxh3Stream h;
  for (const std::string* part :
       std::initializer_list<const std::string*>{&s->config_text_, &tok_json, &tok_config, &template_file}) {
    h.update(part->data(), part->size());
    h.update("\n", 1);
  }
  s->bytes_ = s->config_text_.size() + tok_json.size() + tok_config.size() + template_file.size();
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
  if (const auto part = fused_rows(*arch_, config_, role, true)) {
    std::string fused = "model.layers." + std::to_string(layer) + "." + part->suffix;
    if (ckpt_.find(fused) != nullptr) return fused;
  }
  return hf_tensor_name(*arch_, role, layer);
}

std::optional<SourceTensor> HfSource::tensor(TensorRole role, int64_t layer) const {
  const std::string name = tensor_name(role, layer);
  if (name.empty()) return std::nullopt;
  if (const auto it = stacked_.find(name); it != stacked_.end()) {
    const Stacked& st = it->second;
    return SourceTensor{name, st.type, st.dims, st.bytes.data(), st.bytes.size()};
  }
  const SafetensorsTensor* t = ckpt_.find(name);
  if (t == nullptr) return std::nullopt;
  SourceTensor out;
  out.name = t->name;
  for (auto it = t->shape.rbegin(); it != t->shape.rend(); ++it) out.dims.push_back(static_cast<uint64_t>(*it));
  if (const auto part = fused_rows(*arch_, config_, role, true);
      part && name == "model.layers." + std::to_string(layer) + "." + part->suffix) {
    out.type = *dtype_of(t->dtype);
    out.data = t->data;
    out.nbytes = t->nbytes;
    return slice_rows(out, *part, dir_);
  }
  if (is_norm_role(role) && arch_->hf_norm_plus_one) {
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
    for (TensorRole r : {TensorRole::AttnNorm, TensorRole::AttnQ, TensorRole::AttnK, TensorRole::AttnV, TensorRole::AttnQBias,
                         TensorRole::AttnKBias, TensorRole::AttnVBias, TensorRole::AttnQNorm, TensorRole::AttnKNorm, TensorRole::AttnOutput, TensorRole::PostAttnNorm, TensorRole::FfnNorm,
                         TensorRole::FfnGate, TensorRole::FfnUp, TensorRole::FfnDown, TensorRole::PostFfnNorm,
                         TensorRole::FfnGateInp, TensorRole::FfnGateExps, TensorRole::FfnUpExps, TensorRole::FfnDownExps,
                         TensorRole::FfnGateInpShexp, TensorRole::FfnGateShexp, TensorRole::FfnUpShexp,
                         TensorRole::FfnDownShexp})
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
