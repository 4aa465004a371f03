#include "vindex/index.h"

#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/mmap.h"
#include "vindex/down_meta_file.h"
#include "vindex/edited_slots.h"
#include "vindex/labels.h"
#include "vindex/sha256.h"

namespace larql::vindex {

namespace {

using nlohmann::json;

constexpr int64_t kLayoutVersion = 2;  // index.json "version": the original's layout
constexpr const char* kLevels[] = {"browse", "attention", "inference", "all"};
const std::set<std::string> kKnown = {
    "version", "vindex_spec_version", "model", "family", "source", "num_layers", "hidden_size",
    "intermediate_size", "vocab_size", "embed_scale", "extract_level", "dtype", "quant", "layer_bands",
    "layers", "down_top_k", "has_model_weights", "model_config", "checksums"};

[[noreturn]] void bad(const std::string& name, const std::string& what) { throw Error(ErrorKind::Format, name + ": " + what); }

const json& need(const json& j, const char* key, const std::string& name) {
  if (!j.contains(key)) bad(name, std::string("missing field \"") + key + "\"");
  return j.at(key);
}

int64_t need_int(const json& j, const char* key, const std::string& name, int64_t lo, int64_t hi) {
  const json& v = need(j, key, name);
  if (!v.is_number_integer()) bad(name, std::string("\"") + key + "\" must be an integer, found " + v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad(name, std::string("\"") + key + "\" = " + std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

std::string need_string(const json& j, const char* key, const std::string& name) {
  const json& v = need(j, key, name);
  if (!v.is_string()) bad(name, std::string("\"") + key + "\" must be a string, found " + v.dump());
  return v.get<std::string>();
}

std::string opt_string(const json& j, const char* key, const std::string& name) {
  return j.contains(key) ? need_string(j, key, name) : std::string();
}

bool is_hex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// The experts of every layer slot against the model's: model_config.moe.n_experts (a mixture of
// experts) or no model_config.moe (a dense FFN), naming the layer and both values.
void check_experts(const VindexIndex& x, const json& mc, const std::string& name) {
  int64_t n_experts = 0;
  if (mc.contains("moe")) {
    const json& moe = mc["moe"];
    if (!moe.is_object() || !moe.contains("n_experts") || !moe["n_experts"].is_number_integer())
      bad(name, "model_config.moe.n_experts must be an integer (the model's experts per layer)");
    n_experts = moe["n_experts"].get<int64_t>();
  }
  for (const LayerSlot& s : x.layers) {
    if (s.num_experts == n_experts) continue;
    const std::string at = "layers[" + std::to_string(s.layer) + "]";
    if (n_experts == 0)
      bad(name, at + ".num_experts = " + std::to_string(s.num_experts) +
                    ", but model_config has no moe (a dense model: a layer slot has no experts)");
    if (s.num_experts == 0)
      bad(name, at + " has no num_experts, but model_config.moe.n_experts = " + std::to_string(n_experts) +
                    " (every layer slot of a mixture of experts lists them)");
    bad(name, at + ".num_experts = " + std::to_string(s.num_experts) + " differs from model_config.moe.n_experts = " +
                  std::to_string(n_experts));
  }
}

}  // namespace

const char* extract_level_name(ExtractLevel l) { return kLevels[static_cast<int>(l)]; }

std::optional<ExtractLevel> extract_level_from_name(const std::string& s) {
  for (int i = 0; i < 4; ++i)
    if (s == kLevels[i]) return static_cast<ExtractLevel>(i);
  return std::nullopt;
}

std::map<std::string, Band> default_layer_bands(int64_t L) {
  if (L < 8) return {};
  const int64_t a = 2 * L / 5, b = 4 * L / 5;
  return {{"syntax", {0, a - 1}}, {"knowledge", {a, b - 1}}, {"output", {b, L - 1}}};
}

int64_t expert_of(const LayerSlot& slot, int64_t feature) {
  if (slot.num_experts <= 0 || slot.num_features_per_expert <= 0) return -1;
  const int64_t e = feature / slot.num_features_per_expert;
  return e < slot.num_experts ? e : -2;
}

int dtype_size(const std::string& dtype) {
  if (dtype == "f32") return 4;
  if (dtype == "f16" || dtype == "bf16") return 2;
  return 0;
}

bool is_plain_file_name(const std::string& n) {
  return !n.empty() && n != "." && n != ".." && n[0] != '.' && n.find('/') == std::string::npos &&
         n.find('\\') == std::string::npos && n.find('\0') == std::string::npos;
}

VindexIndex parse_index(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(name, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad(name, "not a JSON object");
  VindexIndex x;
  x.version = need_int(j, "version", name, 0, int64_t{1} << 40);
  if (x.version != kLayoutVersion)
    bad(name, "\"version\" = " + std::to_string(x.version) + " is not supported (this larql reads layout version " +
                  std::to_string(kLayoutVersion) + ")");
  x.vindex_spec_version = need_int(j, "vindex_spec_version", name, 0, 1000);
  if (x.vindex_spec_version != 1)
    bad(name, "vindex_spec_version " + std::to_string(x.vindex_spec_version) + " is not supported (this larql reads 1)");
  x.model = need_string(j, "model", name);
  x.family = need_string(j, "family", name);
  if (j.contains("source")) {
    const json& s = j["source"];
    if (!s.is_object()) bad(name, "\"source\" must be an object");
    x.source = Source{opt_string(s, "format", name), opt_string(s, "name", name), opt_string(s, "fingerprint", name),
                      opt_string(s, "extracted_at", name), opt_string(s, "larql_version", name)};
  }
  constexpr int64_t kBig = int64_t{1} << 40;
  x.num_layers = need_int(j, "num_layers", name, 1, 100000);
  x.hidden_size = need_int(j, "hidden_size", name, 1, kBig);
  x.intermediate_size = need_int(j, "intermediate_size", name, 0, kBig);
  x.vocab_size = need_int(j, "vocab_size", name, 1, kBig);
  const json& es = need(j, "embed_scale", name);
  if (!es.is_number()) bad(name, "\"embed_scale\" must be a number");
  x.embed_scale = es.get<double>();
  const auto level = extract_level_from_name(need_string(j, "extract_level", name));
  if (!level) bad(name, "unknown extract_level \"" + j["extract_level"].get<std::string>() + "\" (browse, attention, inference, all)");
  x.extract_level = *level;
  x.dtype = need_string(j, "dtype", name);
  if (dtype_size(x.dtype) == 0) bad(name, "unknown dtype \"" + x.dtype + "\" (f32, f16, bf16)");
  x.quant = need_string(j, "quant", name);
  if (x.quant != "none" && x.quant != "keep" && x.quant != "q4k") bad(name, "unknown quant \"" + x.quant + "\" (none, keep, q4k)");
  x.down_top_k = need_int(j, "down_top_k", name, 1, 4096);
  const json& hw = need(j, "has_model_weights", name);
  if (!hw.is_boolean()) bad(name, "\"has_model_weights\" must be true or false");
  x.has_model_weights = hw.get<bool>();
  if (j.contains("layer_bands")) {
    const json& b = j["layer_bands"];
    if (!b.is_object()) bad(name, "\"layer_bands\" must be an object");
    for (const auto& [band, range] : b.items()) {
      if (!range.is_array() || range.size() != 2 || !range[0].is_number_integer() || !range[1].is_number_integer())
        bad(name, "layer_bands." + band + " must be [first, last]");
      const Band r{range[0].get<int64_t>(), range[1].get<int64_t>()};
      if (r.first < 0 || r.first > r.last || r.last >= x.num_layers)
        bad(name, "layer_bands." + band + " = [" + std::to_string(r.first) + ", " + std::to_string(r.last) +
                      "] is not a range of layers 0.." + std::to_string(x.num_layers - 1));
      x.layer_bands[band] = r;
    }
  }
  const json& layers = need(j, "layers", name);
  if (!layers.is_array()) bad(name, "\"layers\" must be an array");
  if (!layers.empty() && static_cast<int64_t>(layers.size()) != x.num_layers)
    bad(name, "\"layers\" has " + std::to_string(layers.size()) + " entries for num_layers " + std::to_string(x.num_layers));
  uint64_t end = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string where = name + " layers[" + std::to_string(i) + "]";
    const json& l = layers[i];
    if (!l.is_object()) bad(where, "not an object");
    LayerSlot s;
    s.layer = need_int(l, "layer", where, 0, x.num_layers - 1);
    if (s.layer != static_cast<int64_t>(i)) bad(where, "is layer " + std::to_string(s.layer) + "; layers must be listed in order");
    s.num_features = need_int(l, "num_features", where, 0, kBig);
    s.offset = static_cast<uint64_t>(need_int(l, "offset", where, 0, int64_t{1} << 50));
    s.length = static_cast<uint64_t>(need_int(l, "length", where, 0, int64_t{1} << 50));
    const uint64_t want = static_cast<uint64_t>(s.num_features) * static_cast<uint64_t>(x.hidden_size) * static_cast<uint64_t>(dtype_size(x.dtype));
    if (s.length != want)
      bad(where, "length " + std::to_string(s.length) + " is not num_features x hidden_size x " + std::to_string(dtype_size(x.dtype)) +
                     " = " + std::to_string(want));
    if (s.offset != end) bad(where, "offset " + std::to_string(s.offset) + " does not follow the previous slot (ends at " + std::to_string(end) + ")");
    end = s.offset + s.length;
    if (l.contains("num_experts") || l.contains("num_features_per_expert")) {
      s.num_experts = need_int(l, "num_experts", where, 1, 1 << 16);
      s.num_features_per_expert = need_int(l, "num_features_per_expert", where, 1, kBig);
      if (s.num_experts * s.num_features_per_expert > s.num_features)
        bad(where, "num_experts x num_features_per_expert = " + std::to_string(s.num_experts * s.num_features_per_expert) +
                       " is more than num_features " + std::to_string(s.num_features));
    }
    x.layers.push_back(s);
  }
  if (j.contains("model_config")) {
    const json& mc = j["model_config"];
    if (!mc.is_object()) bad(name, "\"model_config\" must be an object");
    x.model_config_json = mc.dump();
    check_experts(x, mc, name);
  }
  if (j.contains("checksums")) {
    const json& c = j["checksums"];
    if (!c.is_object()) bad(name, "\"checksums\" must be an object");
    for (const auto& [file, sum] : c.items()) {
      if (!is_plain_file_name(file) || file == "index.json")
        bad(name, "checksums names \"" + file + "\", which is not a file of the directory");
      if (!sum.is_string() || !is_hex64(sum.get<std::string>()))
        bad(name, "checksums[\"" + file + "\"] is not a SHA-256 (64 lower-case hex digits)");
      x.checksums[file] = sum.get<std::string>();
    }
  }
  json extra = json::object();
  for (const auto& [k, v] : j.items())
    if (!kKnown.count(k)) extra[k] = v;
  x.extra_json = extra.dump();
  return x;
}

std::string serialize_index(const VindexIndex& x) {
  json j = json::parse(x.extra_json);
  j["version"] = x.version;
  j["vindex_spec_version"] = x.vindex_spec_version;
  j["model"] = x.model;
  j["family"] = x.family;
  j["source"] = {{"format", x.source.format}, {"name", x.source.name}, {"fingerprint", x.source.fingerprint},
                 {"extracted_at", x.source.extracted_at}, {"larql_version", x.source.larql_version}};
  j["num_layers"] = x.num_layers;
  j["hidden_size"] = x.hidden_size;
  j["intermediate_size"] = x.intermediate_size;
  j["vocab_size"] = x.vocab_size;
  j["embed_scale"] = x.embed_scale;
  j["extract_level"] = extract_level_name(x.extract_level);
  j["dtype"] = x.dtype;
  j["quant"] = x.quant;
  json bands = json::object();
  for (const auto& [k, b] : x.layer_bands) bands[k] = {b.first, b.last};
  j["layer_bands"] = bands;
  json layers = json::array();
  for (const auto& s : x.layers) {
    json l = {{"layer", s.layer}, {"num_features", s.num_features}, {"offset", s.offset}, {"length", s.length}};
    if (s.num_experts > 0) {
      l["num_experts"] = s.num_experts;
      l["num_features_per_expert"] = s.num_features_per_expert;
    }
    layers.push_back(std::move(l));
  }
  j["layers"] = layers;
  j["down_top_k"] = x.down_top_k;
  j["has_model_weights"] = x.has_model_weights;
  j["model_config"] = json::parse(x.model_config_json);
  j["checksums"] = x.checksums;
  return j.dump(2) + "\n";
}

VindexIndex read_index(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "index.json").string();
  const MappedFile m = MappedFile::open(path);
  if (m.size() > (64u << 20)) bad(path, "larger than 64 MiB");
  return parse_index(std::string(reinterpret_cast<const char*>(m.data()), m.size()), path);
}

void write_index(const std::string& dir, const VindexIndex& index) {
  write_file_atomic((std::filesystem::path(dir) / "index.json").string(), serialize_index(index));
}

VerifyReport verify(const std::string& dir) {
  namespace fs = std::filesystem;
  const VindexIndex x = read_index(dir);
  VerifyReport r;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (n == "index.json") continue;
    if (!entry.is_regular_file()) {
      r.problems.push_back(n + ": not a regular file");
      continue;
    }
    if (!x.checksums.count(n)) r.problems.push_back(n + ": not listed in index.json's checksums");
  }
  if (ec) r.problems.push_back(dir + ": cannot list the directory: " + ec.message());
  for (const auto& [file, want] : x.checksums) {
    const fs::path p = fs::path(dir) / file;
    if (!fs::is_regular_file(p, ec)) {
      r.problems.push_back(file + ": missing");
      continue;
    }
    try {
      const std::string got = sha256_file(p.string());
      ++r.files;
      r.bytes += fs::file_size(p, ec);
      if (got != want) r.problems.push_back(file + ": SHA-256 " + got + " differs from index.json's " + want);
    } catch (const Error& e) {
      r.problems.push_back(file + ": " + e.what());
    }
  }
  // Sizes and headers against what index.json declares.
  auto listed = [&](const char* f) { return x.checksums.count(f) != 0 && fs::is_regular_file(fs::path(dir) / f, ec); };
  if (listed("embeddings.bin")) {
    const uint64_t need = static_cast<uint64_t>(x.vocab_size) * static_cast<uint64_t>(x.hidden_size) *
                          static_cast<uint64_t>(dtype_size(x.dtype));
    const uint64_t got = fs::file_size(fs::path(dir) / "embeddings.bin", ec);
    if (got != need)
      r.problems.push_back("embeddings.bin: " + std::to_string(got) + " bytes; vocab_size " + std::to_string(x.vocab_size) +
                           " x hidden_size " + std::to_string(x.hidden_size) + " at " + x.dtype + " needs " + std::to_string(need));
  }
  if (listed("down_meta.bin")) {
    try {
      const DownMetaFile dm = DownMetaFile::open((fs::path(dir) / "down_meta.bin").string());
      if (static_cast<int64_t>(dm.num_layers()) != x.num_layers)
        r.problems.push_back("down_meta.bin: " + std::to_string(dm.num_layers()) + " layers; index.json's num_layers is " +
                             std::to_string(x.num_layers));
      if (static_cast<int64_t>(dm.top_k()) != x.down_top_k)
        r.problems.push_back("down_meta.bin: top_k " + std::to_string(dm.top_k()) + "; index.json's down_top_k is " +
                             std::to_string(x.down_top_k));
    } catch (const Error& e) {
      r.problems.push_back(std::string("down_meta.bin: ") + e.what());
    }
  }
  if (listed("feature_labels.json")) {
    try {
      const FeatureLabels fl = read_feature_labels(dir);
      for (const auto& f : fl.features)
        if (f.layer >= x.num_layers || (static_cast<size_t>(f.layer) < x.layers.size() &&
                                        f.feature >= x.layers[static_cast<size_t>(f.layer)].num_features)) {
          r.problems.push_back("feature_labels.json: layer " + std::to_string(f.layer) + " feature " +
                               std::to_string(f.feature) + " is outside the vindex");
          break;
        }
    } catch (const Error& e) {
      r.problems.push_back(std::string("feature_labels.json: ") + e.what());
    }
  }
  if (listed("edits.json")) {
    try {
      for (const auto& e : read_edited_slots(dir))
        if (e.layer >= x.num_layers || e.feature >= x.intermediate_size) {
          r.problems.push_back("edits.json: layer " + std::to_string(e.layer) + " feature " + std::to_string(e.feature) +
                               " is outside the model");
          break;
        }
    } catch (const Error& e) {
      r.problems.push_back(std::string("edits.json: ") + e.what());
    }
  }
  // The level and the weights flag against the files present.
  std::vector<const char*> level_needs;
  if (x.extract_level >= ExtractLevel::Attention) level_needs = {"attn_weights.bin", "norms.bin", "weight_manifest.json"};
  if (x.extract_level >= ExtractLevel::Inference) {
    level_needs.push_back("ffn_weights.bin");
    level_needs.push_back("embed_weights.bin");
  }
  for (const char* f : level_needs)
    if (!x.checksums.count(f))
      r.problems.push_back(std::string("extract_level ") + extract_level_name(x.extract_level) + " needs " + f +
                           ", which index.json does not list");
  if (x.has_model_weights && !x.checksums.count("weight_manifest.json"))
    r.problems.push_back("has_model_weights is true but index.json lists no weight_manifest.json");
  if (!(x.embed_scale > 0)) r.problems.push_back("embed_scale " + std::to_string(x.embed_scale) + " is not positive");
  if (!x.layers.empty()) {
    const fs::path g = fs::path(dir) / "gate_vectors.bin";
    const uint64_t need = x.layers.back().offset + x.layers.back().length;
    if (!fs::is_regular_file(g, ec)) {
      r.problems.push_back("gate_vectors.bin: missing, but index.json declares " + std::to_string(x.layers.size()) + " layer slots");
    } else if (fs::file_size(g, ec) != need) {
      r.problems.push_back("gate_vectors.bin: " + std::to_string(fs::file_size(g, ec)) + " bytes; the layer slots need " + std::to_string(need));
    }
  }
  return r;
}

}  // namespace larql::vindex
