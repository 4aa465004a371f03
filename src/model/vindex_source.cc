#include "model/vindex_source.h"

#include <cstdint>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "model/config_json.h"
#include "tokenizer/hf_json.h"
#include "util/error.h"
#include "util/text_file.h"
#include "vindex/sha256.h"

namespace larql {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct RoleName {
  TensorRole role;
  const char* name;
};
constexpr RoleName kRoles[] = {
    {TensorRole::TokenEmbd, "token_embd"},     {TensorRole::Output, "output"},
    {TensorRole::OutputNorm, "output_norm"},   {TensorRole::AttnNorm, "attn_norm"},
    {TensorRole::AttnQ, "attn_q"},             {TensorRole::AttnK, "attn_k"},
    {TensorRole::AttnV, "attn_v"},             {TensorRole::AttnQBias, "attn_q_bias"},
    {TensorRole::AttnKBias, "attn_k_bias"},    {TensorRole::AttnVBias, "attn_v_bias"},
    {TensorRole::AttnQNorm, "attn_q_norm"},    {TensorRole::AttnKNorm, "attn_k_norm"},
    {TensorRole::AttnOutput, "attn_output"},   {TensorRole::PostAttnNorm, "post_attn_norm"},
    {TensorRole::FfnNorm, "ffn_norm"},         {TensorRole::FfnGate, "ffn_gate"},
    {TensorRole::FfnUp, "ffn_up"},             {TensorRole::FfnDown, "ffn_down"},
    {TensorRole::PostFfnNorm, "post_ffn_norm"},
    {TensorRole::FfnGateInp, "ffn_gate_inp"},  {TensorRole::FfnGateExps, "ffn_gate_exps"},
    {TensorRole::FfnUpExps, "ffn_up_exps"},    {TensorRole::FfnDownExps, "ffn_down_exps"},
    {TensorRole::FfnGateInpShexp, "ffn_gate_inp_shexp"}, {TensorRole::FfnGateShexp, "ffn_gate_shexp"},
    {TensorRole::FfnUpShexp, "ffn_up_shexp"},  {TensorRole::FfnDownShexp, "ffn_down_shexp"},
};

}  // namespace

const char* tensor_role_name(TensorRole role) {
  for (const auto& r : kRoles)
    if (r.role == role) return r.name;
  return "?";
}

std::optional<TensorRole> tensor_role_from_name(std::string_view name) {
  for (const auto& r : kRoles)
    if (name == r.name) return r.role;
  return std::nullopt;
}

const std::vector<TensorRole>& all_tensor_roles() {
  static const std::vector<TensorRole> roles = [] {
    std::vector<TensorRole> v;
    for (const auto& r : kRoles) v.push_back(r.role);
    return v;
  }();
  return roles;
}

std::string vindex_not_runnable_reason(const std::string& dir, const vindex::VindexIndex& x, const std::string& verb) {
  if (x.has_model_weights && x.extract_level >= vindex::ExtractLevel::Inference) return "";
  // What the directory holds, from the files its index lists (a slice may hold any subset).
  static const std::pair<const char*, const char*> kParts[] = {
      {"gate_vectors.bin", "gate vectors"},       {"embeddings.bin", "embeddings"},
      {"down_meta.bin", "down_meta"},             {"attn_weights.bin", "the attention weights"},
      {"norms.bin", "the norms"},                 {"ffn_weights.bin", "the FFN weights"},
      {"embed_weights.bin", "the embedding blocks"}};
  std::vector<std::string> parts;
  for (const auto& [file, what] : kParts)
    if (x.checksums.count(file)) parts.emplace_back(what);
  std::string holds;
  for (size_t i = 0; i < parts.size(); ++i)
    holds += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  if (holds.empty()) holds = "no data files";
  if (parts.size() == 3 && x.checksums.count("gate_vectors.bin") && x.checksums.count("down_meta.bin") &&
      x.checksums.count("embeddings.bin"))
    holds += " for browsing";
  return dir + " was extracted at level " + vindex::extract_level_name(x.extract_level) + ": it holds " + holds + "; " +
         verb + " needs level inference \u2014 re-extract with --level inference";
}

