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

// The Split regexes of the models' tokenizer.json files, and the tokenizer.ggml.pre they stand for
// (llama.cpp's convert_hf_to_gguf.py names them by a hash of the tokenization; these are the
// regexes behind "llama-bpe" and "qwen2").
constexpr std::string_view kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

bool contains_byte_level(const json& pt) {
  if (!pt.is_object()) return false;
  if (pt.value("type", "") == "ByteLevel") return true;
  if (pt.contains("pretokenizers") && pt["pretokenizers"].is_array())
    for (const json& p : pt["pretokenizers"])
      if (contains_byte_level(p)) return true;
  return false;
}

[[noreturn]] void unsupported_pre(const std::string& what) {
  throw Error(ErrorKind::Unsupported, "tokenizer.json: pre_tokenizer " + what +
                                          " is not supported (byte-level BPE: ByteLevel with GPT-2's regex, or "
                                          "Sequence[Split(Llama 3 or Qwen2 regex), ByteLevel])");
}

/// tokenizer.ggml.pre for a byte-level pre_tokenizer.
std::string byte_level_pre(const json& pt) {
  auto check_byte_level = [](const json& b, bool use_regex) {
    if (b.value("add_prefix_space", false)) unsupported_pre("ByteLevel with add_prefix_space");
    if (b.value("use_regex", true) != use_regex)
      unsupported_pre(std::string("ByteLevel with use_regex ") + (use_regex ? "false" : "true") +
                      (use_regex ? " and no Split" : " after a Split"));
  };
  const std::string type = pt.value("type", "");
  if (type == "ByteLevel") {
    check_byte_level(pt, true);
    return "gpt-2";
  }
  if (type != "Sequence" || !pt.contains("pretokenizers") || !pt["pretokenizers"].is_array() ||
      pt["pretokenizers"].size() != 2)
    unsupported_pre(pt.dump().substr(0, 200));
  const json& split = pt["pretokenizers"][0];
  const json& bl = pt["pretokenizers"][1];
  if (split.value("type", "") != "Split" || bl.value("type", "") != "ByteLevel")
    unsupported_pre("Sequence[" + split.value("type", std::string("?")) + ", " + bl.value("type", std::string("?")) + "]");
  check_byte_level(bl, false);
  if (!split.contains("pattern") || !split["pattern"].is_object() || !split["pattern"].contains("Regex") ||
      !split["pattern"]["Regex"].is_string())
    unsupported_pre("Split without a Regex pattern");
  if (split.value("behavior", "") != "Isolated" || split.value("invert", false))
    unsupported_pre("Split with behavior " + split.value("behavior", std::string("?")) + (split.value("invert", false) ? ", invert" : ""));
  const std::string regex = split["pattern"]["Regex"].get<std::string>();
  if (regex == kLlama3Regex) return "llama-bpe";
  if (regex == kQwen2Regex) return "qwen2";
  unsupported_pre("Split regex " + json(regex).dump() + " (larql knows the Llama 3 and Qwen2 regexes)");
}

