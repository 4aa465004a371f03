// The printer (lql/printer.h): hand-written canonical texts for each statement, and the
// parse -> print -> parse -> print fixpoint over every example of docs/lql.md.
#include "lql/printer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "lql/parser.h"
#include "util/error.h"

namespace larql::lql {
namespace {

std::string canon(const std::string& src) { return to_lql(parse_one(src)); }

TEST(PrinterTest, CanonicalTextPerStatement) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"use 'a.vindex'", "USE \"a.vindex\""},
      {"show layers 3", "SHOW LAYERS 3-3"},
      {"show relations with examples at layer 4 verbose", "SHOW RELATIONS AT LAYER 4 WITH EXAMPLES VERBOSE"},
      {"show features 2 where score > 0.5 limit 3", "SHOW FEATURES 2 WHERE score > 0.5 LIMIT 3"},
      {"describe \"Fr\\\"ance\" raw knowledge relations only", "DESCRIBE \"Fr\\\"ance\" KNOWLEDGE RAW RELATIONS ONLY"},
      {"describe 'x' all layers", "DESCRIBE \"x\" ALL LAYERS"},
      {"walk 'p' layers all top 3", "WALK \"p\" TOP 3"},
      {"explain infer 'p' with attention verbose", "EXPLAIN INFER \"p\" VERBOSE WITH ATTENTION"},
      {"select layer, token from edges nearest to 'a' at layer 9 where not (a = 1 or b != -2) and c in (1, 'x') "
       "order by score limit 5",
       "SELECT layer, token FROM EDGES NEAREST TO \"a\" AT LAYER 9 WHERE NOT (a = 1 OR b != -2) AND c IN (1, \"x\") "
       "ORDER BY score ASC LIMIT 5"},
      {"select * from features where token not like 'P%' order by layer desc",
       "SELECT * FROM FEATURES WHERE token NOT LIKE \"P%\" ORDER BY layer DESC"},
      // Chains are n-ary; only the parentheses the tree needs are printed.
      {"select * from features where a = 1 and b = 2 and c = 3 or d = 4 or not (e = 5 and f = 6)",
       "SELECT * FROM FEATURES WHERE a = 1 AND b = 2 AND c = 3 OR d = 4 OR NOT (e = 5 AND f = 6)"},
      {"select * from features where (a = 1 or b = 2) and (c = 3 and d = 4) and ((e = 5))",
       "SELECT * FROM FEATURES WHERE (a = 1 OR b = 2) AND (c = 3 AND d = 4) AND e = 5"},
      {"select * from features where a = 1 or (b = 2 or c = 3) or not not x in (1) or not y between 1 and 2",
       "SELECT * FROM FEATURES WHERE a = 1 OR (b = 2 OR c = 3) OR NOT x NOT IN (1) OR y NOT BETWEEN 1 AND 2"},
      {"select * from entities where score between -0.25 and 3", "SELECT * FROM ENTITIES WHERE score BETWEEN -0.25 AND 3"},
      {"trace 'p' decompose positions all for 'x'", "TRACE \"p\" FOR \"x\" POSITIONS ALL DECOMPOSE"},
      {"trace 'p' positions last", "TRACE \"p\""},
      {"insert into edges (entity, relation, target) values ('a', 'b', 'c\\n') alpha 2 at layer 3",
       "INSERT INTO EDGES (entity, relation, target) VALUES (\"a\", \"b\", \"c\\n\") AT LAYER 3 ALPHA 2.0"},
      {"insert into edges (entity, relation, target) values ('a', 'b', 'c') mode knn confidence 0.5",
       "INSERT INTO EDGES (entity, relation, target) VALUES (\"a\", \"b\", \"c\") CONFIDENCE 0.5 MODE KNN"},
      {"insert into edges (entity, relation, target) values ('a', 'b', 'c') mode robust alpha 2",
       "INSERT INTO EDGES (entity, relation, target) VALUES (\"a\", \"b\", \"c\") ALPHA 2.0 MODE ROBUST"},
      {"infer 'p' verify off top 2", "INFER \"p\" TOP 2 VERIFY OFF"},
      {"infer 'p' verify on", "INFER \"p\" VERIFY ON"},
      {"infer 'p' compare top 3", "INFER \"p\" TOP 3 COMPARE"},
      {"select entity from entities nearest to 'x' limit 4", "SELECT entity FROM ENTITIES NEAREST TO \"x\" LIMIT 4"},
      {"select * from entities nearest to 'x' at layer 2 where cosine > 0.5",
       "SELECT * FROM ENTITIES NEAREST TO \"x\" AT LAYER 2 WHERE cosine > 0.5"},
      {"delete from edges where layer between 1 and 2 and feature in (3, 4)",
       "DELETE FROM EDGES WHERE layer BETWEEN 1 AND 2 AND feature IN (3, 4)"},
      {"diff 'a' current relation 'capital-of' into patch 'd.vlp'",
       "DIFF \"a\" CURRENT RELATION \"capital-of\" INTO PATCH \"d.vlp\""},
      {"update edges set target = 'x', score = 1.5 where entity = 'a'",
       "UPDATE EDGES SET target = \"x\", score = 1.5 WHERE entity = \"a\""},
      {"save patch |> remove patch 'p'", "SAVE PATCH |> REMOVE PATCH \"p\""},
      {"diff current 'b' into patch 'p' limit 2", "DIFF CURRENT \"b\" LIMIT 2 INTO PATCH \"p\""},
      {"compile 'a' into model 'b.gguf'", "COMPILE \"a\" INTO MODEL \"b.gguf\""},
  };
  for (const auto& [src, want] : cases) {
    EXPECT_EQ(canon(src), want) << src;
    EXPECT_EQ(canon(want), want) << want;  // canonical text is a fixpoint
  }
}