std::shared_ptr<VindexSource> VindexSource::open(const std::string& dir, bool partial) {
  auto s = std::make_shared<VindexSource>();
  s->dir_ = dir;
  s->index_ = vindex::read_index(dir);
  const vindex::VindexIndex& x = s->index_;
  if (const std::string why = vindex_not_runnable_reason(dir, x); !why.empty() && !(partial && x.has_model_weights))
    throw Error(ErrorKind::Unsupported, why);
  if (x.quant != "keep" && x.quant != "none" && x.quant != "q4k")
    throw Error(ErrorKind::Unsupported, dir + ": quant \"" + x.quant + "\" is not one this build runs (keep, none, q4k)");
  s->config_ = config_from_json(x.model_config_json, (fs::path(dir) / "index.json").string());

  const fs::path mpath = fs::path(dir) / "weight_manifest.json";
  const std::string where = mpath.string();
  json m;
  try {
    m = json::parse(read_text_file(mpath.string(), "weight_manifest.json", 64u << 20));
  } catch (const json::exception& e) {
    throw Error(ErrorKind::Format, where + ": not valid JSON: " + e.what());
  }
  if (!m.is_array()) throw Error(ErrorKind::Format, where + ": not a JSON array");
  for (size_t i = 0; i < m.size(); ++i) {
    const json& e = m[i];
    const std::string at = where + " entry " + std::to_string(i);
    auto fail = [&](const std::string& what) { throw Error(ErrorKind::Format, at + ": " + what); };
    if (!e.is_object()) fail("not an object");
    for (const char* k : {"role", "layer", "key", "dtype", "shape", "file", "offset", "length"})
      if (!e.contains(k)) fail(std::string("no \"") + k + "\"");
    // "kind": what the entry describes; "tensor" is the only kind of this spec (absent: a tensor).
    if (e.contains("kind") && e["kind"] != "tensor")
      fail("\"kind\" = " + e["kind"].dump() + " is not supported (this larql reads \"tensor\")");
    if (!e["role"].is_string()) fail("role is not a string");
    const auto role = tensor_role_from_name(e["role"].get<std::string>());
    if (!role) fail("unknown role " + e["role"].dump());
    if (!e["layer"].is_number_integer()) fail("layer is not an integer");
    const int64_t layer = e["layer"].get<int64_t>();
    if (is_layer_role(*role) ? (layer < 0 || layer >= s->config_.n_layers) : layer != -1)
      fail("layer " + std::to_string(layer) + " is not valid for role " + e["role"].get<std::string>());
    if (!e["dtype"].is_string()) fail("dtype is not a string");
    const auto dtype = dtype_from_name(e["dtype"].get<std::string>());
    if (!dtype) fail("unknown dtype " + e["dtype"].dump());
    const json& shape = e["shape"];
    const bool stacked = *role == TensorRole::FfnGateExps || *role == TensorRole::FfnUpExps || *role == TensorRole::FfnDownExps;
    if (!shape.is_array() || shape.empty() || shape.size() > (stacked ? 3u : 2u))
      fail(stacked ? "shape must be [n_experts, rows, cols]" : "shape must be [rows, cols] or [n]");
    for (const json& d : shape)
      if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() >= kMaxCount) fail("a shape entry is not a positive count");
    const uint64_t cols = shape.back().get<uint64_t>();
    const uint64_t mats = shape.size() == 3 ? shape[0].get<uint64_t>() : 1;
    const uint64_t rows1 = shape.size() >= 2 ? shape[shape.size() - 2].get<uint64_t>() : 1;
    if (mats > (uint64_t{1} << 16)) fail("more than 65536 experts");
    const uint64_t rows = rows1 * mats;
    const auto rb = row_bytes(*dtype, cols);
    if (!rb) fail("a row of " + std::to_string(cols) + " is not a whole number of " + e["dtype"].get<std::string>() + " blocks");
    if (!e["offset"].is_number_unsigned() || !e["length"].is_number_unsigned()) fail("offset and length must be non-negative integers");
    const uint64_t offset = e["offset"].get<uint64_t>(), length = e["length"].get<uint64_t>();
    if (*rb > UINT64_MAX / rows) fail("the shape's byte size overflows");
    if (length != *rb * rows) fail("length " + std::to_string(length) + " is not the shape's " + std::to_string(*rb * rows) + " bytes");
    if (!e["file"].is_string()) fail("file is not a string");
    const std::string file = e["file"].get<std::string>();
    if (!vindex::is_plain_file_name(file) || !x.checksums.count(file)) fail("file \"" + file + "\" is not a checksummed file of the vindex");
    auto& mf = s->files_[file];
    if (!mf) mf = std::make_shared<MappedFile>(MappedFile::open((fs::path(dir) / file).string()));
    if (offset > mf->size() || length > mf->size() - offset)
      fail("bytes " + std::to_string(offset) + "+" + std::to_string(length) + " run past the end of " + file + " (" +
           std::to_string(mf->size()) + " bytes)");
    const auto key = std::make_pair(static_cast<int>(*role), layer);
    if (s->by_role_.count(key)) fail("role " + e["role"].get<std::string>() + " of layer " + std::to_string(layer) + " given twice");
    SourceTensor t;
    t.name = e["key"].is_string() ? e["key"].get<std::string>() : std::string(tensor_role_name(*role));
    t.type = *dtype;
    t.dims = {cols};
    if (shape.size() >= 2) t.dims.push_back(rows1);
    if (shape.size() == 3) t.dims.push_back(mats);
    t.data = mf->data() + offset;
    t.nbytes = static_cast<size_t>(length);
    s->by_role_[key] = s->entries_.size();
    s->entries_.push_back(Entry{std::move(t), *role, layer});
  }
  for (const auto& [name, _] : x.checksums) {
    std::error_code ec;
    s->bytes_ += fs::file_size(fs::path(dir) / name, ec);
  }
  std::string digests;
  for (const auto& [name, sum] : x.checksums) digests += name + ":" + sum + "\n";
  s->fingerprint_ = "vindex-sha256-" + vindex::sha256_hex(digests.data(), digests.size());
  s->vocab_ = vocab_from_directory(dir);
  const VocabData& v = s->vocab_;
  if (static_cast<int64_t>(v.tokens.size()) != s->config_.vocab)
    throw Error(ErrorKind::Format, dir + ": the vocabulary (" +
                                       (fs::exists(fs::path(dir) / "tokenizer.gguf") ? "tokenizer.gguf" : "tokenizer.json") + ") has " +
                                       std::to_string(v.tokens.size()) + " tokens, the model's embedding " +
                                       std::to_string(s->config_.vocab) + " rows");
  s->specials_ = SpecialTokens{v.bos_id, v.eos_id, v.eot_id, v.pad_id, v.unk_id, v.add_bos};
  return s;
}

