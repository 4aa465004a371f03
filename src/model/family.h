// A model family as llama.cpp's GGUF files store it: how to read the config from metadata and what
// each tensor role is called. One family file per architecture (gemma3.cc, llama.cc) defines one
// GgufFamily; config.cc lists them. docs/architecture.md ("Weight sources and family files").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/weight_source.h"

namespace larql {

class GgufFile;

struct GgufFamily {
  const char* arch;  ///< general.architecture
  /// The config from metadata, not yet validated (config_from_gguf validates it).
  ModelConfig (*config)(const GgufFile& file);
  /// The file's tensor name of `role` (layer: index for per-layer roles, -1 otherwise); "" for a
  /// role the family never stores.
  std::string (*tensor_name)(TensorRole role, int64_t layer);
};

const GgufFamily& gemma3_family();
const GgufFamily& llama_family();

/// Every family this build runs, in supported_architectures() order.
const std::vector<const GgufFamily*>& gguf_families();
/// The family of `arch`, or nullptr.
const GgufFamily* find_gguf_family(std::string_view arch);

/// llama.cpp's name of a tensor: "blk.N.<suffix>" for per-layer roles (layer >= 0), `suffix`
/// itself otherwise (gguf-py's TENSOR_NAMES / llama.cpp LLM_TENSOR_NAMES).
std::string llama_cpp_tensor_name(const char* suffix, int64_t layer);

/// A count from metadata: nullopt if absent; Error{Format} naming the key above kMaxCount (so it
/// fits int64 and nothing is sized by it before validate_config checks its real range).
std::optional<int64_t> read_count(const GgufFile& f, const std::string& key);
/// read_count, Error{Format} naming the key when absent.
int64_t require_count(const GgufFile& f, const std::string& key);

}  // namespace larql