// The fuzz target's property on the inputs that broke it: a long chain printed as nested
// parentheses ((a AND b) AND c) ... and re-parsed past the nesting limit; a WHERE at the deepest
// nesting gained a level from the parentheses around the whole chain, or from NOT LIKE printed
// as NOT (... LIKE ...). The printed text must parse back to itself.
TEST(PrinterTest, LongAndDeepConditionsRoundTrip) {
  auto round_trip = [](const std::string& where) {
    const std::string once = canon("SELECT * FROM FEATURES WHERE " + where);
    EXPECT_EQ(canon(once), once) << once.substr(0, 200);
    return once;
  };
  std::string chain = "a = 1";
  for (int i = 1; i < 4096; ++i) chain += " AND a = 1";
  EXPECT_EQ(round_trip(chain), "SELECT * FROM FEATURES WHERE " + chain);
  // Nested to the limit: each level "x = 1 AND (...)" costs one; 255 levels put the innermost
  // predicates at depth 256.
  std::string deep = "y = 1 OR z = 1";
  for (int i = 0; i < 255; ++i) deep = "x = 1 AND (" + deep + ")";
  EXPECT_EQ(round_trip(deep), "SELECT * FROM FEATURES WHERE " + deep);
  std::string nots;
  for (int i = 0; i < 255; ++i) nots += "NOT ";
  EXPECT_EQ(round_trip(nots + "t NOT LIKE 'x'"), "SELECT * FROM FEATURES WHERE " + nots + "t NOT LIKE \"x\"");
}

TEST(PrinterTest, EveryDocExampleRoundTrips) {
  const char* root = std::getenv("LARQL_SOURCE_DIR");
  ASSERT_NE(root, nullptr) << "LARQL_SOURCE_DIR is not set";
  std::ifstream in(std::string(root) + "/docs/lql.md");
  ASSERT_TRUE(in.good());
  std::string line, block;
  bool inside = false;
  int pipelines = 0;
  while (std::getline(in, line)) {
    if (!inside && line.rfind("```lql", 0) == 0) {
      inside = true;
      block.clear();
    } else if (inside && line.rfind("```", 0) == 0) {
      inside = false;
      for (const auto& p : parse_script(block)) {
        const std::string once = to_lql(p);
        const Pipeline again = parse_one(once);
        EXPECT_EQ(again.stages.size(), p.stages.size()) << once;
        EXPECT_EQ(to_lql(again), once);
        ++pipelines;
      }
    } else if (inside) {
      block += line + "\n";
    }
  }
  EXPECT_GT(pipelines, 20);
}

}  // namespace
}  // namespace larql::lql
