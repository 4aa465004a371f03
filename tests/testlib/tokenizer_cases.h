// The golden tokenizer cases the peers wrote (tests/tokenizer/data/**/*_cases.jsonl, by
// scripts/gen_tokenizer_cases.py and scripts/gen_bpe_tokenizer_cases.py): one JSON object a line
// with the case's text (or its bytes as text_hex), the ids with and without special-token
// parsing, and llama.cpp's detokenisations when the peer is llama.cpp.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace larql::testing {

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

struct TokenizerCase {
  std::string name, text;
  bool valid_utf8 = true;  ///< false: the case was given as raw bytes ("text_hex")
  std::vector<int32_t> ids_special, ids_plain;
  std::optional<std::string> detok;        ///< llama.cpp detokenize, specials kept
  std::optional<std::string> detok_plain;  ///< llama.cpp detokenize, remove_special, no unparse
};

/// Every case of a .jsonl file (a failure is added when it cannot be opened).
inline std::vector<TokenizerCase> load_tokenizer_cases(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ADD_FAILURE() << "cannot open " << path;
  std::vector<TokenizerCase> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    TokenizerCase c;
    c.name = j.at("name").get<std::string>();
    if (j.contains("text")) {
      c.text = j.at("text").get<std::string>();
    } else {
      c.text = from_hex(j.at("text_hex").get<std::string>());
      c.valid_utf8 = false;
    }
    c.ids_special = j.at("ids_special").get<std::vector<int32_t>>();
    c.ids_plain = j.at("ids_plain").get<std::vector<int32_t>>();
    if (j.contains("detok_hex")) c.detok = from_hex(j.at("detok_hex").get<std::string>());
    if (j.contains("detok_plain_hex")) c.detok_plain = from_hex(j.at("detok_plain_hex").get<std::string>());
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace larql::testing
