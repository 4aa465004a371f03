// The JSON automaton against hand-written documents (RFC 8259's grammar: which are JSON objects,
// which are not), and the vocabulary mask against brute force (every token simulated alone) on
// the default model's 262k-token vocabulary.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kv/generate.h"
#include "server/json_constraint.h"
#include "testlib/real_model.h"

namespace larql::server {
namespace {

bool accepts_prefix(const std::string& text, JsonState* out = nullptr) {
  JsonState s;
  for (unsigned char c : text)
    if (!s.feed(c)) return false;
  if (out) *out = s;
  return true;
}

bool accepts_object(const std::string& text) {
  JsonState s;
  return accepts_prefix(text, &s) && s.done();
}

TEST(JsonState, AcceptsObjects) {
  for (const char* ok : {R"({})", R"({"a":1})", R"( {"a": [1, 2.5, -3e+7, 0, 0.0e0]} )", R"({"s":"\"\\\/\b\f\n\r\tA"})",
                         R"({"e":{}, "arr":[], "n":null, "t":true, "f":false, "nest":[[{"x":[{}]}]]})",
                         "{\"u\":\"h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80\"}", "{\n  \"k\": -0.5\n}"}) {
    // Top-level whitespace before the object is refused on purpose; strip it for this check.
    std::string t(ok);
    t.erase(0, t.find_first_not_of(' '));
    while (!t.empty() && t.back() == ' ') t.pop_back();
    EXPECT_TRUE(accepts_object(t)) << t;
  }
}

TEST(JsonState, RefusesWhatIsNotAnObject) {
  for (const char* bad : {R"([1])", R"("s")", R"(1)", R"({"a"})", R"({"a":})", R"({"a":1,})", R"({,})", R"({"a":01})",
                          R"({"a":1.})", R"({"a":.5})", R"({"a":-})", R"({"a":tru})", R"({"a":nul1})", R"({'a':1})",
                          R"({"a":"\x"})", R"({"a":"\u12G4"})", "{\"a\":\"\x01\"}", "{\"a\":\"\xC0\xAF\"}",
                          "{\"a\":\"\xED\xA0\x80\"}", R"({"a":1}})", R"({"a":1} x)", R"({"a":[1}])", R"( {})"}) {
    EXPECT_FALSE(accepts_object(bad)) << bad;
  }
  EXPECT_TRUE(accepts_prefix(R"({"a":[1,)"));  // a prefix is not an error
  EXPECT_FALSE(accepts_object(R"({"a":[1,)"));
  std::string deep(JsonState::kMaxDepth + 1, '[');
  EXPECT_FALSE(accepts_prefix("{\"a\":" + deep));
  EXPECT_FALSE(accepts_prefix("{" + std::string(JsonState::kMaxWhitespace + 1, ' ')));
}

TEST(JsonVocab, MaskEqualsBruteForceOnTheRealVocabulary) {
  auto* m = larql::testing::shared_real_model();
  if (!m) GTEST_SKIP() << "default model absent";
  const auto t0 = std::chrono::steady_clock::now();
  JsonVocab v(m->tok);
  const double build = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<int32_t> eog = eog_ids(m->tok);
  std::vector<uint8_t> allowed;
  // States: the start, after '{', in a key, after a key, in a value string, in a number,
  // mid-character, done.
  for (const std::string prefix : {"", "{", "{\"na", "{\"name\"", "{\"name\": \"Ca", "{\"a\": [1, -2.", "{\"a\": \"\xE2\x82",
                                   "{\"a\": {\"b\": tr", "{\"a\": 1}"}) {
    JsonState s;
    ASSERT_TRUE(accepts_prefix(prefix, &s)) << prefix;
    const auto a = std::chrono::steady_clock::now();
    v.mask(s, eog, allowed);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
    int64_t n_allowed = 0, mismatches = 0;
    for (int32_t id = 0; id < m->tok.vocab_size(); ++id) {
      JsonState t = s;
      const TokenType type = m->tok.token_type(id);
      bool want = false;
      if (s.done()) {
        want = std::find(eog.begin(), eog.end(), id) != eog.end();
      } else if (type == TokenType::Normal || type == TokenType::Byte) {
        const std::string piece = m->tok.token_to_piece(id);
        want = !piece.empty();
        for (unsigned char c : piece) want = want && t.feed(c);
      }
      n_allowed += allowed[static_cast<size_t>(id)];
      mismatches += want != (allowed[static_cast<size_t>(id)] != 0);
    }
    EXPECT_EQ(mismatches, 0) << "after \"" << prefix << "\"";
    EXPECT_GT(n_allowed, 0);
    std::printf("  mask after %-22s %7lld tokens allowed, %.2f ms\n", ("\"" + prefix + "\"").c_str(),
                static_cast<long long>(n_allowed), ms);
  }
  std::printf("  vocabulary prepared in %.2f s\n", build);
}

}  // namespace
}  // namespace larql::server