/// A byte-level BPE tokenizer.json (model "gpt2"): vocabulary plus added tokens (which may lie
/// past model.vocab), merges as "a b" strings, pre from the pre-tokenizer. Specials and flags are
/// filled in by the caller.
VocabData byte_level_vocab(const json& j, const json& m) {
  VocabData v;
  v.model = "gpt2";
  v.pre = byte_level_pre(j["pre_tokenizer"]);
  v.add_bos = false;
  v.add_space_prefix = false;
  if (m.value("byte_fallback", false)) throw Error(ErrorKind::Unsupported, "tokenizer.json: byte-level BPE with byte_fallback");
  int64_t n = 0;
  for (const auto& [piece, idv] : m["vocab"].items()) {
    if (!idv.is_number_integer() || idv.get<int64_t>() < 0 || idv.get<int64_t>() >= (int64_t{1} << 31))
      bad("model.vocab[\"" + piece + "\"] = " + idv.dump() + " is not a token id");
    n = std::max(n, idv.get<int64_t>() + 1);
  }
  const json added = j.contains("added_tokens") ? j["added_tokens"] : json::array();
  if (!added.is_array()) bad("added_tokens is not an array");
  // Ids are dense: the vocabulary and the added tokens together fill [0, n), so no id can lie past
  // their count (checked before anything is sized by it).
  const int64_t max_id = static_cast<int64_t>(m["vocab"].size() + added.size());
  if (n > max_id) bad("model.vocab holds an id of " + std::to_string(n - 1) + ", past its " + std::to_string(m["vocab"].size()) + " entries");
  for (const json& a : added) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string())
      bad("an added_tokens entry lacks an integer id or a content string");
    const int64_t id = a["id"].get<int64_t>();
    if (id < 0 || id >= max_id)
      bad("added token " + a["content"].dump() + " has id " + std::to_string(id) + ", outside [0, " +
          std::to_string(max_id) + ") (model.vocab's entries and the added tokens)");
    n = std::max(n, id + 1);
  }
  const auto size = static_cast<size_t>(n);
  v.tokens.assign(size, std::string());
  v.scores.assign(size, 0.0f);
  v.types.assign(size, TokenType::Normal);
  std::vector<bool> seen(size, false);
  for (const auto& [piece, idv] : m["vocab"].items()) {
    const auto id = static_cast<size_t>(idv.get<int64_t>());
    if (seen[id]) bad("id " + std::to_string(id) + " is used twice in model.vocab");
    seen[id] = true;
    v.tokens[id] = piece;
  }
  for (const json& a : added) {
    const auto id = static_cast<size_t>(a["id"].get<int64_t>());
    const std::string content = a["content"].get<std::string>();
    if (seen[id] && v.tokens[id] != content)
      bad("added token " + a["content"].dump() + " (id " + std::to_string(id) + ") differs from model.vocab's " +
          json(v.tokens[id]).dump());
    seen[id] = true;
    v.tokens[id] = content;
    v.types[id] = a.value("special", false) ? TokenType::Control : TokenType::UserDefined;
  }
  for (size_t i = 0; i < size; ++i)
    if (!seen[i]) bad("id " + std::to_string(i) + " is neither in model.vocab nor in added_tokens");
  if (!m.contains("merges") || !m["merges"].is_array() || m["merges"].empty())
    bad("model.merges is missing or empty (a byte-level BPE needs its merges)");
  v.merges.reserve(m["merges"].size());
  const json& vocab = m["vocab"];
  size_t i = 0;
  for (const json& mg : m["merges"]) {
    std::string l, r;
    if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      l = mg[0].get<std::string>();
      r = mg[1].get<std::string>();
    } else if (mg.is_string()) {
      const std::string s = mg.get<std::string>();
      const size_t sp = s.size() < 2 ? std::string::npos : s.find(' ', 1);
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        bad("model.merges[" + std::to_string(i) + "] = " + mg.dump() + " is not two tokens separated by a space");
      l = s.substr(0, sp);
      r = s.substr(sp + 1);
    } else {
      bad("model.merges[" + std::to_string(i) + "] = " + mg.dump().substr(0, 100) + " is neither [left, right] nor \"left right\"");
    }
    // As the tokenizers package loads them: both sides and their concatenation are vocabulary entries.
    for (const std::string* piece : {&l, &r})
      if (!vocab.contains(*piece))
        bad("model.merges[" + std::to_string(i) + "] names " + json(*piece).dump() + ", which is not in model.vocab");
    if (!vocab.contains(l + r))
      bad("model.merges[" + std::to_string(i) + "] makes " + json(l + r).dump() + ", which is not in model.vocab");
    v.merges.push_back(l + " " + r);
    ++i;
  }
  return v;
}

}  // namespace

