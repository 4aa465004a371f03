// Reading a Hugging Face config.json into a ModelConfig: the typed, range-checked key reader the
// generic reader and the family hooks share (model/arch.h ArchRecord::hf_hook), and the generic
// reader itself (config_from_hf_json, declared in model/hf_source.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace larql {

/// Typed access to one JSON object (config.json, or a nested object such as rope_scaling). Every
/// error is Error{Format} naming `where` and the key (or Error{Unsupported} by unsupported()).
class HfConfigReader {
 public:
  /// Parse `text` as a JSON object. Errors: Format (not JSON, not an object).
  HfConfigReader(std::string_view text, std::string where);
  ~HfConfigReader();
  HfConfigReader(HfConfigReader&&) noexcept;

  const std::string& where() const { return where_; }
  /// The key is present and not null.
  bool has(const char* key) const;
  /// An integer in [1, 2^31); `def` when absent (Format when absent without a default).
  int64_t count(const char* key, std::optional<int64_t> def = std::nullopt) const;
  /// A finite number; `def` when absent.
  double number(const char* key, double def) const;
  /// A boolean; `def` when absent.
  bool flag(const char* key, bool def) const;
  /// A string; `def` when absent.
  std::string str(const char* key, const std::string& def) const;
  /// The string at `index` of an array-of-strings key ("" when absent or not a string).
  std::string array_string(const char* key, size_t index) const;
  /// The number at `index` of an array key (Format when it is not one).
  double array_number(const char* key, size_t index) const;
  /// The length of an array key; nullopt when absent, Format when not an array.
  std::optional<size_t> array_size(const char* key) const;
  /// A nested object (rope_scaling); nullopt when absent or null, Format when not an object.
  std::optional<HfConfigReader> object(const char* key) const;

  [[noreturn]] void bad(const std::string& key, const std::string& what) const;
  [[noreturn]] void unsupported(const std::string& key, const std::string& what) const;

  struct Impl;

 private:
  HfConfigReader(std::unique_ptr<Impl> impl, std::string where);
  std::unique_ptr<Impl> impl_;
  std::string where_;
};

}  // namespace larql
