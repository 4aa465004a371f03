// Byte-level BPE (tokenizer.ggml.model "gpt2"): parity with llama.cpp on GGUF vocabularies and
// with the Hugging Face `tokenizers` package on tokenizer.json, hand-derived merges, decoding and
// bad input. The three vocabularies under tests/tokenizer/data/bpe/ (Llama 3, Qwen2 and GPT-2
// pre-tokenizers) and their expected ids are written by scripts/gen_bpe_tokenizer_cases.py from
// llama-cpp-python and `tokenizers` (kept fresh by tests/python/test_bpe_tokenizer_parity.py).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "testlib/paths.h"
#include "testlib/tokenizer_cases.h"
#include "tokenizer/bpe.h"
#include "tokenizer/hf_json.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace larql {
namespace {

using Ids = std::vector<int32_t>;

const char* const kVocabs[] = {"llama3", "qwen2", "gpt2"};

std::string data_dir(const std::string& name) {
  return testing::source_dir() + "/tests/tokenizer/data/bpe/" + name;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ADD_FAILURE() << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using Case = testing::TokenizerCase;

std::vector<Case> load_cases(const std::string& path) { return testing::load_tokenizer_cases(path); }

Tokenizer gguf_tokenizer(const std::string& name) {
  return Tokenizer::from_gguf(*GgufFile::open(data_dir(name) + "/vocab.gguf"));
}

VocabData hf_vocab(const std::string& name) {
  return vocab_from_hf_tokenizer(read_file(data_dir(name) + "/tokenizer.json"), "");
}

std::string show(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
}

class BpeParity : public ::testing::TestWithParam<const char*> {};

TEST_P(BpeParity, GgufMatchesLlamaCpp) {
  const std::string name = GetParam();
  const Tokenizer tok = gguf_tokenizer(name);
  const auto cases = load_cases(data_dir(name) + "/llama_cpp_cases.jsonl");
  ASSERT_GE(cases.size(), 200u);
  size_t bad = 0;
  for (const Case& c : cases) {
    const Ids special = tok.encode(c.text, true, true);
    const Ids plain = tok.encode(c.text, true, false);
    EXPECT_EQ(special, c.ids_special) << name << " case " << c.name << " (parse_special) text " << show(c.text);
    EXPECT_EQ(plain, c.ids_plain) << name << " case " << c.name << " (plain) text " << show(c.text);
    ASSERT_TRUE(c.detok.has_value() && c.detok_plain.has_value());
    EXPECT_EQ(tok.decode(c.ids_special), *c.detok) << name << " case " << c.name << ": decode";
    EXPECT_EQ(tok.decode(c.ids_special, true), *c.detok_plain) << name << " case " << c.name << ": decode skip_special";
    bad += (special != c.ids_special) + (plain != c.ids_plain);
    if (bad > 20) FAIL() << "too many mismatches";
  }
}

TEST_P(BpeParity, TokenizerJsonMatchesHfTokenizers) {
  const std::string name = GetParam();
  const Tokenizer tok(hf_vocab(name));
  const auto cases = load_cases(data_dir(name) + "/tokenizers_cases.jsonl");
  ASSERT_GE(cases.size(), 200u);
  size_t bad = 0;
  for (const Case& c : cases) {
    const Ids special = tok.encode(c.text, true, true);
    const Ids plain = tok.encode(c.text, true, false);
    EXPECT_EQ(special, c.ids_special) << name << " case " << c.name << " (special) text " << show(c.text);
    EXPECT_EQ(plain, c.ids_plain) << name << " case " << c.name << " (encode_special_tokens) text " << show(c.text);
    bad += (special != c.ids_special) + (plain != c.ids_plain);
    if (bad > 20) FAIL() << "too many mismatches";
  }
}

// tokenizer.json and the GGUF describe one vocabulary: the same pieces, types, merges and pre.
TEST_P(BpeParity, TokenizerJsonAndGgufAgree) {
  const std::string name = GetParam();
  const VocabData g = vocab_from_gguf(*GgufFile::open(data_dir(name) + "/vocab.gguf"));
  const VocabData h = hf_vocab(name);
  EXPECT_EQ(g.model, "gpt2");
  EXPECT_EQ(h.model, "gpt2");
  EXPECT_EQ(h.pre, g.pre);
  EXPECT_EQ(h.tokens, g.tokens);
  EXPECT_EQ(h.types, g.types);
  EXPECT_EQ(h.merges, g.merges);
  EXPECT_EQ(h.add_bos, g.add_bos);
  if (g.add_bos) EXPECT_EQ(h.bos_id, g.bos_id);
}

// Decoding the pieces of an encoding gives the text back, byte for byte, for valid UTF-8.
// llama.cpp decodes invalid UTF-8 to code points first (a byte that starts no complete sequence
// -> U+FFFD; overlong forms and surrogates decoded as they stand) and re-encodes them, so e.g.
// FF FE comes back as two EF BF BD and C0 80 as 00.
TEST_P(BpeParity, PiecesRoundTrip) {
  const std::string name = GetParam();
  const Tokenizer tok = gguf_tokenizer(name);
  auto joined = [&](const std::string& text) {
    std::string out;
    for (int32_t id : tok.encode(text, false, true)) out += tok.token_to_piece(id);
    return out;
  };
  for (const Case& c : load_cases(data_dir(name) + "/llama_cpp_cases.jsonl"))
    if (c.valid_utf8) EXPECT_EQ(joined(c.text), c.text) << name << " case " << c.name;
  EXPECT_EQ(joined("\xff\xfe abc"), "\xEF\xBF\xBD\xEF\xBF\xBD abc");
  EXPECT_EQ(joined(std::string("a\xc0\x80" "b")), std::string("a\0b", 3));
  EXPECT_EQ(joined("\xed\xa0\x80 x"), "\xed\xa0\x80 x");
}

// to_hf_tokenizer writes a byte-level vocabulary that reads back field for field and still
// tokenizes as `tokenizers` does.
TEST_P(BpeParity, ToHfTokenizerRoundTrips) {
  const std::string name = GetParam();
  VocabData v = vocab_from_gguf(*GgufFile::open(data_dir(name) + "/vocab.gguf"));
  const HfTokenizerFiles files = to_hf_tokenizer(v);
  const VocabData back = vocab_from_hf_tokenizer(files.tokenizer_json, files.tokenizer_config_json);
  EXPECT_EQ(back.model, "gpt2");
  EXPECT_EQ(back.pre, v.pre);
  EXPECT_EQ(back.tokens, v.tokens);
  EXPECT_EQ(back.types, v.types);
  EXPECT_EQ(back.merges, v.merges);
  EXPECT_EQ(back.add_bos, v.add_bos);
  EXPECT_EQ(back.bos_id, v.bos_id);
  EXPECT_EQ(back.eos_id, v.eos_id);
  const Tokenizer tok(back);
  for (const Case& c : load_cases(data_dir(name) + "/tokenizers_cases.jsonl"))
    EXPECT_EQ(tok.encode(c.text, true, true), c.ids_special) << name << " case " << c.name;
  v.pre = "";
  EXPECT_THROW(to_hf_tokenizer(v), Error);  // llama.cpp's default regex list has no tokenizer.json form
}

INSTANTIATE_TEST_SUITE_P(Vocabs, BpeParity, ::testing::ValuesIn(kVocabs));

TEST(Bpe, VocabularyFacts) {
  const Tokenizer l = gguf_tokenizer("llama3");
  EXPECT_TRUE(l.add_bos());
  EXPECT_EQ(l.token_text(l.bos_id()), "<|begin_of_text|>");
  EXPECT_EQ(l.encode("", true, true), (Ids{l.bos_id()}));
  EXPECT_TRUE(l.is_control(*l.find_token("<|eot_id|>")));
  EXPECT_EQ(l.token_type(*l.find_token("<tool_call>")), TokenType::UserDefined);
  const Tokenizer q = gguf_tokenizer("qwen2");
  EXPECT_FALSE(q.add_bos());
  EXPECT_EQ(q.encode("", true, true), Ids{});
  EXPECT_EQ(q.decode(q.encode("<|im_start|>user\nhi<|im_end|>", false, true)), "<|im_start|>user\nhi<|im_end|>");
  // Byte-level pieces: "Ġ" is the space byte, "Ċ" the newline.
  const Tokenizer g = gguf_tokenizer("gpt2");
  EXPECT_EQ(g.token_to_piece(*g.find_token("\xC4\xA0")), " ");
  EXPECT_EQ(g.token_to_piece(*g.find_token("\xC4\x8A")), "\n");
}

// The defaults llama.cpp's loader applies when the GGUF has no add_bos_token key.
TEST(Bpe, AddBosDefaultsFollowThePre) {
  for (auto [pre, want] : {std::pair{"llama-bpe", true}, {"qwen2", false}, {"gpt-2", false}, {"", false}}) {
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
    if (*pre) w.set("tokenizer.ggml.pre", GgufValue::str(pre));
    w.set("tokenizer.ggml.tokens", GgufValue::string_array({"a", "b", "ab"}));
    w.set("tokenizer.ggml.merges", GgufValue::string_array({"a b"}));
    w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(0));
    const auto bytes = w.serialize();
    const VocabData v = vocab_from_gguf(*GgufFile::parse(bytes.data(), bytes.size(), "v.gguf"));
    EXPECT_EQ(v.add_bos, want) << pre;
    EXPECT_FALSE(v.add_space_prefix) << pre;
    EXPECT_EQ(v.pre, pre);
    EXPECT_EQ(v.merges, std::vector<std::string>{"a b"});
  }
}

TEST(Bpe, VocabToGgufKeepsPreAndMerges) {
  VocabData v = hf_vocab("qwen2");
  GgufWriter w;
  vocab_to_gguf(v, w);
  const auto bytes = w.serialize();
  const VocabData back = vocab_from_gguf(*GgufFile::parse(bytes.data(), bytes.size(), "v.gguf"));
  EXPECT_EQ(back.pre, "qwen2");
  EXPECT_EQ(back.merges, v.merges);
  EXPECT_EQ(back.tokens, v.tokens);
  EXPECT_EQ(back.types, v.types);
  EXPECT_EQ(back.add_bos, v.add_bos);
}

// A five-token vocabulary with three merges, worked out by hand:
//   ids: a=0 b=1 c=2 bc=3 abc=4; merges by rank: 0 "b c", 1 "a bc", 2 "a b" ("ab" is no token).
VocabData tiny(const std::string& pre = "gpt-2") {
  VocabData v;
  v.model = "gpt2";
  v.pre = pre;
  v.tokens = {"a", "b", "c", "bc", "abc"};
  v.scores.assign(5, 0.0f);
  v.types.assign(5, TokenType::Normal);
  v.merges = {"b c", "a bc", "a b"};
  v.add_bos = false;
  return v;
}

TEST(Bpe, HandDerivedMerges) {
  const Tokenizer t(tiny());
  // a,b,c: (b,c) has rank 0 < (a,b)'s 2 -> a,bc; then (a,bc) rank 1 -> abc.
  EXPECT_EQ(t.encode("abc", false, false), (Ids{4}));
  // a,b,c,b,c: both (b,c) first (leftmost first), then (a,bc); (abc,bc) is no merge.
  EXPECT_EQ(t.encode("abcbc", false, false), (Ids{4, 3}));
  // (a,b) merges to "ab", which is no token: llama.cpp emits its bytes' one-byte tokens.
  EXPECT_EQ(t.encode("ab", false, false), (Ids{0, 1}));
  EXPECT_EQ(t.encode("cab", false, false), (Ids{2, 0, 1}));
  // " bc" is one word "Ġbc"; "Ġ" is no token and its bytes C4 A0 are none either: dropped.
  EXPECT_EQ(t.encode("a bc", false, false), (Ids{0, 3}));
  EXPECT_EQ(t.decode({4, 3, 0}), "abcbca");
}

TEST(Bpe, PreTokenizerSplits) {
  auto split = [](const std::string& pre, const std::string& text) {
    const VocabData v = tiny(pre);
    return bpe::split_words(*bpe::build(v), text);
  };
  using W = std::vector<std::string>;
  // Llama 3: digits in threes, case-insensitive contractions, a leading non-letter joins a word.
  EXPECT_EQ(split("llama-bpe", "1234567 it'S"), (W{"123", "456", "7", " it", "'S"}));
  EXPECT_EQ(split("qwen2", "123 x"), (W{"1", "2", "3", " x"}));
  EXPECT_EQ(split("gpt-2", "1234567 it'S"), (W{"1234567", " it", "'", "S"}));
  // Whitespace: "\s+(?!\S)" leaves the last space for the next word; U+000B and U+0085 are
  // whitespace as in llama.cpp (ICU's \s lacks them).
  EXPECT_EQ(split("gpt-2", "a   b"), (W{"a", "  ", " b"}));
  EXPECT_EQ(split("gpt-2", "a\x0b\x0b" "b"), (W{"a", "\x0b", "\x0b", "b"}));
  EXPECT_EQ(split("llama-bpe", "a\xC2\x85\xC2\x85" "b"), (W{"a", "\xC2\x85", "\xC2\x85" "b"}));
  EXPECT_EQ(split("llama-bpe", "x \n\n y"), (W{"x", " \n\n", " y"}));
  // CJK Extension I (U+2EBF0, Unicode 15.1) is a letter in llama.cpp's tables.
  EXPECT_EQ(split("gpt-2", " \xF0\xAE\xAF\xB0\xF0\xAE\xAF\xB1!"), (W{" \xF0\xAE\xAF\xB0\xF0\xAE\xAF\xB1", "!"}));
  EXPECT_EQ(split("llama-bpe", ""), W{});
  // Invalid bytes become U+FFFD before the split (one per byte that starts no sequence).
  EXPECT_EQ(split("gpt-2", "a\xff\xfe"), (W{"a", "\xEF\xBF\xBD\xEF\xBF\xBD"}));
  // The default pre (missing tokenizer.ggml.pre): punctuation runs first, then GPT-2's regex.
  EXPECT_EQ(split("", "hi!!there 1234"), (W{"hi", "!!", "there", " ", "123", "4"}));
}

TEST(Bpe, CleanSpacesOnDecode) {
  std::string s = "Hello , world ! it 's a ' b ' and 're";
  bpe::clean_spaces(s);
  EXPECT_EQ(s, "Hello, world! it's a'b'and're");
}

TEST(Bpe, RejectsAMergeThatDoesNotParse) {
  VocabData v = tiny();
  v.merges = {"b c", "a bc", "abc"};
  try {
    Tokenizer t(v);
    FAIL() << "expected Error{Format}";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.merges[2] = \"abc\" is not two tokens separated by a space"),
              std::string::npos)
        << e.what();
  }
}

