// The LQL parser: each statement form into its tree, clause by clause; errors with positions.
#include "lql/parser.h"

#include <gtest/gtest.h>

#include <string>

#include "util/error.h"

namespace larql::lql {
namespace {

template <typename T>
T one(const std::string& src) {
  const Pipeline p = parse_one(src);
  EXPECT_EQ(p.stages.size(), 1u) << src;
  const T* s = std::get_if<T>(&p.stages.at(0).body);
  EXPECT_NE(s, nullptr) << src;
  return s ? *s : T{};
}

std::string error_of(const std::string& src) {
  try {
    parse_script(src);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    return e.what();
  }
  return "(parsed)";
}

TEST(ParserTest, DescribeWithItsClausesInAnyOrder) {
  const auto d = one<DescribeStmt>("describe \"France\" verbose RELATIONS ONLY knowledge");
  EXPECT_EQ(d.entity, "France");
  EXPECT_EQ(d.detail, Detail::Verbose);
  EXPECT_TRUE(d.relations_only);
  ASSERT_TRUE(d.band.has_value());
  EXPECT_EQ(*d.band, Band::Knowledge);
  const auto a = one<DescribeStmt>("DESCRIBE 'Paris' AT LAYER 9 BRIEF;");
  EXPECT_EQ(a.layer.value(), 9);
  EXPECT_EQ(one<DescribeStmt>("DESCRIBE \"x\" ALL LAYERS").band.value(), Band::All);
}

TEST(ParserTest, WalkInferExplainTrace) {
  const auto w = one<WalkStmt>("WALK \"The capital of France is\" TOP 5 LAYERS 3-9 COMPARE");
  EXPECT_EQ(w.top.value(), 5);
  EXPECT_EQ(w.layers->first, 3);
  EXPECT_EQ(w.layers->last, 9);
  EXPECT_TRUE(w.compare);
  EXPECT_FALSE(one<WalkStmt>("WALK \"x\" LAYERS ALL").layers.has_value());
  const auto i = one<InferStmt>("INFER \"x\" TOP 3 COMPARE");
  EXPECT_EQ(i.top.value(), 3);
  EXPECT_TRUE(i.compare);
  const auto e = one<ExplainStmt>("EXPLAIN INFER \"x\" WITH ATTENTION LAYERS 2 VERBOSE");
  EXPECT_TRUE(e.infer);
  EXPECT_TRUE(e.with_attention);
  EXPECT_EQ(e.layers->first, 2);
  EXPECT_EQ(e.layers->last, 2);
  EXPECT_TRUE(e.verbose);
  EXPECT_FALSE(one<ExplainStmt>("EXPLAIN WALK \"x\" SYNTAX").infer);
  const auto t = one<TraceStmt>("TRACE \"The capital of France is\" FOR \"Paris\" POSITIONS ALL DECOMPOSE LAYERS 0-17");
  EXPECT_EQ(t.target.value(), "Paris");
  EXPECT_TRUE(t.all_positions);
  EXPECT_TRUE(t.decompose);
  EXPECT_EQ(t.layers->last, 17);
}

TEST(ParserTest, SelectWithFieldsConditionsOrderAndLimit) {
  const auto s = one<SelectStmt>(
      "SELECT layer, feature, token FROM EDGES NEAREST TO \"Paris\" AT LAYER 9 "
      "WHERE score > -0.5 AND (relation LIKE 'cap%' OR NOT layer IN (1, 2, 3)) AND feature NOT BETWEEN 10 AND 20 "
      "ORDER BY score DESC LIMIT 7");
  EXPECT_EQ(s.fields, (std::vector<std::string>{"layer", "feature", "token"}));
  EXPECT_EQ(s.from, SelectStmt::From::Edges);
  EXPECT_EQ(s.nearest.value(), "Paris");
  EXPECT_EQ(s.nearest_layer.value(), 9);
  ASSERT_TRUE(s.where.has_value());
  // AND(score > -0.5, OR(LIKE, NOT IN), NOT BETWEEN): a chain is one node, its terms in order.
  const Cond& w = *s.where;
  EXPECT_EQ(w.kind, Cond::Kind::And);
  ASSERT_EQ(w.args.size(), 3u);
  EXPECT_EQ(w.pos.str(), "1:90");  // the first AND
  EXPECT_EQ(w.args[0].kind, Cond::Kind::Compare);
  EXPECT_EQ(w.args[0].op, ">");
  EXPECT_DOUBLE_EQ(w.args[0].values.at(0).number, -0.5);
  const Cond& o = w.args[1];
  EXPECT_EQ(o.kind, Cond::Kind::Or);
  ASSERT_EQ(o.args.size(), 2u);
  EXPECT_EQ(o.args[0].kind, Cond::Kind::Like);
  EXPECT_EQ(o.args[1].kind, Cond::Kind::Not);
  EXPECT_EQ(o.args[1].args.at(0).values.size(), 3u);
  EXPECT_EQ(w.args[2].kind, Cond::Kind::Not);
  EXPECT_EQ(w.args[2].args.at(0).kind, Cond::Kind::Between);
  EXPECT_EQ(w.args[2].args.at(0).values.at(1).integer, 20);
  EXPECT_EQ(s.order_by.value(), "score");
  EXPECT_TRUE(s.descending);
  EXPECT_EQ(s.limit.value(), 7);
  EXPECT_TRUE(one<SelectStmt>("SELECT * FROM ENTITIES").fields.empty());
}

TEST(ParserTest, EditsPatchesDiffCompileAndShow) {
  const auto ins = one<InsertStmt>(
      "INSERT INTO EDGES (entity, relation, target) VALUES (\"Atlantis\", \"capital\", \"Poseidonia\") AT LAYER 12 CONFIDENCE 0.9");
  EXPECT_EQ(ins.entity, "Atlantis");
  EXPECT_EQ(ins.target, "Poseidonia");
  EXPECT_EQ(ins.layer.value(), 12);
  EXPECT_DOUBLE_EQ(ins.confidence.value(), 0.9);
  const auto up = one<UpdateStmt>("UPDATE EDGES SET target = \"Lyon\", confidence = 0.5 WHERE entity = \"France\"");
  EXPECT_EQ(up.set.size(), 2u);
  EXPECT_EQ(up.set[1].value.kind, Value::Kind::Float);
  EXPECT_EQ(one<DeleteStmt>("DELETE FROM EDGES WHERE layer = 3").where.values.at(0).integer, 3);
  EXPECT_EQ(one<PatchStmt>("BEGIN PATCH \"edits.vlp\"").op, PatchStmt::Op::Begin);
  EXPECT_EQ(one<PatchStmt>("SAVE PATCH").op, PatchStmt::Op::Save);
  EXPECT_EQ(one<PatchStmt>("REMOVE PATCH 'edits.vlp'").name, "edits.vlp");
  const auto d = one<DiffStmt>("DIFF CURRENT \"other.vindex\" LAYER 4 LIMIT 10 INTO PATCH \"d.vlp\"");
  EXPECT_TRUE(d.a.current);
  EXPECT_EQ(d.b.path, "other.vindex");
  EXPECT_EQ(d.into_patch.value(), "d.vlp");
  EXPECT_TRUE(one<CompileStmt>("COMPILE CURRENT INTO MODEL \"out.gguf\"").into_model);
  EXPECT_FALSE(one<CompileStmt>("COMPILE \"a.vindex\" INTO VINDEX \"b.vindex\"").into_model);
  EXPECT_EQ(one<ShowStmt>("SHOW LAYERS 2-5").range->last, 5);
  const auto f = one<ShowStmt>("SHOW FEATURES 9 WHERE token = \"Paris\" LIMIT 4");
  EXPECT_EQ(f.layer.value(), 9);
  EXPECT_EQ(f.limit.value(), 4);
  EXPECT_TRUE(one<ShowStmt>("SHOW RELATIONS AT LAYER 3 WITH EXAMPLES RAW").with_examples);
  EXPECT_EQ(one<UseStmt>("USE \"gemma.vindex\"").path, "gemma.vindex");
}

TEST(ParserTest, ScriptsAndPipes) {
  const auto s = parse_script("USE \"a.vindex\"; -- comment\nSTATS;\n\nWALK \"x\" |> INFER \"x\"");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[2].stages.size(), 2u);
  EXPECT_EQ(s[2].pos.str(), "4:1");
  EXPECT_TRUE(parse_script("  -- nothing\n ;; ").empty());
}

TEST(ParserTest, ErrorsSayWhatWasExpectedWhere) {
  EXPECT_EQ(error_of("DESCRIBE \"France\" AT LAYR 3"), "expected LAYER at 1:22, found \"LAYR\"");
  EXPECT_EQ(error_of("WALK \"x\" TOP 3 TOP 4"), "TOP given twice at 1:16");
  EXPECT_EQ(error_of("WALK \"x\" LAYERS 9-3"), "layer range 9-3 at 1:17 ends before it starts");
  EXPECT_NE(error_of("SELEC * FROM EDGES").find("expected a statement"), std::string::npos);
  EXPECT_EQ(error_of("WALK \"x\" MODE PURE"), "expected \";\" or end of input at 1:10, found \"MODE\"");
  EXPECT_EQ(error_of("SELECT * FROM EDGES LIMIT -2"), "a LIMIT must not be negative at 1:27");
  EXPECT_EQ(error_of("WALK France"), "expected a prompt (a quoted string) at 1:6, found \"France\"");
  EXPECT_EQ(error_of("SELECT * FROM EDGES WHERE layer ~ 3"), "unexpected character '~' at 1:33");
  EXPECT_NE(error_of("SELECT * FROM EDGES WHERE layer 3").find("LIKE, IN or BETWEEN after \"layer\" at 1:33"), std::string::npos);
  EXPECT_EQ(error_of("EXPLAIN \"x\""), "expected WALK or INFER at 1:9, found string \"x\"");
  EXPECT_EQ(error_of("INSERT INTO EDGES (entity, target, relation) VALUES (\"a\", \"b\", \"c\")"),
            "the columns are (entity, relation, target); found \"target\" at 1:28");
  EXPECT_EQ(error_of("DESCRIBE \"x\"\n  AT LAYER"), "expected a layer number (a non-negative integer) at 2:11, found end of input");
  EXPECT_EQ(error_of("EXPLAIN WALK \"x\" WITH ATTENTION"), "expected \";\" or end of input at 1:18, found \"WITH\"");
  // NEAREST TO needs AT LAYER from EDGES (the layer scanned); from ENTITIES it is optional.
  EXPECT_EQ(error_of("SELECT * FROM EDGES NEAREST TO \"x\" LIMIT 3"), "expected AT at 1:36, found \"LIMIT\"");
  EXPECT_EQ(error_of("SELECT * FROM ENTITIES NEAREST TO \"x\" AT 3"), "expected LAYER at 1:42, found \"3\"");
  EXPECT_THROW(parse_one("STATS; STATS"), Error);
  // Nesting is bounded (the parser recurses): 256 levels parse, deeper is an error, not a crash.
  EXPECT_NO_THROW(parse_one("SELECT * FROM EDGES WHERE " + std::string(255, '(') + "layer = 1" + std::string(255, ')')));
  EXPECT_NE(error_of("SELECT * FROM EDGES WHERE " + std::string(20000, '(') + "layer = 1" + std::string(20000, ')'))
                .find("nested more than 256 deep"),
            std::string::npos);
  std::string nots;
  for (int i = 0; i < 20000; ++i) nots += "NOT ";
  EXPECT_NE(error_of("SELECT * FROM EDGES WHERE " + nots + "layer = 1").find("nested more than 256 deep"), std::string::npos);
}

// A flat chain of ANDs / ORs is one node however long (no recursion per term); a WHERE holds at
// most kMaxConditions predicates, and the next one is an error at its position, not a crash.
TEST(ParserTest, LongChainsAreFlatAndBounded) {
  auto chain = [](size_t n, const std::string& op) {
    std::string w = "layer = 1";
    for (size_t i = 1; i < n; ++i) w += " " + op + " layer = 1";
    return w;
  };
  for (const std::string op : {"OR", "AND"}) {
    const auto s = one<SelectStmt>("SELECT * FROM EDGES WHERE " + chain(kMaxConditions, op) + " LIMIT 1");
    ASSERT_TRUE(s.where.has_value());
    EXPECT_EQ(s.where->kind, op == "OR" ? Cond::Kind::Or : Cond::Kind::And);
    EXPECT_EQ(s.where->args.size(), 4096u);
    EXPECT_EQ(s.limit.value(), 1);
    // 30,000 and 50,000 terms (the user's report: a segfault in the type check). "SELECT * FROM
    // EDGES WHERE " is 26 characters and the first term 9; each further " OR layer = 1" is 13
    // (" AND layer = 1" 14), its field 4 (5) in: term 4097's field is at 26 + 9 + 4095 * 13 + 4 +
    // 1 = 53275 (AND: 26 + 9 + 4095 * 14 + 5 + 1 = 57371).
    for (size_t n : {30000u, 50000u}) {
      const std::string e = error_of("SELECT * FROM EDGES WHERE " + chain(n, op) + " LIMIT 1");
      EXPECT_EQ(e.rfind("WHERE has more than 4096 conditions", 0), 0u) << e.substr(0, 200);
      EXPECT_NE(e.find(op == "OR" ? "at 1:53275" : "at 1:57371"), std::string::npos) << e.substr(0, 200);
    }
  }
  // Every WHERE counts afresh: two clauses of 4096 in one script are fine.
  EXPECT_EQ(parse_script("DELETE FROM EDGES WHERE " + chain(4096, "OR") + "; SHOW FEATURES 1 WHERE " + chain(4096, "AND")).size(), 2u);
  // Parenthesised groups count too: the bound is on predicates, not on one chain.
  std::string groups = "(" + chain(2048, "OR") + ") AND (" + chain(2049, "OR") + ")";
  EXPECT_NE(error_of("SELECT * FROM EDGES WHERE " + groups).find("more than 4096 conditions"), std::string::npos);
}

TEST(ParserTest, UpdateSetsEachFieldOnce) {
  EXPECT_EQ(error_of("UPDATE EDGES SET target = \"Lyon\", target = \"Rome\" WHERE layer = 3 AND feature = 1"),
            "SET target given twice at 1:35");
  EXPECT_EQ(error_of("UPDATE EDGES SET target = 'a', TARGET = 'b' WHERE layer = 3"), "SET target given twice at 1:32");
  const auto up = one<UpdateStmt>("UPDATE EDGES SET target = 'a' WHERE layer = 3");
  EXPECT_EQ(up.set.at(0).pos.str(), "1:18");
  EXPECT_EQ(up.set.at(0).value.pos.str(), "1:27");
}

// The AST carries where each layer number and field name was written (the executor's range and
// unknown-field errors name them).
TEST(ParserTest, LayerNumbersAndFieldsKeepTheirPositions) {
  const auto sh = one<ShowStmt>("SHOW LAYERS 0-99");
  EXPECT_EQ(sh.range->first_pos.str(), "1:13");
  EXPECT_EQ(sh.range->last_pos.str(), "1:15");
  EXPECT_EQ(one<ShowStmt>("SHOW LAYERS 7").range->last_pos.str(), "1:13");
  EXPECT_EQ(one<DescribeStmt>("DESCRIBE 'x' AT LAYER 18").layer_pos.str(), "1:23");
  EXPECT_EQ(one<TraceStmt>("TRACE 'p' LAYERS 3-99").layers->last_pos.str(), "1:20");
  EXPECT_EQ(one<DiffStmt>("DIFF CURRENT 'b' LAYER 99").layer_pos.str(), "1:24");
  EXPECT_EQ(one<DiffStmt>("DIFF CURRENT 'b'").b.pos.str(), "1:14");
  EXPECT_EQ(one<InsertStmt>("INSERT INTO EDGES (entity, relation, target) VALUES ('a', 'b', 'c') AT LAYER 18")
                .layer_pos.str(),
            "1:78");
  EXPECT_EQ(one<ShowStmt>("SHOW FEATURES 12").layer_pos.str(), "1:15");
  const auto sel = one<SelectStmt>("SELECT layer, foo FROM EDGES NEAREST TO 'x' AT LAYER 30 ORDER BY bar");
  ASSERT_EQ(sel.field_pos.size(), 2u);
  EXPECT_EQ(sel.field_pos[1].str(), "1:15");
  EXPECT_EQ(sel.nearest_layer_pos.str(), "1:54");
  EXPECT_EQ(sel.order_by_pos.str(), "1:66");
}

// Columns count code points, not bytes (docs/lql.md "Lexical"): "Ünïcødé 日本語" is 11 code
// points in 23 bytes, so LAYR is at 1 + 9 ("DESCRIBE ") + 13 (the quoted string) + 4 (" AT ").
TEST(ParserTest, ColumnsCountCodePoints) {
  EXPECT_EQ(error_of("DESCRIBE \"Ünïcødé 日本語\" AT LAYR 3"), "expected LAYER at 1:27, found \"LAYR\"");
  EXPECT_EQ(error_of("WALK '日本' TOPP"), "expected \";\" or end of input at 1:11, found \"TOPP\"");
  // A string over two lines: the line restarts the count.
  EXPECT_EQ(error_of("WALK '日本\né' TOPP"), "expected \";\" or end of input at 2:4, found \"TOPP\"");
  // Not valid UTF-8: each bad byte counts as one (here \xFF and a lone continuation byte \x80).
  EXPECT_EQ(error_of("WALK '\xFF\x80' TOPP"), "expected \";\" or end of input at 1:11, found \"TOPP\"");
  EXPECT_EQ(error_of("WALK 'x' 日"), "unexpected character '日' at 1:10");
}

}  // namespace
}  // namespace larql::lql