namespace {

/// tokenizer_config.json: special tokens, flags, chat template.
std::string config_json(const VocabData& v) {
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
  return c.dump(2) + "\n";
}

json bos_template(const VocabData& v) {
  const std::string bos = token_or_empty(v, v.bos_id);
  if (!v.add_bos || bos.empty()) return nullptr;
  const json sp = {{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
  const json a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  const json b = {{"Sequence", {{"id", "B"}, {"type_id", 0}}}};
  return {{"type", "TemplateProcessing"},
          {"single", json::array({sp, a})},
          {"pair", json::array({sp, a, b})},
          {"special_tokens", {{bos, {{"id", bos}, {"ids", {v.bos_id}}, {"tokens", {bos}}}}}}};
}

/// A byte-level BPE vocabulary ("gpt2") as tokenizer.json: the pre's Split regex + ByteLevel
/// (or plain ByteLevel for gpt-2), CONTROL / USER_DEFINED tokens as added tokens (not in
/// model.vocab), merges as [left, right] pairs in rank order.
HfTokenizerFiles to_hf_bpe(const VocabData& v) {
  const size_t n = v.tokens.size();
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  json pre_tokenizer;
  bool ignore_merges = false;
  if (v.pre == "gpt-2" || v.pre == "phi-2") {
    pre_tokenizer = byte_level;
  } else if (v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3" || v.pre == "qwen2" ||
             v.pre == "deepseek-r1-qwen") {
    const bool llama3 = v.pre.rfind("llama", 0) == 0;
    ignore_merges = llama3;
    json bl = byte_level;
    bl["use_regex"] = false;
    const json split = {{"type", "Split"},
                        {"pattern", {{"Regex", std::string(llama3 ? kLlama3Regex : kQwen2Regex)}}},
                        {"behavior", "Isolated"},
                        {"invert", false}};
    pre_tokenizer = {{"type", "Sequence"}, {"pretokenizers", json::array({split, bl})}};
  } else {
    throw Error(ErrorKind::Unsupported, "tokenizer.ggml.pre \"" + v.pre +
                                            "\" cannot be written as tokenizer.json (llama-bpe, qwen2 and gpt-2 can)");
  }
  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  json added = json::array();
  json vocab = json::object();
  for (size_t i = 0; i < n; ++i) {
    if (v.types[i] == TokenType::Control || v.types[i] == TokenType::UserDefined)
      added.push_back({{"id", i}, {"content", v.tokens[i]}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", v.types[i] == TokenType::Control}});
    else
      vocab[v.tokens[i]] = i;
  }
  json merges = json::array();
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos)
      throw Error(ErrorKind::Format, "tokenizer.ggml.merges[" + std::to_string(i) + "] = \"" + m +
                                         "\" is not two tokens separated by a space");
    merges.push_back(json::array({m.substr(0, sp), m.substr(sp + 1)}));
  }
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = pre_tokenizer;
  j["post_processor"] = bos_template(v);
  if (j["post_processor"].is_null())
    j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", ignore_merges},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  return HfTokenizerFiles{j.dump(), config_json(v)};
}

}  // namespace

HfTokenizerFiles to_hf_tokenizer(const VocabData& v) {
  if (v.model != "llama" && v.model != "gpt2")
    throw Error(ErrorKind::Unsupported, "tokenizer model \"" + v.model +
                                            "\" cannot be written as tokenizer.json (only SentencePiece \"llama\" and "
                                            "byte-level BPE \"gpt2\")");
  const size_t n = v.tokens.size();
  if (v.scores.size() != n || v.types.size() != n)
    throw Error(ErrorKind::InvalidArgument, "vocabulary arrays differ in length");
  if (v.model == "gpt2") return to_hf_bpe(v);
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
  j["post_processor"] = bos_template(v);
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

  return HfTokenizerFiles{std::move(top), config_json(v)};
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

namespace {

// Whether a SentencePiece-style tokenizer.json puts a "▁" before the text: a Metaspace
// pre-tokenizer with prepend_scheme "first" / "always" (or add_prefix_space, older files), or a
// Prepend("▁") normalizer (transformers 4's conversion of Llama 2).
bool spm_prepends_space(const json& j) {
  auto metaspace = [](const json& p) {
    if (!p.is_object() || p.value("type", "") != "Metaspace") return false;
    if (p.contains("prepend_scheme") && p["prepend_scheme"].is_string()) return p["prepend_scheme"] != "never";
    return p.value("add_prefix_space", false);
  };
  auto prepend = [](const json& p) { return p.is_object() && p.value("type", "") == "Prepend"; };
  auto any = [](const json& p, auto&& pred) {
    if (pred(p)) return true;
    for (const char* list : {"pretokenizers", "normalizers"})
      if (p.is_object() && p.contains(list) && p[list].is_array())
        for (const json& q : p[list])
          if (pred(q)) return true;
    return false;
  };
  return (j.contains("pre_tokenizer") && any(j["pre_tokenizer"], metaspace)) ||
         (j.contains("normalizer") && any(j["normalizer"], prepend));
}

}  // namespace

namespace {

// The normalizers and pre-tokenizers larql reproduces; anything else would change the ids
// silently, so it is refused, named. Byte-level BPE: no normalizer, or NFC (Qwen2's, which
// llama.cpp does not apply either: text already in NFC, as almost all is, tokenises the same).
// SentencePiece-style: Replace(" ", "▁") / Prepend("▁") normalizers, a Metaspace pre-tokenizer or
// a Split on " " (Gemma's).
void check_pipeline(const json& j, bool byte_level) {
  auto type_of = [](const json& x) { return x.is_object() ? x.value("type", std::string("?")) : std::string("?"); };
  auto each = [&](const json& x, const char* list, auto&& f) {
    if (x.is_null()) return;
    if (type_of(x) == "Sequence" && x.contains(list) && x[list].is_array()) {
      for (const json& y : x[list]) f(y);
    } else {
      f(x);
    }
  };
  const json none;
  const json& norm = j.contains("normalizer") ? j["normalizer"] : none;
  each(norm, "normalizers", [&](const json& n) {
    const std::string t = type_of(n);
    const bool ok = byte_level ? t == "NFC" : t == "Replace" || t == "Prepend";
    if (!ok)
      throw Error(ErrorKind::Unsupported, "tokenizer.json: normalizer " + t + " is not supported for a " +
                                              (byte_level ? "byte-level BPE (only NFC)" : "SentencePiece-style BPE (Replace, Prepend)"));
  });
  if (!byte_level) {
    const json& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : none;
    each(pre, "pretokenizers", [&](const json& p) {
      // Gemma's Split on " " follows a normalizer that replaced every space: it splits nothing.
      const bool space_split = type_of(p) == "Split" && p.contains("pattern") && p["pattern"].is_object() &&
                               p["pattern"].value("String", std::string()) == " ";
      if (type_of(p) != "Metaspace" && !space_split)
        throw Error(ErrorKind::Unsupported, "tokenizer.json: pre_tokenizer " + type_of(p) +
                                                " is not supported (a SentencePiece-style BPE takes Metaspace or none; a "
                                                "byte-level one ByteLevel)");
    });
  }
}

}  // namespace

namespace {
VocabData read_hf_tokenizer(std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
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
  const bool byte_level = j.contains("pre_tokenizer") && contains_byte_level(j["pre_tokenizer"]);
  check_pipeline(j, byte_level);
  VocabData v;
  std::unordered_map<std::string, int32_t> index;  // piece -> id
  if (byte_level) {
    v = byte_level_vocab(j, m);
    index.reserve(v.tokens.size());
    for (size_t i = 0; i < v.tokens.size(); ++i) index.emplace(v.tokens[i], static_cast<int32_t>(i));
  } else {
    v.model = "llama";
    v.tokens.assign(n, std::string());
    v.scores.assign(n, 0.0f);
    v.types.assign(n, TokenType::Normal);
    std::vector<bool> seen(n, false);
    // Added tokens may extend model.vocab (transformers 5 writes <|endoftext|> ... past its end).
    size_t n_all = n;
    if (j.contains("added_tokens") && j["added_tokens"].is_array())
      for (const json& a : j["added_tokens"])
        if (a.is_object() && a.contains("id") && a["id"].is_number_integer() && a["id"].get<int64_t>() >= static_cast<int64_t>(n) &&
            a["id"].get<int64_t>() < static_cast<int64_t>(n) + static_cast<int64_t>(j["added_tokens"].size()))
          n_all = std::max(n_all, static_cast<size_t>(a["id"].get<int64_t>()) + 1);
    v.tokens.resize(n_all);
    v.scores.resize(n_all, 0.0f);
    v.types.resize(n_all, TokenType::Normal);
    for (const auto& [piece, idv] : m["vocab"].items()) {
      if (!idv.is_number_integer() || idv.get<int64_t>() < 0 || idv.get<int64_t>() >= static_cast<int64_t>(n))
        bad("model.vocab[\"" + piece + "\"] = " + idv.dump() + " is not an id in [0, " + std::to_string(n) + ")");
      const auto id = static_cast<size_t>(idv.get<int64_t>());
      if (seen[id]) bad("id " + std::to_string(id) + " is used twice in model.vocab");
      seen[id] = true;
      v.tokens[id] = piece;
      if (is_byte_piece(piece)) v.types[id] = TokenType::Byte;
    }
    index.reserve(n);
    for (size_t i = 0; i < n; ++i) index.emplace(v.tokens[i], static_cast<int32_t>(i));
    if (j.contains("added_tokens")) {
      if (!j["added_tokens"].is_array()) bad("added_tokens is not an array");
      for (const json& a : j["added_tokens"]) {
        if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string())
          bad("an added_tokens entry lacks an integer id or a content string");
        const int64_t id = a["id"].get<int64_t>();
        const std::string content = a["content"].get<std::string>();
        if (id >= static_cast<int64_t>(n) && id < static_cast<int64_t>(n_all) && v.tokens[static_cast<size_t>(id)].empty()) {
          v.tokens[static_cast<size_t>(id)] = content;  // an added token past model.vocab
          index.emplace(content, static_cast<int32_t>(id));
        } else if (id < 0 || id >= static_cast<int64_t>(n) || v.tokens[static_cast<size_t>(id)] != content) {
          bad("added token " + a["content"].dump() + " (id " + std::to_string(id) + ") is not that entry of model.vocab");
        }
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
  }  // SentencePiece-converted BPE
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
  if (!byte_level && spm_prepends_space(j)) v.add_space_prefix = true;
  if (m.contains("unk_token") && m["unk_token"].is_string() && v.unk_id < 0) {
    const auto it = index.find(m["unk_token"].get<std::string>());
    if (it != index.end()) v.unk_id = it->second;
  }
  return v;
}

}  // namespace

VocabData vocab_from_hf_tokenizer(std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  // Every JSON value is checked where it is read; a value of an unexpected JSON type that a check
  // missed (e.g. "add_prefix_space": "x") is still a clean Format error, never a crash.
  try {
    return read_hf_tokenizer(tokenizer_json, tokenizer_config_json);
  } catch (const json::exception& e) {
    bad(std::string("a value of the wrong JSON type: ") + e.what());
  }
}

}  // namespace larql
