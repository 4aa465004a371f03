// The pieces of LQL over HTTP that need no model (server/lql_routes.h): quoting an entity so that
// the LQL lexer reads back exactly it (checked by parsing the statement with lql::parse_one, an
// independent path), query-string decoding, and the statement each browse route builds.
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "lql/parser.h"
#include "server/lql_routes.h"
#include "util/error.h"

namespace larql::server {
namespace {

TEST(LqlQuote, ReadsBackAsTheSameTextWhateverItHolds) {
  for (const std::string& e : {std::string("France"), std::string("say \"hi\"; DROP"), std::string("a\\b"),
                               std::string("it's -- not a comment"), std::string("line\nbreak\ttab\rcr"),
                               std::string("\";USE \"/etc"), std::string("caf\xc3\xa9")}) {
    const auto p = lql::parse_one("DESCRIBE " + lql_quote(e));
    ASSERT_EQ(p.stages.size(), 1u) << e;
    const auto* d = std::get_if<lql::DescribeStmt>(&p.stages[0].body);
    ASSERT_NE(d, nullptr) << e;
    EXPECT_EQ(d->entity, e);
  }
}

TEST(LqlParseQuery, DecodesAndRefusesWhatItDoesNotKnow) {
  auto q = parse_query("entity=New+York%3B%22x&layer=3", {"entity", "layer"});
  EXPECT_EQ(q["entity"], "New York;\"x");
  EXPECT_EQ(q["layer"], "3");
  EXPECT_TRUE(parse_query("", {"entity"}).empty());
  EXPECT_THROW(parse_query("entity=a&entity=b", {"entity"}), Error);
  EXPECT_THROW(parse_query("entity=%zz", {"entity"}), Error);
  EXPECT_THROW(parse_query("entity=%4", {"entity"}), Error);
  try {
    parse_query("nope=1", {"entity", "layer"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("nope:", 0), 0u) << e.what();
  }
}

TEST(LqlBrowse, BuildsTheStatementOfEachRoute) {
  int64_t limit = 0;
  EXPECT_EQ(browse_statement("/v1/describe", {{"entity", "France"}}, &limit), "DESCRIBE \"France\"");
  EXPECT_EQ(limit, -1);
  EXPECT_EQ(browse_statement("/v1/describe", {{"entity", "a\"b;c"}, {"layer", "9"}, {"limit", "3"}}, &limit),
            "DESCRIBE \"a\\\"b;c\" AT LAYER 9");
  EXPECT_EQ(limit, 3);
  EXPECT_EQ(browse_statement("/v1/walk", {{"prompt", "The capital"}, {"top", "3"}, {"layers", "4-6"}}, &limit),
            "WALK \"The capital\" TOP 3 LAYERS 4-6");
  EXPECT_EQ(browse_statement("/v1/select", {{"nearest", "Paris"}, {"layer", "9"}, {"limit", "5"}}, &limit),
            "SELECT * FROM EDGES NEAREST TO \"Paris\" AT LAYER 9 LIMIT 5");
  EXPECT_EQ(browse_statement("/v1/select", {{"entity", "Paris"}, {"layer", "9"}}, &limit),
            "SELECT * FROM EDGES WHERE layer = 9 AND token = \"Paris\"");
  EXPECT_EQ(browse_statement("/v1/relations", {}, &limit), "SHOW RELATIONS");
  EXPECT_EQ(browse_statement("/v1/stats", {}, &limit), "STATS");
  EXPECT_EQ(browse_statement("/v1/infer", {{"prompt", "Hi"}, {"top", "2"}}, &limit), "INFER \"Hi\" TOP 2");
  // Every statement built parses.
  for (const auto& s : {browse_statement("/v1/describe", {{"entity", "x"}, {"band", "all"}, {"detail", "raw"}}, &limit),
                        browse_statement("/v1/walk", {{"prompt", "p"}, {"layers", "3"}}, &limit)})
    EXPECT_NO_THROW(lql::parse_one(s)) << s;
}

TEST(LqlBrowse, BadParametersNameTheParameter) {
  int64_t limit = 0;
  auto param_of = [&](const std::string& path, std::map<std::string, std::string> p) {
    try {
      browse_statement(path, p, &limit);
    } catch (const Error& e) {
      const std::string m = e.what();
      return m.substr(0, m.find(':'));
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(param_of("/v1/describe", {}), "entity");
  EXPECT_EQ(param_of("/v1/describe", {{"entity", ""}}), "entity");
  EXPECT_EQ(param_of("/v1/describe", {{"entity", "x"}, {"layer", "-1"}}), "layer");
  EXPECT_EQ(param_of("/v1/describe", {{"entity", "x"}, {"layer", "1e3"}}), "layer");
  EXPECT_EQ(param_of("/v1/describe", {{"entity", "x"}, {"limit", "0"}}), "limit");
  EXPECT_EQ(param_of("/v1/describe", {{"entity", "x"}, {"band", "middle"}}), "band");
  EXPECT_EQ(param_of("/v1/walk", {{"prompt", "p"}, {"top", "99999999999"}}), "top");
  EXPECT_EQ(param_of("/v1/walk", {{"prompt", "p"}, {"layers", "1-2; STATS"}}), "layers");
  EXPECT_EQ(param_of("/v1/select", {{"nearest", "p"}}), "layer");
  EXPECT_EQ(param_of("/v1/select", {{"nearest", "p"}, {"entity", "q"}, {"layer", "1"}}), "nearest");
  EXPECT_EQ(param_of("/v1/infer", {}), "prompt");
  // A range that ends before it starts: LQL's parser would refuse the built statement at a column
  // the client never wrote (lql_syntax at 1:27); the route names the parameter instead.
  EXPECT_EQ(param_of("/v1/walk", {{"prompt", "x"}, {"layers", "3-1"}}), "layers");
  try {
    browse_statement("/v1/walk", {{"prompt", "x"}, {"layers", "3-1"}}, &limit);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "layers: 3-1 is not a range (first > last)");
  }
  // Text that is not UTF-8 (or holds a NUL) is named too.
  EXPECT_EQ(param_of("/v1/describe", {{"entity", "caf\xe9"}}), "entity");
  EXPECT_EQ(param_of("/v1/walk", {{"prompt", std::string("a\0b", 3)}}), "prompt");
  EXPECT_EQ(param_of("/v1/select", {{"nearest", "\xff"}, {"layer", "1"}}), "nearest");
}

TEST(LqlBrowse, LayersPastTheVindexNameTheParameter) {
  int64_t limit = 0;
  auto message_of = [&](const std::string& path, std::map<std::string, std::string> p) {
    try {
      browse_statement(path, p, &limit, /*num_layers=*/18);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(message_of("/v1/describe", {{"entity", "x"}, {"layer", "18"}}), "layer: 18 is out of range (the vindex has layers 0-17)");
  EXPECT_EQ(message_of("/v1/walk", {{"prompt", "x"}, {"layers", "3-40"}}), "layers: 40 is out of range (the vindex has layers 0-17)");
  EXPECT_EQ(message_of("/v1/select", {{"nearest", "x"}, {"layer", "99"}}).substr(0, 6), "layer:");
  EXPECT_EQ(message_of("/v1/relations", {{"layer", "18"}}).substr(0, 6), "layer:");
  EXPECT_EQ(browse_statement("/v1/walk", {{"prompt", "x"}, {"layers", "17"}}, &limit, 18), "WALK \"x\" LAYERS 17");
  EXPECT_EQ(browse_statement("/v1/walk", {{"prompt", "x"}, {"layers", "007-17"}}, &limit, 18), "WALK \"x\" LAYERS 7-17");
  // Whatever the routes accept parses as one statement.
  for (const std::string& layers : {"0", "0-17", "5-5", "17"})
    EXPECT_NO_THROW(lql::parse_one(browse_statement("/v1/walk", {{"prompt", "p \" ;"}, {"top", "3"}, {"layers", layers}}, &limit, 18)))
        << layers;
}

}  // namespace
}  // namespace larql::server
