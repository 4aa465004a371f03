#include "tokenizer/hf_json.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "util/error.h"
#include "util/text_file.h"

namespace larql {

namespace fs = std::filesystem;

namespace {

using nlohmann::json;

const char* kSpace = "\xE2\x96\x81";  // U+2581

[[noreturn]] void bad(const std::string& what) { throw Error(ErrorKind::Format, "tokenizer.json: " + what); }

bool is_byte_piece(const std::string& s) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

std::string token_or_empty(const VocabData& v, int32_t id) {
  return id >= 0 && id < static_cast<int32_t>(v.tokens.size()) ? v.tokens[static_cast<size_t>(id)] : std::string();
}

}  // namespace

HfTokenizerFiles to_hf_tokenizer(const VocabData& v) {
  if (v.model != "llama")
    throw Error(ErrorKind::Unsupported, "tokenizer model \"" + v.model + "\" cannot be written as tokenizer.json (only SentencePiece \"llama\")");
  const size_t n = v.tokens.size();
  if (v.scores.size() != n || v.types.size() != n)
    throw Error(ErrorKind::InvalidArgument, "vocabulary arrays differ in length");
  std::unordered_map<std::string, int32_t> normal;
  normal.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (v.types[i] == TokenType::Normal) normal.emplace(v.tokens[i], static_cast<int32_t>(i));
  struct Merge {
    float score;
    int32_t left, right;
  };
  std::vector<Merge> merges;
  for (size_t i = 0; i < n; ++i) {
    if (v.types[i] != TokenType::Normal) continue;
    const std::string& piece = v.tokens[i];
    const size_t first = merges.size();
    for (size_t k = 1; k < piece.size(); ++k) {
      const auto l = normal.find(piece.substr(0, k));
      if (l == normal.end()) continue;
      const auto r = normal.find(piece.substr(k));
      if (r == normal.end()) continue;
      merges.push_back({v.scores[i], l->second, r->second});
    }
    std::sort(merges.begin() + static_cast<std::ptrdiff_t>(first), merges.end(),
              [](const Merge& a, const Merge& b) { return a.left != b.left ? a.left < b.left : a.right < b.right; });
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });

  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  json added = json::array();
  for (size_t i = 0; i < n; ++i) {
    if (v.types[i] != TokenType::Control && v.types[i] != TokenType::UserDefined) continue;
    added.push_back({{"id", i}, {"content", v.tokens[i]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", v.types[i] == TokenType::Control}});
  }
  j["added_tokens"] = added;
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}};
  j["pre_tokenizer"] = nullptr;
  const std::string bos = token_or_empty(v, v.bos_id);
  if (v.add_bos && !bos.empty()) {
    const json sp = {{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
    const json a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
    const json b = {{"Sequence", {{"id", "B"}, {"type_id", 0}}}};
    j["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", json::array({sp, a})},
                           {"pair", json::array({sp, a, b})},
                           {"special_tokens", {{bos, {{"id", bos}, {"ids", {v.bos_id}}, {"tokens", {bos}}}}}}};
  } else {
    j["post_processor"] = nullptr;
  }
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                                                    {{"type", "ByteFallback"}},
                                                    {{"type", "Fuse"}}})}};
  // The vocabulary and the merges (~500k) are written as text, not built as a JSON document
  // (that would cost ~20x their size in memory during an extract).
  json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", v.unk_id >= 0 ? json(token_or_empty(v, v.unk_id)) : json(nullptr)},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", true},
                {"byte_fallback", true},
                {"ignore_merges", false}};
  std::string text = model.dump();
  text.pop_back();  // the closing '}'
  text += ",\"vocab\":{";
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) text += ',';
    text += json(v.tokens[i]).dump();
    text += ':';
    text += std::to_string(i);
  }
  text += "},\"merges\":[";
  for (size_t i = 0; i < merges.size(); ++i) {
    if (i > 0) text += ',';
    text += '[';
    text += json(v.tokens[static_cast<size_t>(merges[i].left)]).dump();
    text += ',';
    text += json(v.tokens[static_cast<size_t>(merges[i].right)]).dump();
    text += ']';
  }
  text += "]}";
  std::string top = j.dump();
  top.pop_back();
  top += ",\"model\":";
  top += text;
  top += '}';

  json c;
  auto put = [&](const char* key, int32_t id) {
    if (id >= 0) c[key] = token_or_empty(v, id);
  };
  put("bos_token", v.bos_id);
  put("eos_token", v.eos_id);
  put("unk_token", v.unk_id);
  put("pad_token", v.pad_id);
  put("eot_token", v.eot_id);
  c["add_bos_token"] = v.add_bos;
  c["add_eos_token"] = v.add_eos;
  c["add_space_prefix"] = v.add_space_prefix;
  if (!v.chat_template.empty()) c["chat_template"] = v.chat_template;
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  return HfTokenizerFiles{std::move(top), c.dump(2) + "\n"};
}

VocabData vocab_from_directory(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (fs::is_regular_file(d / "tokenizer.gguf", ec)) return vocab_from_gguf(*GgufFile::open((d / "tokenizer.gguf").string()));
  if (!fs::is_regular_file(d / "tokenizer.json", ec))
    throw Error(ErrorKind::NotFound, dir + ": no tokenizer.gguf or tokenizer.json (a vindex holds its vocabulary there)");
  const std::string config = fs::is_regular_file(d / "tokenizer_config.json", ec)
                                 ? read_text_file((d / "tokenizer_config.json").string(), "tokenizer_config.json", 64u << 20)
                                 : std::string();
  return vocab_from_hf_tokenizer(read_text_file((d / "tokenizer.json").string(), "tokenizer.json", 256u << 20), config);
}