namespace larql::lql {
namespace {

TEST(ParserTest, InsertModeAndInferVerify) {
  const std::string ins = "INSERT INTO EDGES (entity, relation, target) VALUES (\"A\", \"r\", \"T\")";
  EXPECT_FALSE(one<InsertStmt>(ins).mode.has_value());  // the executor's default: COMPOSE
  EXPECT_EQ(one<InsertStmt>(ins + " MODE KNN").mode.value(), InsertMode::Knn);
  EXPECT_EQ(one<InsertStmt>(ins + " mode compose AT LAYER 3").mode.value(), InsertMode::Compose);
  const auto both = one<InsertStmt>(ins + " AT LAYER 4 MODE KNN CONFIDENCE 0.5");
  EXPECT_EQ(both.layer.value(), 4);
  EXPECT_EQ(both.mode.value(), InsertMode::Knn);
  EXPECT_EQ(one<InsertStmt>(ins + " MODE Robust ALPHA 2").mode.value(), InsertMode::Robust);
  EXPECT_NE(error_of(ins + " MODE FAST").find("expected KNN, COMPOSE, ROBUST or SUBJECT at 1:74"), std::string::npos) << error_of(ins + " MODE FAST");
  EXPECT_NE(error_of(ins + " MODE KNN MODE KNN").find("MODE given twice at 1:78"), std::string::npos) << error_of(ins + " MODE KNN MODE KNN");
  EXPECT_TRUE(one<InferStmt>("INFER \"x\"").verify);
  EXPECT_FALSE(one<InferStmt>("INFER \"x\" VERIFY OFF TOP 3").verify);
  EXPECT_TRUE(one<InferStmt>("INFER \"x\" VERIFY ON").verify_given);
  EXPECT_NE(error_of("INFER \"x\" VERIFY MAYBE").find("expected ON or OFF at 1:18"), std::string::npos) << error_of("INFER \"x\" VERIFY MAYBE");
}

}  // namespace
}  // namespace larql::lql