TEST(Bpe, RejectsAnUnknownPre) {
  try {
    Tokenizer t(tiny("bogus-pre"));
    FAIL() << "expected Error{Unsupported}";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("bogus-pre"), std::string::npos) << e.what();
  }
}

TEST(Bpe, RejectsAVocabularyWithoutMerges) {
  VocabData v = tiny();
  v.merges.clear();
  try {
    Tokenizer t(v);
    FAIL() << "expected Error{Format}";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.merges"), std::string::npos) << e.what();
  }
}

TEST(Bpe, TokenizerJsonErrorsNameTheField) {
  auto j = nlohmann::json::parse(read_file(data_dir("llama3") + "/tokenizer.json"));
  {
    auto k = j;
    k["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{L}+|\\s+";
    try {
      vocab_from_hf_tokenizer(k.dump(), "");
      FAIL() << "expected Error{Unsupported}";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
      EXPECT_NE(std::string(e.what()).find("\\\\p{L}+|\\\\s+"), std::string::npos) << e.what();
    }
  }
  {
    auto k = j;
    k["model"]["merges"][3] = "abc";
    try {
      vocab_from_hf_tokenizer(k.dump(), "");
      FAIL() << "expected Error{Format}";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Format);
      EXPECT_NE(std::string(e.what()).find("model.merges[3] = \"abc\" is not two tokens separated by a space"),
                std::string::npos)
          << e.what();
    }
  }
  {
    auto k = j;
    k["model"]["merges"] = nlohmann::json::array();
    EXPECT_THROW(vocab_from_hf_tokenizer(k.dump(), ""), Error);
  }
  // What the tokenizers package refuses or would tokenise otherwise: refused, named.
  auto expect = [](const nlohmann::json& k, ErrorKind kind, const std::string& needle) {
    try {
      vocab_from_hf_tokenizer(k.dump(), "");
      ADD_FAILURE() << "accepted; expected " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  {
    auto k = j;
    k["model"]["merges"][2] = nlohmann::json::array({"zzzq", "qqqz"});
    expect(k, ErrorKind::Format, "model.merges[2] names \"zzzq\"");
  }
  {
    auto k = j;
    k["normalizer"] = {{"type", "NFKC"}};
    expect(k, ErrorKind::Unsupported, "normalizer NFKC");
  }
  {
    auto k = j;
    k["added_tokens"][0]["id"] = 2147483000;
    expect(k, ErrorKind::Format, "has id 2147483000");
  }
}

TEST(Bpe, LongTextIsFast) {
  const Tokenizer tok = gguf_tokenizer("llama3");
  std::string text;
  const std::string readme = read_file(testing::source_dir() + "/README.md");
  while (text.size() < 400000) text += readme;
  const auto t0 = std::chrono::steady_clock::now();
  const Ids ids = tok.encode(text, true, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(ids.size(), text.size() / 8);
  EXPECT_LT(s, 5.0) << text.size() << " bytes took " << s << " s";
  std::string joined;
  for (size_t i = 1; i < ids.size(); ++i) joined += tok.token_to_piece(ids[i]);
  EXPECT_EQ(joined, text);
}

// Long runs of one class (one word, one regex match each) stay linear-ish and within ICU's
// backtracking limits.
TEST(Bpe, AdversarialInputsStayFast) {
  for (const char* name : kVocabs) {
    const Tokenizer tok = gguf_tokenizer(name);
    const std::string inputs[] = {std::string(1 << 20, 'a'), std::string(1 << 20, ' ') + "x",
                                  std::string(1 << 20, '7'), std::string(1 << 19, '!'),
                                  [] { std::string s; while (s.size() < (1u << 20)) s += " \n\t"; return s; }(),
                                  [] { std::string s; while (s.size() < (1u << 20)) s += "\xF0\x9F\x98\x80"; return s; }()};
    for (const std::string& text : inputs) {
      const auto t0 = std::chrono::steady_clock::now();
      const Ids ids = tok.encode(text, false, false);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_FALSE(ids.empty());
      EXPECT_LT(s, 5.0) << name << ": " << text.size() << " bytes of '" << text.substr(0, 4) << "...' took " << s << " s";
      std::string joined;
      for (int32_t id : ids) joined += tok.token_to_piece(id);
      EXPECT_EQ(joined, text) << name;
    }
  }
}

}  // namespace
}  // namespace larql
