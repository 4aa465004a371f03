// The LQL lexer: tokens, positions, strings and their escapes, comments, and the errors.
#include "lql/lexer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "util/error.h"

namespace larql::lql {
namespace {

std::string lex_error(const std::string& src) {
  try {
    lex(src);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    return e.what();
  }
  return "(no error)";
}

TEST(LexerTest, TokensCarryLineAndColumn) {
  const auto t = lex("WALK \"The capital\"\n  TOP 5 -- a comment\n LAYERS 3-7 |> STATS;");
  ASSERT_EQ(t.size(), 12u);
  EXPECT_EQ(t[0].kind, TokKind::Word);
  EXPECT_EQ(t[0].text, "WALK");
  EXPECT_EQ(t[1].kind, TokKind::String);
  EXPECT_EQ(t[1].text, "The capital");
  EXPECT_EQ(t[1].pos.str(), "1:6");
  EXPECT_EQ(t[2].pos.str(), "2:3");
  EXPECT_EQ(t[3].kind, TokKind::Integer);
  EXPECT_EQ(t[3].integer, 5);
  EXPECT_EQ(t[4].text, "LAYERS");
  EXPECT_EQ(t[4].pos.str(), "3:2");
  EXPECT_EQ(t[6].text, "-");
  EXPECT_EQ(t[8].text, "|>");
  EXPECT_EQ(t[10].text, ";");
  EXPECT_EQ(t[11].kind, TokKind::End);
}

TEST(LexerTest, StringsNumbersAndOperators) {
  const auto t = lex(R"('it\'s' "a\\b\n" 0.25 >= != <= 12)");
  EXPECT_EQ(t[0].text, "it's");
  EXPECT_EQ(t[1].text, "a\\b\n");
  EXPECT_EQ(t[2].kind, TokKind::Float);
  EXPECT_DOUBLE_EQ(t[2].number, 0.25);
  EXPECT_EQ(t[3].text, ">=");
  EXPECT_EQ(t[4].text, "!=");
  EXPECT_EQ(t[5].text, "<=");
  EXPECT_EQ(t[6].integer, 12);
  // "5." is an integer then an unexpected '.'.
  EXPECT_NE(lex_error("LIMIT 5.").find("unexpected character '.' at 1:8"), std::string::npos);
}

TEST(LexerTest, ErrorsNameThePlace) {
  EXPECT_NE(lex_error("DESCRIBE \"France").find("unterminated string at 1:10"), std::string::npos);
  EXPECT_NE(lex_error("WALK \"a\\qb\"").find("unknown escape \\q"), std::string::npos);
  EXPECT_NE(lex_error("WALK \"x\" | STATS").find("a lone '|' (the pipe is |>) at 1:10"), std::string::npos);
  EXPECT_NE(lex_error("a ! b").find("a lone '!' (not equal is !=) at 1:3"), std::string::npos);
  EXPECT_EQ(lex_error("LIMIT 18446744073709551615"),
            "integer 18446744073709551615 does not fit in a signed 64-bit integer (the largest is 9223372036854775807) at 1:7");
  EXPECT_EQ(lex("9223372036854775807").at(0).integer, INT64_MAX);
  EXPECT_EQ(lex_error("LIMIT 9223372036854775808").rfind("integer 9223372036854775808 does not fit", 0), 0u);
  EXPECT_NE(lex_error("\n\n  @").find("unexpected character '@' at 3:3"), std::string::npos);
}

// Columns are code points: 2-, 3- and 4-byte UTF-8 each count one, bad bytes one each; a start
// position continues a larger text (script.h's chunks).
TEST(LexerTest, ColumnsCountCodePointsFromTheStart) {
  const auto t = lex("'é日😀' x\n'\xC3' y", Pos{5, 3});
  ASSERT_EQ(t.size(), 5u);
  EXPECT_EQ(t[0].pos.str(), "5:3");
  EXPECT_EQ(t[1].pos.str(), "5:9");  // 3 + quote + 3 code points + quote + blank
  EXPECT_EQ(t[3].pos.str(), "6:5");  // a lone lead byte \xC3 counts one: ' \xC3 ' blank
  EXPECT_EQ(utf8_sequence_length("\xE0\x80\x80", 0), 1u);  // overlong
  EXPECT_EQ(utf8_sequence_length("\xED\xA0\x80", 0), 1u);  // a surrogate
  EXPECT_EQ(utf8_sequence_length("\xF4\x90\x80\x80", 0), 1u);  // above U+10FFFF
  EXPECT_EQ(utf8_sequence_length("\xF0\x9F\x98\x80", 0), 4u);
  EXPECT_EQ(utf8_sequence_length("\xE6\x97", 0), 1u);  // cut short
}

}  // namespace
}  // namespace larql::lql
