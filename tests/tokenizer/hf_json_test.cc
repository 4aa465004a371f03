// The Hugging Face tokenizer files (tokenizer/hf_json.h): a hand-made vocabulary's exact JSON
// shape, and the real Gemma 3 vocabulary written and read back giving llama.cpp's ids on every
// golden case (tests/tokenizer/data/llama_cpp_cases.jsonl), raw bytes included.
#include "tokenizer/hf_json.h"

#include <gtest/gtest.h>

#include "testlib/tokenizer_cases.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "testlib/paths.h"
#include "util/error.h"

namespace larql {
namespace {

using nlohmann::json;

// A tiny SPM vocabulary: merges "a"+"b" -> "ab" (score -1) and "ab"+"c" -> "abc" (score -2).
VocabData tiny() {
  VocabData v;
  v.tokens = {"<unk>", "<bos>", "a", "b", "c", "ab", "abc", "<0x41>", "\n"};
  v.scores = {0, 0, -3, -4, -5, -1, -2, 0, 0};
  v.types = {TokenType::Control, TokenType::Control, TokenType::Normal, TokenType::Normal, TokenType::Normal,
             TokenType::Normal,  TokenType::Normal,  TokenType::Byte,   TokenType::UserDefined};
  v.unk_id = 0;
  v.bos_id = 1;
  v.add_bos = true;
  return v;
}

TEST(HfJsonTest, WritesTheTokenizersLayout) {
  const HfTokenizerFiles f = to_hf_tokenizer(tiny());
  const json j = json::parse(f.tokenizer_json);
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["model"]["byte_fallback"], true);
  EXPECT_EQ(j["model"]["vocab"]["abc"], 6);
  // Every split of a NORMAL piece into two NORMAL pieces, by the piece's score, descending.
  EXPECT_EQ(j["model"]["merges"], json::parse(R"([["a","b"],["ab","c"]])"));
  ASSERT_EQ(j["added_tokens"].size(), 3u);
  EXPECT_EQ(j["added_tokens"][2]["content"], "\n");
  EXPECT_EQ(j["added_tokens"][2]["special"], false);
  EXPECT_EQ(j["normalizer"]["content"], "\xE2\x96\x81");
  EXPECT_EQ(j["post_processor"]["special_tokens"]["<bos>"]["ids"], json::array({1}));
  const json c = json::parse(f.tokenizer_config_json);
  EXPECT_EQ(c["bos_token"], "<bos>");
  EXPECT_EQ(c["add_bos_token"], true);
}

TEST(HfJsonTest, ReadsBackTheSameTokenizer) {
  const HfTokenizerFiles f = to_hf_tokenizer(tiny());
  const VocabData v = vocab_from_hf_tokenizer(f.tokenizer_json, f.tokenizer_config_json);
  EXPECT_EQ(v.tokens, tiny().tokens);
  EXPECT_EQ(v.types, tiny().types);
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.unk_id, 0);
  const Tokenizer a(tiny()), b(v);
  for (const std::string s : {"abc", "abcab", "cab\nA", "ba", "xyz"})
    EXPECT_EQ(a.encode(s, true, true), b.encode(s, true, true)) << s;
  // The older "left right" merge strings read the same.
  json j = json::parse(f.tokenizer_json);
  j["model"]["merges"] = json::array({"a b", "ab c"});
  EXPECT_EQ(vocab_from_hf_tokenizer(j.dump(), "").scores, v.scores);
}

