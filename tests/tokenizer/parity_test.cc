// Parity of the tokenizer on the real Gemma 3 vocabulary with llama.cpp.
// Expected ids come from tests/tokenizer/data/llama_cpp_cases.jsonl, written by
// scripts/gen_tokenizer_cases.py from llama-cpp-python (kept fresh by
// tests/python/test_tokenizer_parity.py).
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
#include "tokenizer/tokenizer.h"

namespace larql {
namespace {

using Ids = std::vector<int32_t>;

using Case = testing::TokenizerCase;

std::vector<Case> load_cases() {
  return testing::load_tokenizer_cases(testing::source_dir() + "/tests/tokenizer/data/llama_cpp_cases.jsonl");
}

const Tokenizer& gemma() {
  static const Tokenizer tok = [] {
    auto gguf = GgufFile::open(testing::default_model_path());
    return Tokenizer::from_gguf(*gguf);
  }();
  return tok;
}

TEST(TokenizerGemma, VocabularyFacts) {
  LARQL_REQUIRE_MODEL(model);
  const Tokenizer& t = gemma();
  // docs/gemma3.md "The default model": vocab 262,144; pad 0, eos 1, bos 2, unk 3; add_bos true.
  EXPECT_EQ(t.vocab_size(), 262144);
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_EQ(t.bos_id(), 2);
  EXPECT_EQ(t.unk_id(), 3);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.find_token("<start_of_turn>"), std::optional<int32_t>(105));
  EXPECT_EQ(t.find_token("<end_of_turn>"), std::optional<int32_t>(106));
  EXPECT_TRUE(t.is_control(106));
  EXPECT_EQ(t.token_type(107), TokenType::UserDefined);  // "\n"
  EXPECT_EQ(t.token_to_piece(107), "\n");
  EXPECT_EQ(t.token_to_piece(238 + 0x41), "A");  // <0x41>
}

TEST(TokenizerGemma, MatchesLlamaCpp) {
  LARQL_REQUIRE_MODEL(model);
  const Tokenizer& t = gemma();
  const auto cases = load_cases();
  ASSERT_GE(cases.size(), 200u);
  int mismatches = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE("case '" + c.name + "'");
    const Ids special = t.encode(c.text, true, true);
    const Ids plain = t.encode(c.text, true, false);
    EXPECT_EQ(special, c.ids_special);
    EXPECT_EQ(plain, c.ids_plain);
    const Ids no_bos(c.ids_special.begin() + 1, c.ids_special.end());
    EXPECT_EQ(t.encode(c.text, false, true), no_bos);
    // Decoding llama.cpp's ids gives llama.cpp's detokenization.
    ASSERT_TRUE(c.detok.has_value()) << c.name;
    EXPECT_EQ(t.decode(no_bos), *c.detok);
    // Round trip of valid UTF-8. The one lossy input: a literal U+2581 decodes to a space (SPM
    // stores a space as U+2581, so the two are indistinguishable in the ids). Invalid UTF-8 is
    // lossy too (a bad lead byte can swallow a following space, which then comes back as the
    // bytes of U+2581); for those only the llama.cpp detokenization above is required.
    const std::string back = t.decode(t.encode(c.text, false, true));
    if (!c.valid_utf8) {
      // nothing more
    } else if (c.text.find("\xE2\x96\x81") == std::string::npos) {
      EXPECT_EQ(back, c.text);
    } else {
      std::string expect;
      for (size_t i = 0; i < c.text.size();) {
        const bool esc = c.text.compare(i, 3, "\xE2\x96\x81") == 0;
        expect.push_back(esc ? ' ' : c.text[i]);
        i += esc ? 3 : 1;
      }
      EXPECT_EQ(back, expect);
    }
    // Streaming the same ids yields the same (valid UTF-8) text.
    StreamDecoder sd(t);
    std::string streamed;
    for (int32_t id : no_bos) streamed += sd.push(id);
    streamed += sd.flush();
    EXPECT_EQ(streamed, utf8_sanitize(*c.detok, false, nullptr));
    if (special != c.ids_special || plain != c.ids_plain) ++mismatches;
  }
  EXPECT_EQ(mismatches, 0) << "of " << cases.size() << " cases";
}

TEST(TokenizerGemma, LongTextIsFast) {
  LARQL_REQUIRE_MODEL(model);
  const Tokenizer& t = gemma();
  std::ifstream in(testing::source_dir() + "/tests/python/data/long_text_gpl3.txt");
  ASSERT_TRUE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  ASSERT_GT(text.size(), 30000u);
  const auto t0 = std::chrono::steady_clock::now();
  const Ids ids = t.encode(text, true, true);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("encode %zu bytes -> %zu tokens in %.1f ms\n", text.size(), ids.size(), s * 1e3);
  EXPECT_EQ(t.decode({ids.begin() + 1, ids.end()}), text);
  // Generous guard against accidental O(n^2) behaviour (typical: a few ms).
  EXPECT_LT(s, 2.0);
}

TEST(TokenizerGemma, AdversarialInputsStayFast) {
  LARQL_REQUIRE_MODEL(model);
  const Tokenizer& t = gemma();
  std::vector<std::pair<std::string, std::string>> inputs;
  std::string s;
  for (int i = 0; s.size() < 30000; ++i) s += "<unused" + std::to_string(i % 6242) + ">";
  inputs.emplace_back("many distinct specials", s);
  inputs.emplace_back("one long word", std::string(30000, 'a'));
  inputs.emplace_back("alternating spaces", [] {
    std::string r;
    for (int i = 0; i < 10000; ++i) r += (i % 2) ? "  x" : " \n";
    return r;
  }());
  std::string bytes;
  uint32_t x = 12345;
  for (int i = 0; i < 30000; ++i) {
    x = x * 1664525u + 1013904223u;  // Numerical Recipes LCG
    bytes.push_back(static_cast<char>(x >> 24));
  }
  inputs.emplace_back("random bytes", bytes);
  for (const auto& [name, text] : inputs) {
    const auto t0 = std::chrono::steady_clock::now();
    const Ids ids = t.encode(text, true, true);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %zu bytes -> %zu tokens in %.1f ms\n", name.c_str(), text.size(), ids.size(), sec * 1e3);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t.vocab_size());
    EXPECT_LT(sec, 2.0) << name;
  }
}

}  // namespace
}  // namespace larql
