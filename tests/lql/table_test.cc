// Result tables as text and JSON; statement splitting for scripts.
#include "lql/table.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "lql/parser.h"
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
    parse_one(c[1].text);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at 2:17"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace larql::lql
