// Result tables as text and JSON; statement splitting for scripts.
#include "lql/table.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "lql/parser.h"
#include "lql/printer.h"
#include "lql/script.h"
#include "util/error.h"

namespace larql::lql {
namespace {

Table sample() {
  Table t;
  t.statement = "SELECT";
  t.title = "T";
  t.columns = {{"n", Column::Type::Int}, {"x", Column::Type::Float, 2}, {"word"}, {"list", Column::Type::List}};
  t.rows = {{int64_t{7}, 1.5, std::string("Paris"), std::vector<std::string>{"a", "b"}},
            {int64_t{12}, Cell{}, std::string("a\nb"), std::vector<std::string>{}}};
  t.notes = {"done"};
  return t;
}

TEST(TableText, AlignsNumbersRightAndTextLeft) {
  EXPECT_EQ(render_text(sample(), 200),
            "T\n"
            " n     x  word   list\n"
            "\xE2\x94\x80\xE2\x94\x80  \xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80  "
            "\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80  \xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\n"
            " 7  1.50  Paris  a, b\n"
            "12     -  a\\nb\n"
            "done\n");
}

TEST(TableText, TokenPiecesWithBlanksAreQuotedAndJsonKeepsThemTrimmed) {
  Table t;
  t.columns = {Column{"token", Column::Type::Text, 4, true}, {"token_id", Column::Type::Int}, {"plain"}};
  t.rows = {{std::string(" Paris"), int64_t{9079}, std::string(" Paris")},
            {std::string("Paris"), int64_t{50429}, std::string("Paris")},
            {std::string(" "), int64_t{236743}, std::string(" ")},
            {std::string("\n"), int64_t{107}, std::string("x")},
            {std::string("end "), int64_t{1}, std::string("x")}};
  const std::string text = render_text(t, 200);
  const std::string body = text.substr(text.find("\n", text.find("\n") + 1) + 1);  // after header and rule
  EXPECT_EQ(body,
            "\" Paris\"      9079   Paris\n"  // the plain column shows its text as it is
            "Paris        50429  Paris\n"
            "\" \"         236743\n"
            "\"\\n\"           107  x\n"
            "\"end \"           1  x\n");
  const auto j = nlohmann::json::parse(render_json(t));
  EXPECT_EQ(j["rows"][0][0], "Paris");
  EXPECT_EQ(j["rows"][0][2], " Paris");  // only token columns are trimmed
  EXPECT_EQ(j["rows"][2][0], " ");       // nothing but blanks: kept
  EXPECT_EQ(j["rows"][3][0], "\n");
  EXPECT_EQ(j["columns"][0]["type"], "text");
}

TEST(TableText, CutsTheWidestTextColumnToTheWidth) {
  Table t;
  t.columns = {{"id", Column::Type::Int}, {"text"}};
  t.rows = {{int64_t{1}, std::string(60, 'z')}};
  const std::string out = render_text(t, 30);
  const auto line = out.substr(out.rfind('\n', out.size() - 2) + 1);
  // "id" (2) + 2 blanks + 26 code points, the last one an ellipsis.
  EXPECT_EQ(line, " 1  " + std::string(25, 'z') + "\xE2\x80\xA6\n");
}

// Columns are padded to terminal cells: 日本 is 4 cells in 2 code points, Thai ที่ (ท + two
// combining marks) 1 cell in 3, e + U+0301 1 in 2. The token column is 5 wide ("token"), n 2.
TEST(TableText, PadsByDisplayWidth) {
  EXPECT_EQ(display_width(U'日'), 2);
  EXPECT_EQ(display_width(U'\u0E48'), 0);  // Thai tone mark (Mn)
  EXPECT_EQ(display_width(U'\u200D'), 0);  // zero-width joiner (Cf)
  EXPECT_EQ(display_width(U'\uFF21'), 2);  // fullwidth A
  EXPECT_EQ(display_width(U'\U0001F600'), 2);  // 😀
  EXPECT_EQ(display_width(U'é'), 1);
  EXPECT_EQ(display_width("a\xFF" "b"), 3u);  // a bad byte is one cell
  Table t;
  t.columns = {{"token"}, {"n", Column::Type::Int}};
  t.rows = {{std::string("日本"), int64_t{1}}, {std::string("ที่"), int64_t{22}}, {std::string("e\u0301"), int64_t{3}}};
  const std::string rule5 = "\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80\xE2\x94\x80";
  EXPECT_EQ(render_text(t, 200),
            "token   n\n" + rule5 + "  \xE2\x94\x80\xE2\x94\x80\n" +
            "日本" + std::string(1 + 2 + 1, ' ') + "1\n" +        // pad 5 - 4, the gap, pad 2 - 1
            "ที่" + std::string(4 + 2, ' ') + "22\n" +             // pad 5 - 1, the gap
            "e\u0301" + std::string(4 + 2 + 1, ' ') + "3\n");  // pad 5 - 1, the gap, pad 2 - 1
  // Cut to 20 cells: nine 2-cell characters (18) and the 1-cell ellipsis; a tenth would need 21.
  Table c;
  c.columns = {{"t"}};
  c.rows = {{std::string("日本語日本語日本語日本語")}};
  const std::string out = render_text(c, 20);
  EXPECT_EQ(out.substr(out.rfind('\n', out.size() - 2) + 1), "日本語日本語日本語\xE2\x80\xA6\n");
}

TEST(TableJson, KeepsTypesAndNullsAndRepairsBadUtf8) {
  Table t = sample();
  t.rows[0][2] = std::string("bad\xFF");
  const auto j = nlohmann::json::parse(render_json(t));
  EXPECT_EQ(j["rows"][0], nlohmann::json::parse(R"([7, 1.5, "bad\ufffd", ["a", "b"]])"));
  EXPECT_TRUE(j["rows"][1][1].is_null());
  EXPECT_EQ(j["rows"][1][2], "a\nb");
  EXPECT_EQ(j["title"], "T");
  EXPECT_EQ(j["notes"][0], "done");
}

TEST(Script, SplitsAtSemicolonsOutsideStringsAndComments) {
  std::string rest;
  const auto c = split_statements("USE 'a;b';\nSTATS; -- no; split\nDESCRIBE \"x", &rest);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].text, "USE 'a;b'");
  EXPECT_EQ(c[1].pos.line, 1);
  EXPECT_EQ(c[1].pos.col, 11);
  EXPECT_EQ(rest, " -- no; split\nDESCRIBE \"x");
  EXPECT_TRUE(split_statements(" ; -- x\n;", &rest).empty());
  EXPECT_TRUE(is_blank(rest));
}

