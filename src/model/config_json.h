// A ModelConfig as JSON and back: what a vindex's index.json stores as `model_config`
// (docs/vindex-format.md), so a vindex runs without the file it was extracted from.
#pragma once

#include <string>
#include <string_view>

#include "model/config.h"

namespace larql {

/// Every field of the config (per-layer RoPE and windows included), as a JSON object.
std::string config_to_json(const ModelConfig& c);

/// Read it back. Errors: Format naming the field (`where` prefixes the message): not an object,
/// a missing or mistyped field, a count outside [1, 2^31) (heads, widths, layers), n_heads not a
/// multiple of n_kv_heads, an odd head_dim, a non-positive epsilon, `layers` not one per layer,
/// an unknown activation or RoPE form; Unsupported for an architecture this build cannot run.
ModelConfig config_from_json(std::string_view json_text, const std::string& where);

}  // namespace larql