TEST(HfJsonTest, RejectsBrokenFilesNamingTheField) {
  auto format_error = [](const std::string& text, const std::string& needle) {
    try {
      vocab_from_hf_tokenizer(text, "");
      ADD_FAILURE() << "read; expected " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  format_error("{", "not valid JSON");
  format_error("{}", "no \"model\" object");
  format_error(R"({"model":{"type":"Unigram","vocab":[]}})", "model type \"Unigram\"");
  format_error(R"({"model":{"type":"BPE","vocab":{"a":0,"b":0}}})", "id 0 is used twice");
  format_error(R"({"model":{"type":"BPE","vocab":{"a":0,"b":5}}})", "model.vocab[\"b\"] = 5");
  format_error(R"({"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[["a","x"]]}})", "merge 0 (\"a\", \"x\")");
  // A SentencePiece-style pipeline larql does not reproduce: refused, named.
  format_error(R"({"pre_tokenizer":{"type":"Whitespace"},"model":{"type":"BPE","vocab":{"a":0}}})", "pre_tokenizer Whitespace");
  format_error(R"({"normalizer":{"type":"Lowercase"},"model":{"type":"BPE","vocab":{"a":0}}})", "normalizer Lowercase");
  // Values of the wrong JSON type inside an accepted structure (found by fuzz/model_fuzz.cc):
  // a Format error, not a nlohmann exception escaping.
  format_error(R"({"model":{"type":"BPE","vocab":{"a":0}},"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":"x"}})",
               "wrong JSON type");
  format_error(R"({"model":{"type":"BPE","vocab":{"a":0}},"pre_tokenizer":{"type":5}})", "wrong JSON type");
  format_error(R"({"model":{"type":"BPE","vocab":{"a":0}},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"ByteLevel"},5]}})",
               "wrong JSON type");
  const HfTokenizerFiles f = to_hf_tokenizer(tiny());
  try {
    vocab_from_hf_tokenizer(f.tokenizer_json, R"({"bos_token":"<s>"})");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bos_token \"<s>\" is not in the vocabulary"), std::string::npos) << e.what();
  }
}

using testing::from_hex;

// The default model's vocabulary through tokenizer.gguf (how a vindex stores it) is the GGUF's,
// field for field.
TEST(HfJsonTest, TheGemmaVocabularyRoundTripsThroughVocabToGguf) {
  LARQL_REQUIRE_MODEL(model);
  const VocabData original = vocab_from_gguf(*GgufFile::open(model));
  GgufWriter w;
  vocab_to_gguf(original, w);
  const auto bytes = w.serialize();
  const VocabData back = vocab_from_gguf(*GgufFile::parse(bytes.data(), bytes.size(), "tokenizer.gguf"));
  EXPECT_EQ(back.tokens, original.tokens);
  EXPECT_EQ(back.scores, original.scores);
  EXPECT_EQ(back.types, original.types);
  EXPECT_EQ(back.merges, original.merges);
  EXPECT_EQ(back.bos_id, original.bos_id);
  EXPECT_EQ(back.eos_id, original.eos_id);
  EXPECT_EQ(back.eot_id, original.eot_id);
  EXPECT_EQ(back.pad_id, original.pad_id);
  EXPECT_EQ(back.unk_id, original.unk_id);
  EXPECT_EQ(back.add_bos, original.add_bos);
  EXPECT_EQ(back.add_eos, original.add_eos);
  EXPECT_EQ(back.add_space_prefix, original.add_space_prefix);
  EXPECT_EQ(back.chat_template, original.chat_template);
}

TEST(HfJsonTest, TheGemmaVocabularyRoundTripsToLlamaCppIds) {
  LARQL_REQUIRE_MODEL(model);
  const auto gguf = GgufFile::open(model);
  const VocabData original = vocab_from_gguf(*gguf);
  const HfTokenizerFiles f = to_hf_tokenizer(original);
  const VocabData back = vocab_from_hf_tokenizer(f.tokenizer_json, f.tokenizer_config_json);
  EXPECT_EQ(back.tokens, original.tokens);
  EXPECT_EQ(back.types, original.types);
  EXPECT_EQ(back.bos_id, original.bos_id);
  EXPECT_EQ(back.eos_id, original.eos_id);
  EXPECT_EQ(back.pad_id, original.pad_id);
  EXPECT_EQ(back.chat_template, original.chat_template);
  const Tokenizer tok(back);
  std::ifstream in(testing::source_dir() + "/tests/tokenizer/data/llama_cpp_cases.jsonl");
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json c = json::parse(line);
    const std::string text = c.contains("text") ? c["text"].get<std::string>() : from_hex(c["text_hex"].get<std::string>());
    EXPECT_EQ(tok.encode(text, true, true), c["ids_special"].get<std::vector<int32_t>>()) << c["name"];
    EXPECT_EQ(tok.encode(text, true, false), c["ids_plain"].get<std::vector<int32_t>>()) << c["name"];
    ++cases;
  }
  EXPECT_GE(cases, 200);
}

}  // namespace
}  // namespace larql