TEST(Script, ErrorsNameThePositionInTheWholeText) {
  std::string rest;
  const auto c = split_statements("STATS;\nDESCRIBE 'x' AT LAYR 2;", &rest);
  ASSERT_EQ(c.size(), 2u);
  try {
    parse_one(c[1].text, c[1].pos);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at 2:17"), std::string::npos) << e.what();
  }
  // Columns count code points (a 3-byte 日 is one): the chunk after "USE '日';" starts at 1:9.
  const auto u = split_statements("USE '日'; DESCRIBE 'x' AT LAYR 2;", &rest);
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[1].pos.str(), "1:9");
  try {
    parse_one(u[1].text, u[1].pos);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "expected LAYER at 1:26, found \"LAYR\"");
  }
}

// A script's last ';' is optional: the unfinished tail is one more statement at its own place, so
// its error names a position in the text as written (not past an appended ";").
std::string script_error(const std::string& src) {
  const auto c = script_statements(src);
  for (const auto& ch : c) {
    try {
      parse_one(ch.text, ch.pos);
    } catch (const Error& e) {
      return e.what();
    }
  }
  return "(parsed " + std::to_string(c.size()) + ")";
}

TEST(Script, TheLastSemicolonIsOptionalAndErrorsAtTheEndNameTheirPlace) {
  EXPECT_EQ(script_error("DESCRIBE \"France\" AT"), "expected LAYER at 1:21, found end of input");
  EXPECT_EQ(script_error("DESCRIBE"), "expected an entity (a quoted string) at 1:9, found end of input");
  EXPECT_EQ(script_error("STATS;\nDESCRIBE \"France;\nSTATS;\n"), "unterminated string at 2:10");
  EXPECT_EQ(script_error("STATS; STATS -- the end"), "(parsed 2)");
  EXPECT_EQ(script_error("STATS;\n  -- only a comment"), "(parsed 1)");
  const auto c = script_statements("STATS;\n  DESCRIBE 'x'");
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].pos.str(), "1:7");  // right after the ';' (the chunk keeps its leading blanks)
}

// The REPL's history entry for a statement typed over lines: one line meaning the same.
TEST(Script, OneLineMeansTheSame) {
  EXPECT_EQ(one_line("SELECT *\n  FROM EDGES -- all\n  -- more\n\n  LIMIT 3\n"), "SELECT * FROM EDGES LIMIT 3");
  EXPECT_EQ(one_line("DESCRIBE 'a\nb\\'c' -- x"), "DESCRIBE 'a\\nb\\'c'");
  EXPECT_EQ(one_line("WALK \"p\"\r\n  TOP 3;"), "WALK \"p\" TOP 3;");
  for (const std::string src : {"SELECT *\n  FROM EDGES -- all\n  LIMIT 3", "DESCRIBE 'a\nb\\'c' -- x",
                                "SELECT * FROM EDGES WHERE layer =\n  -2 OR token LIKE '--x'"})
    EXPECT_EQ(to_lql(parse_one(one_line(src))), to_lql(parse_one(src))) << src;
  EXPECT_EQ(open_quote("DESCRIBE 'ab"), '\'');
  EXPECT_EQ(open_quote("DESCRIBE 'a\\'b"), '\'');
  EXPECT_EQ(open_quote("DESCRIBE 'ab' \"c"), '"');
  EXPECT_EQ(open_quote("STATS -- it's"), 0);
  EXPECT_EQ(open_quote("DESCRIBE 'ab'"), 0);
}

// A chunk holds its own statement only (it was padded with every line and column before it:
// 20,000 statements took 1.6 GB): the chunks of N statements add up to less than the script, on
// one line or on N lines, and positions still come out right.
TEST(Script, ChunksAreAsLongAsTheirStatements) {
  for (const std::string sep : {"", "\n"}) {
    std::string src;
    for (int i = 0; i < 20000; ++i) src += "STATS;" + sep;
    src += "STATS LIMIT 1;";
    std::string rest;
    const auto c = split_statements(src, &rest);
    ASSERT_EQ(c.size(), 20001u);
    size_t total = 0;
    for (const auto& ch : c) total += ch.text.size();
    EXPECT_LE(total, src.size());
    // The last chunk starts right after the last ';' (line 20000 col 7, its text beginning with
    // the newline; on one line col 1 + 20,000 * 6); its LIMIT is 6 columns into line 20001 (1).
    EXPECT_EQ(c.back().pos.str(), sep.empty() ? "1:120001" : "20000:7");
    try {
      parse_one(c.back().text, c.back().pos);
      FAIL();
    } catch (const Error& e) {
      const Pos limit = sep.empty() ? Pos{1, 120007} : Pos{20001, 7};
      EXPECT_EQ(std::string(e.what()), "expected end of input at " + limit.str() + ", found \"LIMIT\"");
    }
  }
}

}  // namespace
}  // namespace larql::lql