std::string VindexSource::format() const {
  return "vindex (spec " + std::to_string(index_.vindex_spec_version) + ", " + vindex::extract_level_name(index_.extract_level) +
         ", quant " + index_.quant + ")";
}

std::optional<SourceTensor> VindexSource::tensor(TensorRole role, int64_t layer) const {
  if (is_layer_role(role) ? (layer < 0 || layer >= config_.n_layers) : layer != -1)
    throw Error(ErrorKind::InvalidArgument, std::string("tensor role ") + tensor_role_name(role) + " with layer " + std::to_string(layer));
  const auto it = by_role_.find({static_cast<int>(role), layer});
  if (it == by_role_.end()) return std::nullopt;
  return entries_[it->second].tensor;
}

std::string VindexSource::tensor_name(TensorRole role, int64_t layer) const {
  const auto it = by_role_.find({static_cast<int>(role), layer});
  if (it != by_role_.end()) return entries_[it->second].tensor.name;
  return std::string(tensor_role_name(role)) + (layer >= 0 ? "[" + std::to_string(layer) + "]" : "");
}

std::vector<SourceTensor> VindexSource::tensors() const {
  std::vector<SourceTensor> out;
  for (const Entry& e : entries_) out.push_back(e.tensor);
  return out;
}

std::vector<MetadataEntry> VindexSource::metadata() const {
  const vindex::VindexIndex& x = index_;
  return {{"model", "str", x.model},
          {"family", "str", x.family},
          {"vindex_spec_version", "i64", std::to_string(x.vindex_spec_version)},
          {"extract_level", "str", vindex::extract_level_name(x.extract_level)},
          {"dtype", "str", x.dtype},
          {"quant", "str", x.quant},
          {"down_top_k", "i64", std::to_string(x.down_top_k)},
          {"source.format", "str", x.source.format},
          {"source.name", "str", x.source.name},
          {"source.fingerprint", "str", x.source.fingerprint},
          {"source.extracted_at", "str", x.source.extracted_at},
          {"files", "i64", std::to_string(x.checksums.size() + 1)}};
}

}  // namespace larql
