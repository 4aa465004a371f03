#include "model/gguf_source.h"

#include <cstdio>
#include <variant>

#include "formats/gguf.h"
#include "model/arch.h"
#include "util/error.h"
#include "util/hash.h"

namespace larql {
namespace {

SourceTensor to_source(const GgufTensor& t) { return SourceTensor{t.name, t.type, t.dims, t.data, t.nbytes}; }

const char* type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: return "u8";
    case GgufValueType::INT8: return "i8";
    case GgufValueType::UINT16: return "u16";
    case GgufValueType::INT16: return "i16";
    case GgufValueType::UINT32: return "u32";
    case GgufValueType::INT32: return "i32";
    case GgufValueType::FLOAT32: return "f32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "str";
    case GgufValueType::ARRAY: return "arr";
    case GgufValueType::UINT64: return "u64";
    case GgufValueType::INT64: return "i64";
    case GgufValueType::FLOAT64: return "f64";
  }
  return "?";
}

std::string render(const GgufValue& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.value)) return std::to_string(*u);
  if (const auto* i = std::get_if<int64_t>(&v.value)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v.value)) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9g", *d);
    return buf;
  }
  if (const auto* b = std::get_if<bool>(&v.value)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&v.value)) return *s;
  const auto& a = std::get<GgufArray>(v.value);
  constexpr uint64_t kShown = 8;
  std::string out = "[";
  for (uint64_t i = 0; i < a.size() && i < kShown; ++i) {
    const GgufValue e = a.at(i);
    const std::string r = render(e);
    out += (i ? ", " : "") + (e.type == GgufValueType::STRING ? "\"" + r + "\"" : r);
  }
  if (a.size() > kShown) out += ", ...";
  return out + "]";
}

}  // namespace

GgufSource::GgufSource(std::shared_ptr<const GgufFile> file, const ArchRecord& arch, ModelConfig config)
    : file_(std::move(file)), arch_(&arch), config_(std::move(config)) {
  const GgufFile& f = *file_;
  // The special ids only (the full vocabulary is decoded on demand by vocabulary()).
  const auto id = [&](const char* key) -> int32_t {
    const auto v = f.find(key);
    if (!v) return -1;
    if (const auto* u = std::get_if<uint64_t>(&v->value)) return *u < static_cast<uint64_t>(config_.vocab) ? static_cast<int32_t>(*u) : -1;
    if (const auto* s = std::get_if<int64_t>(&v->value)) return *s >= 0 && *s < config_.vocab ? static_cast<int32_t>(*s) : -1;
    throw Error(ErrorKind::Format, f.path() + ": metadata key " + key + " is not an integer");
  };
  specials_.bos = id("tokenizer.ggml.bos_token_id");
  specials_.eos = id("tokenizer.ggml.eos_token_id");
  specials_.eot = id("tokenizer.ggml.eot_token_id");
  specials_.pad = id("tokenizer.ggml.padding_token_id");
  specials_.unk = id("tokenizer.ggml.unknown_token_id");
  specials_.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
  // Every byte of the file: any change to a weight, the vocabulary or the metadata shows.
  char buf[64];
  std::snprintf(buf, sizeof buf, "xxh3-%s-%zu", hex64(xxh3_64(f.bytes(), f.file_size())).c_str(), f.file_size());
  fingerprint_ = buf;
  f.release_pages();  // the hash read every page: keep resident only what the model part uses
}

std::shared_ptr<GgufSource> GgufSource::from_file(std::shared_ptr<const GgufFile> file) {
  ModelConfig c = config_from_gguf(*file);  // Unsupported for an architecture without a record
  const ArchRecord& arch = require_arch(c.arch, file->path());
  return std::make_shared<GgufSource>(std::move(file), arch, std::move(c));
}

std::shared_ptr<GgufSource> GgufSource::open(const std::string& path) { return from_file(GgufFile::open(path)); }

const std::string& GgufSource::path() const { return file_->path(); }

std::string GgufSource::format() const { return "GGUF v" + std::to_string(file_->version()); }

std::string GgufSource::tensor_name(TensorRole role, int64_t layer) const {
  if (is_layer_role(role) != (layer >= 0) || layer >= config_.n_layers)
    throw Error(ErrorKind::InvalidArgument, "tensor role " + std::to_string(static_cast<int>(role)) + " at layer " +
                                                std::to_string(layer) + " (the model has " +
                                                std::to_string(config_.n_layers) + " layers)");
  if (const auto part = fused_rows(*arch_, config_, role, false)) {
    const std::string fused = llama_cpp_tensor_name(part->suffix, layer);
    if (file_->find_tensor(fused) != nullptr) return fused;
  }
  return gguf_tensor_name(role, layer);
}

std::optional<SourceTensor> GgufSource::tensor(TensorRole role, int64_t layer) const {
  const std::string name = tensor_name(role, layer);
  const GgufTensor* t = file_->find_tensor(name);
  if (t == nullptr) return std::nullopt;
  if (const auto part = fused_rows(*arch_, config_, role, false); part && name == llama_cpp_tensor_name(part->suffix, layer))
    return slice_rows(to_source(*t), *part, file_->path());
  return to_source(*t);
}

std::vector<SourceTensor> GgufSource::tensors() const {
  std::vector<SourceTensor> out;
  out.reserve(file_->tensors().size());
  for (const GgufTensor& t : file_->tensors()) out.push_back(to_source(t));
  return out;
}

VocabData GgufSource::vocabulary() const { return vocab_from_gguf(*file_); }

std::vector<MetadataEntry> GgufSource::metadata() const {
  std::vector<MetadataEntry> out;
  out.reserve(file_->metadata_count());
  for (size_t i = 0; i < file_->metadata_count(); ++i) {
    const GgufValue v = file_->metadata_value(i);
    std::string type = type_name(v.type);
    if (const auto* a = std::get_if<GgufArray>(&v.value))
      type = std::string("arr[") + type_name(a->elem_type()) + "," + std::to_string(a->size()) + "]";
    out.push_back({std::string(file_->metadata_key(i)), type, render(v)});
  }
  return out;
}

uint64_t GgufSource::byte_size() const { return file_->file_size(); }

bool is_layer_role(TensorRole role) {
  return role != TensorRole::TokenEmbd && role != TensorRole::Output && role != TensorRole::OutputNorm;
}

}  // namespace larql