VocabData vocab_from_hf_tokenizer(std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  json j;
  try {
    j = json::parse(tokenizer_json.begin(), tokenizer_json.end());
  } catch (const json::exception& e) {
    bad(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) bad("no \"model\" object");
  const json& m = j["model"];
  if (!m.contains("type") || m["type"] != "BPE")
    throw Error(ErrorKind::Unsupported, "tokenizer.json: model type " + (m.contains("type") ? m["type"].dump() : std::string("(none)")) +
                                            " is not supported (only BPE)");
  if (!m.contains("vocab") || !m["vocab"].is_object()) bad("model.vocab is not an object");
  const size_t n = m["vocab"].size();
  if (n == 0) bad("model.vocab is empty");
  VocabData v;
  v.model = "llama";
  v.tokens.assign(n, std::string());
  v.scores.assign(n, 0.0f);
  v.types.assign(n, TokenType::Normal);
  std::vector<bool> seen(n, false);
  for (const auto& [piece, idv] : m["vocab"].items()) {
    if (!idv.is_number_integer() || idv.get<int64_t>() < 0 || idv.get<int64_t>() >= static_cast<int64_t>(n))
      bad("model.vocab[\"" + piece + "\"] = " + idv.dump() + " is not an id in [0, " + std::to_string(n) + ")");
    const auto id = static_cast<size_t>(idv.get<int64_t>());
    if (seen[id]) bad("id " + std::to_string(id) + " is used twice in model.vocab");
    seen[id] = true;
    v.tokens[id] = piece;
    if (is_byte_piece(piece)) v.types[id] = TokenType::Byte;
  }
  std::unordered_map<std::string, int32_t> index;
  index.reserve(n);
  for (size_t i = 0; i < n; ++i) index.emplace(v.tokens[i], static_cast<int32_t>(i));
  if (j.contains("added_tokens")) {
    if (!j["added_tokens"].is_array()) bad("added_tokens is not an array");
    for (const json& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string())
        bad("an added_tokens entry lacks an integer id or a content string");
      const int64_t id = a["id"].get<int64_t>();
      if (id < 0 || id >= static_cast<int64_t>(n) || v.tokens[static_cast<size_t>(id)] != a["content"].get<std::string>())
        bad("added token " + a["content"].dump() + " (id " + std::to_string(id) + ") is not that entry of model.vocab");
      v.types[static_cast<size_t>(id)] = a.value("special", false) ? TokenType::Control : TokenType::UserDefined;
    }
  }
  // Scores from merge ranks: the first merge producing a piece gives it -rank.
  std::vector<bool> scored(n, false);
  if (m.contains("merges")) {
    if (!m["merges"].is_array()) bad("model.merges is not an array");
    int64_t rank = 0;
    for (const json& mg : m["merges"]) {
      std::string l, r;
      if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
        l = mg[0].get<std::string>();
        r = mg[1].get<std::string>();
      } else if (mg.is_string()) {  // the older "left right" form
        const std::string s = mg.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos) bad("merge " + mg.dump() + " is not \"left right\"");
        l = s.substr(0, sp);
        r = s.substr(sp + 1);
      } else {
        bad("merge " + std::to_string(rank) + " is neither [left, right] nor \"left right\"");
      }
      const auto it = index.find(l + r);
      if (it == index.end() || !index.count(l) || !index.count(r))
        bad("merge " + std::to_string(rank) + " (\"" + l + "\", \"" + r + "\") names a piece that is not in model.vocab");
      const auto id = static_cast<size_t>(it->second);
      if (!scored[id]) {
        scored[id] = true;
        v.scores[id] = -static_cast<float>(rank);
      }
      ++rank;
    }
  }
  if (!tokenizer_config_json.empty()) {
    json c;
    try {
      c = json::parse(tokenizer_config_json.begin(), tokenizer_config_json.end());
    } catch (const json::exception& e) {
      throw Error(ErrorKind::Format, std::string("tokenizer_config.json: not valid JSON: ") + e.what());
    }
    if (!c.is_object()) throw Error(ErrorKind::Format, "tokenizer_config.json: not a JSON object");
    auto special = [&](const char* key) -> int32_t {
      if (!c.contains(key) || c[key].is_null()) return -1;
      const json& t = c[key];
      const std::string text = t.is_string() ? t.get<std::string>() : (t.is_object() && t.contains("content") ? t["content"].get<std::string>() : "");
      const auto it = index.find(text);
      if (it == index.end()) throw Error(ErrorKind::Format, std::string("tokenizer_config.json: ") + key + " " + t.dump() + " is not in the vocabulary");
      return it->second;
    };
    v.bos_id = special("bos_token");
    v.eos_id = special("eos_token");
    v.unk_id = special("unk_token");
    v.pad_id = special("pad_token");
    v.eot_id = special("eot_token");
    v.add_bos = c.value("add_bos_token", v.bos_id >= 0);
    v.add_eos = c.value("add_eos_token", false);
    v.add_space_prefix = c.value("add_space_prefix", false);
    if (c.contains("chat_template") && c["chat_template"].is_string()) v.chat_template = c["chat_template"].get<std::string>();
  } else if (j.contains("post_processor") && j["post_processor"].is_object() && j["post_processor"].contains("special_tokens")) {
    for (const auto& [text, _] : j["post_processor"]["special_tokens"].items()) {
      const auto it = index.find(text);
      if (it != index.end()) {
        v.bos_id = it->second;
        v.add_bos = true;
        break;
      }
    }
  }
  if (m.contains("unk_token") && m["unk_token"].is_string() && v.unk_id < 0) {
    const auto it = index.find(m["unk_token"].get<std::string>());
    if (it != index.end()) v.unk_id = it->second;
  }
  return v;
}

}  // namespace larql
