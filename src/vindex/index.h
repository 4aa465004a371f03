// index.json: what a vindex directory holds and how to read it (docs/vindex-format.md).
// The fields of the original's VindexConfig (version 2), plus what it lacked: a
// `vindex_spec_version`, the source's fingerprint, and a SHA-256 of every other file in the
// directory. Fields this reader does not know are kept and written back unchanged.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace larql::vindex {

/// The extract levels, each a superset of the one before.
enum class ExtractLevel { Browse = 0, Attention = 1, Inference = 2, All = 3 };
const char* extract_level_name(ExtractLevel l);
/// nullopt for an unknown name.
std::optional<ExtractLevel> extract_level_from_name(const std::string& s);

/// One layer's rows in gate_vectors.bin: `num_features` rows of hidden_size values at `dtype`,
/// `length` bytes from byte `offset`. A mixture-of-experts layer (num_experts > 0) holds its
/// routed experts' features first, expert e's feature i at e * num_features_per_expert + i, then
/// the shared expert's (the rest of num_features; model/ffn_features.h).
struct LayerSlot {
  int64_t layer = 0;
  int64_t num_features = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  int64_t num_experts = 0;              ///< 0: a dense FFN
  int64_t num_features_per_expert = 0;  ///< a routed expert's features (its expert_ffn)
};

/// The expert feature `feature` of a layer slot belongs to: -1 for a dense layer, the routed
/// expert's id, or -2 for the shared expert (model/ffn_features.h FfnFeatureRef::kSharedExpert).
int64_t expert_of(const LayerSlot& slot, int64_t feature);

/// An inclusive layer range [first, last].
struct Band {
  int64_t first = 0;
  int64_t last = 0;
};

struct Source {
  std::string format;        ///< "gguf" or "safetensors"
  std::string name;          ///< the source's file or directory name (no path)
  std::string fingerprint;   ///< the weight source's fingerprint over its whole content
  std::string extracted_at;  ///< ISO 8601, UTC
  std::string larql_version;
};

struct VindexIndex {
  int64_t version = 2;              ///< the original's layout version
  int64_t vindex_spec_version = 1;  ///< this format's version (docs/vindex-format.md)
  std::string model;                ///< model name (general.name, or the HF repo)
  std::string family;               ///< "gemma3", "llama", ...
  Source source;
  int64_t num_layers = 0, hidden_size = 0, intermediate_size = 0, vocab_size = 0;
  double embed_scale = 1.0;
  ExtractLevel extract_level = ExtractLevel::Browse;
  std::string dtype = "f32";        ///< side-channel floats: "f32", "f16" or "bf16"
  std::string quant = "none";       ///< "none", "keep" (the source's own blocks) or "q4k"
  std::map<std::string, Band> layer_bands;  ///< "syntax", "knowledge", "output"
  std::vector<LayerSlot> layers;    ///< gate_vectors.bin, one per layer in order
  int64_t down_top_k = 10;
  bool has_model_weights = false;
  std::string model_config_json = "{}";  ///< the model's config (object), read by model/
  std::map<std::string, std::string> checksums;  ///< file name -> SHA-256 hex, every file but index.json
  std::string extra_json = "{}";    ///< unknown top-level fields, written back unchanged
};

/// Layer bands for a model without `layer_bands` in its index and without a known size in its
/// family's record (model/arch.h layer_bands_of): syntax = [0, 2L/5), knowledge = [2L/5, 4L/5),
/// output = [4L/5, L) for L >= 8 layers, and no bands (the whole range) below 8.
std::map<std::string, Band> default_layer_bands(int64_t num_layers);

/// Bytes per value of a side-channel dtype name; 0 when unknown.
int dtype_size(const std::string& dtype);

/// Parse and validate index.json text. Errors: Format naming the field (`name` is the file
/// name used in messages): not JSON / not an object, a missing or mistyped required field, an
/// unknown extract_level / dtype / quant, a "version" other than 2 or a vindex_spec_version other
/// than 1 (the message names the supported value), layers not one per layer in order, a slot's
/// num_experts that differs from model_config.moe.n_experts (or experts in a dense model), a slot
/// whose length is not num_features x hidden_size x dtype size, slots that overlap or leave gaps, a band outside the layers, a checksum key that is not a plain file name
/// in the directory ("../x", "a/b", "index.json") or a value that is not 64 hex digits.
VindexIndex parse_index(const std::string& text, const std::string& name = "index.json");
/// Serialise (pretty-printed, keys sorted), unknown fields included.
std::string serialize_index(const VindexIndex& index);
/// Read DIR/index.json (NotFound / Io / Format).
VindexIndex read_index(const std::string& dir);
/// Write DIR/index.json atomically.
void write_index(const std::string& dir, const VindexIndex& index);

/// Whether `name` may name a file of the directory: non-empty, no '/', '\\' or NUL, not "." or
/// "..", not starting with '.'.
bool is_plain_file_name(const std::string& name);

/// What verify() found.
struct VerifyReport {
  int64_t files = 0;               ///< files whose checksum was recomputed
  uint64_t bytes = 0;              ///< their total size
  std::vector<std::string> problems;  ///< empty: the directory is intact
};

/// Check a vindex directory: index.json parses; every file listed in checksums exists, is a
/// regular file and has that SHA-256; every regular file in the directory (but index.json) is
/// listed; gate_vectors.bin, when layers are declared, is as long as the last slot's end. Each
/// problem is one line naming the file. Errors: only index.json's own (NotFound / Format).
VerifyReport verify(const std::string& dir);

}  // namespace larql::vindex
