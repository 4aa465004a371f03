// Engine spec strings (`name` or `name:key=value,...`) and the registry table that parsing,
// validation, `--help` and `larql engines` all read. Grammar: docs/engines.md "Spec strings".
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kv/engine.h"

namespace larql {

class Forward;

enum class KeyType { Int, Float, String, Enum };

struct EngineKey {
  std::string name;
  KeyType type = KeyType::Int;
  std::string default_value;  ///< "" = unbounded / model's own
  std::string description;
  std::vector<std::string> allowed;  ///< for Enum
  int64_t min_int = 1;               ///< for Int: the smallest accepted value
};

/// A parsed, validated spec: canonical engine name plus the keys the user set.
struct EngineSpec {
  std::string name;
  std::map<std::string, std::string> params;
  /// "standard:window=512" (keys sorted); name alone without params.
  std::string to_string() const;
  /// Value of an Int key, or `fallback` when unset.
  int64_t get_int(const std::string& key, int64_t fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  /// Value of a Float key, or `fallback` when unset.
  double get_double(const std::string& key, double fallback) const;
};

struct EngineEntry {
  std::string name;
  std::vector<std::string> aliases;
  std::vector<EngineKey> keys;
  std::string description;  ///< one line
  std::string contract;     ///< one line: how its logits relate to standard's
  std::function<std::unique_ptr<Engine>(std::shared_ptr<Forward>, const EngineSpec&)> make;
  /// Aliases that imply key values ("tq3" → bits=3): alias → {key → value}. Parsing an alias
  /// listed here sets those keys (spec.to_string() shows them); setting such a key explicitly
  /// to another value is Error{InvalidArgument}.
  std::map<std::string, std::map<std::string, std::string>> alias_params = {};
  /// Specs beyond the defaults that exercise what the keys change (an eviction window, a cold
  /// tier, a codec): the engine-wide tests (tests/kv/chunk_invariance_test.cc) run the default
  /// spec and each of these; `larql engines` shows them.
  std::vector<std::string> examples = {};
};

/// Every engine this build has, in ladder order.
const std::vector<EngineEntry>& engine_registry();

/// Parse one spec. Errors: Error{InvalidArgument} naming the unknown engine (and listing the
/// known ones), the unknown key (and the engine's keys), or the value that does not parse
/// (and what is accepted).
EngineSpec parse_engine_spec(std::string_view spec);

/// Parse a list split on ';' (or on ',' where the next piece starts a new engine name).
std::vector<EngineSpec> parse_engine_list(std::string_view specs);

/// Build an engine for a parsed spec over a Forward (model + threads).
std::unique_ptr<Engine> make_engine(const EngineSpec& spec, std::shared_ptr<Forward> forward);

}  // namespace larql
