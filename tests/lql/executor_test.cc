// The executor on a hand-made vindex (2 layers, 4 features, hidden 4, a 10-token vocabulary)
// whose gate vectors, embeddings and down_meta are chosen so that every result below is derived
// by hand in the comments, not taken from the code under test.
#include "lql/executor.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lql/exec_internal.h"
#include "lql/parser.h"
#include "testlib/paths.h"
#include "testlib/tiny_vindex.h"
#include "util/error.h"
#include "vindex/index.h"

namespace larql::lql {
namespace {

namespace fs = std::filesystem;

using namespace larql::testing::tiny;

// The shared hand-made vindex (tests/testlib/tiny_vindex.h), written once per process.
std::string tiny_vindex() {
  static const std::string dir = [] {
    const fs::path d = testing::process_temp_dir("larql-lql-exec-test") / "tiny.vindex";
    testing::write_tiny_vindex(d);
    return d.string();
  }();
  return dir;
}

struct Fixture : ::testing::Test {
  Session session{SessionOptions{1, "."}};
  Executor exec{session};
  void SetUp() override { session.use(tiny_vindex()); }
  Table run(const std::string& src) {
    auto r = exec.run(parse_one(src));
    EXPECT_EQ(r.size(), 1u);
    return r.at(0);
  }
  std::string error_of(const std::string& src, ErrorKind kind = ErrorKind::Unsupported) {
    try {
      run(src);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      return e.what();
    }
    return "(ran)";
  }
};

Cell at(const Table& t, size_t row, const std::string& col) {
  const int c = t.column(col);
  EXPECT_GE(c, 0) << col;
  return c < 0 ? Cell{} : t.rows.at(row).at(static_cast<size_t>(c));
}
int64_t as_int(const Cell& c) { return std::get<int64_t>(c); }
double as_num(const Cell& c) { return std::get<double>(c); }
std::string as_text(const Cell& c) { return std::get<std::string>(c); }

TEST_F(Fixture, StatsAndLayersCountWhatTheFilesHold) {
  const Table s = run("STATS");
  auto value = [&](const std::string& k) {
    for (const auto& r : s.rows)
      if (as_text(r[0]) == k) return as_text(r[1]);
    return std::string("(absent)");
  };
  EXPECT_EQ(value("features"), "8");
  EXPECT_EQ(value("syntax"), "0-0");
  EXPECT_EQ(value("knowledge"), "1-1");
  EXPECT_EQ(value("output"), "-");
  const Table l = run("SHOW LAYERS");
  ASSERT_EQ(l.rows.size(), 2u);
  EXPECT_EQ(as_int(at(l, 0, "with_meta")), 4);  // memory-mapped down_meta is read (not zeros)
  // Layer 0's top tokens xy, ab, c, y once each: the tie goes to the lowest id, c.
  EXPECT_EQ(as_text(at(l, 0, "top_token")), "c");
  EXPECT_EQ(as_text(at(l, 1, "band")), "knowledge");
  EXPECT_EQ(run("SHOW LAYERS 1").rows.size(), 1u);
}

TEST_F(Fixture, GateKnnRanksByAbsoluteScoreKeepingTheSign) {
  // q = 2 abc = 2 e0. Layer 1 scores: f0 0, f1 8, f2 -2, f3 1 -> by |score|: f1, f2.
  const Table t = run("SELECT feature, score, token FROM EDGES NEAREST TO \"abc\" AT LAYER 1 LIMIT 2");
  ASSERT_EQ(t.rows.size(), 2u);
  ASSERT_EQ(t.columns.size(), 3u);
  EXPECT_EQ(as_int(t.rows[0][0]), 1);
  EXPECT_DOUBLE_EQ(as_num(t.rows[0][1]), 8.0);
  EXPECT_EQ(as_text(t.rows[0][2]), "xy");
  EXPECT_EQ(as_int(t.rows[1][0]), 2);
  EXPECT_DOUBLE_EQ(as_num(t.rows[1][1]), -2.0);
  // Layer 0: f0 6, f1 -10, f2 2, f3 0 -> f1 first.
  const Table u = run("SELECT * FROM EDGES NEAREST TO \"abc\" AT LAYER 0 LIMIT 1");
  EXPECT_EQ(as_int(at(u, 0, "feature")), 1);
  EXPECT_DOUBLE_EQ(as_num(at(u, 0, "score")), -10.0);
  // With a WHERE every feature is scored: positive scores at layer 0 are f0 (6) and f2 (2).
  const Table w = run("SELECT feature FROM EDGES NEAREST TO \"abc\" AT LAYER 0 WHERE score > 0 ORDER BY score");
  ASSERT_EQ(w.rows.size(), 2u);
  EXPECT_EQ(as_int(w.rows[0][0]), 2);
  EXPECT_EQ(as_int(w.rows[1][0]), 0);
}

TEST_F(Fixture, DescribeMergesEdgesByTokenWithinABand) {
  // Positive gates for 2 e0: L0 f0 6 (xy), f2 2 (c); L1 f1 8 (xy), f3 1 (x). One-letter tokens
  // are not content words. Layer 0 is the syntax band, layer 1 knowledge: xy is an edge in each
  // (merged within a band only), the syntax section first.
  const Table t = run("DESCRIBE \"abc\"");
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(as_text(at(t, 0, "band")), "syntax");
  EXPECT_EQ(as_text(at(t, 0, "token")), "xy");
  EXPECT_DOUBLE_EQ(as_num(at(t, 0, "gate")), 6.0);
  EXPECT_EQ(as_int(at(t, 0, "layer")), 0);
  EXPECT_EQ(as_text(at(t, 1, "band")), "knowledge");
  EXPECT_EQ(as_text(at(t, 1, "token")), "xy");
  EXPECT_DOUBLE_EQ(as_num(at(t, 1, "gate")), 8.0);
  EXPECT_EQ(as_int(at(t, 1, "layer")), 1);
  EXPECT_EQ(as_int(at(t, 1, "feature")), 1);
  EXPECT_EQ(as_int(at(t, 1, "hits")), 1);
  EXPECT_EQ(std::get<std::vector<std::string>>(at(t, 1, "layers")), (std::vector<std::string>{"L1"}));
  // Within a band tokens still merge case-insensitively over its layers: DESCRIBE KNOWLEDGE is the
  // knowledge section.
  const Table k = run("DESCRIBE \"abc\" KNOWLEDGE");
  ASSERT_EQ(k.rows.size(), 1u);
  EXPECT_DOUBLE_EQ(as_num(at(k, 0, "gate")), 8.0);
  // RAW keeps every positive hit: syntax xy 6, c 2; knowledge xy 8, x 1.
  const Table raw = run("DESCRIBE \"abc\" RAW");
  ASSERT_EQ(raw.rows.size(), 4u);
  EXPECT_EQ(as_text(at(raw, 0, "token")), "xy");
  EXPECT_EQ(as_text(at(raw, 1, "token")), "c");
  EXPECT_EQ(as_text(at(raw, 2, "token")), "xy");
  EXPECT_EQ(as_text(at(raw, 3, "token")), "x");
  // The syntax band is layer 0 only: xy with gate 6 there.
  const Table syn = run("DESCRIBE \"abc\" SYNTAX");
  ASSERT_EQ(syn.rows.size(), 1u);
  EXPECT_DOUBLE_EQ(as_num(at(syn, 0, "gate")), 6.0);
  const Table l1 = run("DESCRIBE \"abc\" AT LAYER 1 RAW");
  EXPECT_EQ(l1.rows.size(), 2u);  // xy 8, x 1
  EXPECT_NE(error_of("DESCRIBE \"abc\" OUTPUT", ErrorKind::InvalidArgument).find("no output band"), std::string::npos);
  EXPECT_NE(error_of("DESCRIBE \"abc\" AT LAYER 2", ErrorKind::InvalidArgument).find("layers 0-1"), std::string::npos);
  EXPECT_TRUE(run("DESCRIBE \"\"").rows.empty());
}

TEST_F(Fixture, WalkWithoutWeightsUsesTheLastTokensEmbedding) {
  // "xy" -> <bos> xy; q = 2 e1. Layer 0 scores 0, 0, 2, 0 -> f2 (c); layer 1: 4, 0, 0, 0 -> f0 (abc).
  const Table t = run("WALK \"xy\" TOP 1");
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(as_int(at(t, 0, "feature")), 2);
  EXPECT_DOUBLE_EQ(as_num(at(t, 0, "gate")), 2.0);
  EXPECT_EQ(as_text(at(t, 0, "token")), "c");
  EXPECT_EQ(as_int(at(t, 1, "feature")), 0);
  EXPECT_DOUBLE_EQ(as_num(at(t, 1, "gate")), 4.0);
  EXPECT_EQ(as_text(at(t, 1, "token")), "abc");
  EXPECT_EQ(run("WALK \"xy\" TOP 1 LAYERS 1-1").rows.size(), 1u);
  EXPECT_EQ(run("EXPLAIN WALK \"xy\" TOP 1 KNOWLEDGE").rows.size(), 1u);
}

TEST_F(Fixture, WhereOrderLimitAndFieldLists) {
  // c_scores: L0 .875 .75 .25 .625; L1 .5 .9375 .125 .375.
  auto features = [&](const std::string& src) {
    std::vector<std::pair<int64_t, int64_t>> out;
    const Table t = run(src);
    for (size_t i = 0; i < t.rows.size(); ++i) out.push_back({as_int(at(t, i, "layer")), as_int(at(t, i, "feature"))});
    return out;
  };
  using V = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(features("SELECT * FROM FEATURES WHERE score > 0.5 ORDER BY score DESC"),
            (V{{1, 1}, {0, 0}, {0, 1}, {0, 3}}));
  EXPECT_EQ(features("SELECT * FROM FEATURES WHERE score BETWEEN 0.5 AND 0.75"), (V{{0, 1}, {0, 3}, {1, 0}}));
  EXPECT_EQ(features("SELECT * FROM FEATURES WHERE token IN ('xy', 'AB') AND NOT layer = 1"), (V{{0, 0}, {0, 1}}));
  EXPECT_EQ(features("SELECT * FROM FEATURES WHERE token LIKE 'a%'"), (V{{0, 1}, {1, 0}}));
  // SQL's LIKE: runs of % are one %; % matches the empty run; _ exactly one byte.
  EXPECT_EQ(features("SELECT * FROM FEATURES WHERE token LIKE 'a%%%%%%%%%%%%%%%%%%%%%%%%'"), (V{{0, 1}, {1, 0}}));
  EXPECT_EQ(features("SELECT * FROM FEATURES WHERE token LIKE '%%%%%%%%%%%%%%%%%%%%b%%%%%%%%%%%%%%%%%%%%'"),
            features("SELECT * FROM FEATURES WHERE token LIKE '%b%'"));
  EXPECT_EQ(features("SELECT * FROM FEATURES WHERE token LIKE '%'").size(), 8u);
  EXPECT_EQ(features("SELECT * FROM FEATURES WHERE token LIKE '%_'").size(), 8u);
  EXPECT_EQ(features("SELECT * FROM FEATURES WHERE token LIKE '_%_'"), features("SELECT * FROM FEATURES WHERE token NOT LIKE '_'"));
  EXPECT_EQ(features("SELECT * FROM FEATURES WHERE layer = 1 AND score < 0.2 OR token = 'y'"), (V{{0, 3}, {1, 2}}));
  EXPECT_EQ(features("SELECT * FROM FEATURES WHERE token NOT LIKE '_'"), (V{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
  EXPECT_EQ(features("SELECT * FROM FEATURES WHERE also = 'b'"), (V{{1, 1}}));  // a list field: any element
  EXPECT_EQ(features("SELECT * FROM FEATURES ORDER BY score LIMIT 2"), (V{{1, 2}, {0, 2}}));
  const Table t = run("SELECT token, layer FROM FEATURES LIMIT 3");
  ASSERT_EQ(t.columns.size(), 2u);
  EXPECT_EQ(t.columns[0].name, "token");
  EXPECT_EQ(t.rows.size(), 3u);
  ASSERT_EQ(t.notes.size(), 1u);
  EXPECT_NE(t.notes[0].find("3 of 8"), std::string::npos);
  EXPECT_EQ(run("SHOW FEATURES 1 WHERE score > 0.4").rows.size(), 2u);
  EXPECT_NE(error_of("SELECT * FROM FEATURES WHERE colour = 1", ErrorKind::InvalidArgument)
                .find("unknown field colour at 1:30"),
            std::string::npos);
  EXPECT_NE(error_of("SELECT nope FROM FEATURES", ErrorKind::InvalidArgument).find("unknown field nope"),
            std::string::npos);
  EXPECT_NE(error_of("SELECT * FROM FEATURES WHERE layer = 'x'", ErrorKind::InvalidArgument).find("is a number"),
            std::string::npos);
  EXPECT_NE(error_of("SELECT * FROM FEATURES WHERE token = 3", ErrorKind::InvalidArgument).find("is a text"),
            std::string::npos);
  EXPECT_NE(error_of("SELECT * FROM FEATURES ORDER BY size", ErrorKind::InvalidArgument).find("unknown field size"),
            std::string::npos);
}

TEST_F(Fixture, EntitiesAreCapitalisedWords) {
  // No token of the tiny vocabulary starts with a capital letter.
  EXPECT_TRUE(run("SELECT * FROM ENTITIES").rows.empty());
  EXPECT_TRUE(run("SHOW ENTITIES AT LAYER 1").rows.empty());
  // NEAREST TO ranks the entity-looking tokens by cosine: none here (numbers: test_lql.py).
  const Table n = run("SELECT * FROM ENTITIES NEAREST TO 'abc'");
  EXPECT_TRUE(n.rows.empty());
  EXPECT_EQ(n.columns.size(), 4u);
  EXPECT_EQ(n.columns[2].name, "cosine");
  EXPECT_TRUE(run("SELECT * FROM ENTITIES NEAREST TO 'abc' AT LAYER 1 WHERE cosine > 0").rows.empty());
  EXPECT_NE(error_of("SELECT * FROM ENTITIES NEAREST TO 'abc' AT LAYER 2", ErrorKind::InvalidArgument).find("layers 0-1"),
            std::string::npos);
}

TEST_F(Fixture, UpdateAndDeleteWhereSelectsFeaturesByHand) {
  // c_scores and top tokens: L0 f0 xy .875, f1 ab .75, f2 c .25, f3 y .625; L1 f0 abc .5,
  // f1 xy .9375, f2 b .125, f3 x .375.
  auto slots = [&](const std::string& where, size_t cap = detail::kMaxEditRows) {
    const auto st = std::get<DeleteStmt>(parse_one("DELETE FROM EDGES WHERE " + where).stages.at(0).body);
    return detail::select_slots(session, st.where, "DELETE", Pos{1, 1}, cap);
  };
  using V = std::vector<std::pair<int64_t, int64_t>>;
  // token IN (xy, ab): L0f0, L0f1, L1f1; score > 0.6: L0f0, L0f1, L0f3, L1f1; union minus feature 1.
  EXPECT_EQ(slots("layer BETWEEN 0 AND 1 AND (token IN ('xy', 'ab') OR score > 0.6) AND NOT feature = 1"),
            (V{{0, 0}, {0, 3}}));
  EXPECT_EQ(slots("feature IN (2, 3) AND layer = 1"), (V{{1, 2}, {1, 3}}));
  EXPECT_EQ(slots("layer = 1 AND feature = 2"), (V{{1, 2}}));  // the direct form
  EXPECT_EQ(slots("token = 'nothing'"), V{});
  EXPECT_EQ(slots("score > 0.6", 4).size(), 4u);
  try {
    slots("score > 0.6", 3);
    ADD_FAILURE() << "the cap was not enforced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the WHERE matches 4 features; one statement changes at most 3"), std::string::npos)
        << e.what();
  }
  for (const auto& [where, needle] : std::vector<std::pair<std::string, std::string>>{
           {"entity = 'a'", "DELETE ... WHERE entity is not built yet (1:25)"},
           {"layer = 0 AND relation = 'r'", "DELETE ... WHERE relation at 1:39 needs relation labels"},
           {"colour = 1", "unknown field colour"},
           {"layer = 5 AND feature = 0", "layer 5 at 1:33 is out of range"},  // the value's place
           {"layer = 0 AND feature = 4", "DELETE: feature 4 at 1:49 is out of range 0-3"}}) {
    try {
      slots(where);
      ADD_FAILURE() << where;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << where << ": " << e.what();
    }
  }
}

TEST_F(Fixture, WhatIsNotBuiltIsRejectedWithItsPosition) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"INSERT INTO EDGES (entity, relation, target) VALUES ('a', 'b', 'c')", "INSERT at 1:1 needs a vindex with model weights"},
      {"UPDATE EDGES SET target = 'x' WHERE entity = 'a'", "UPDATE at 1:1 needs a vindex with model weights"},
      {"DELETE FROM EDGES WHERE token = 'a'", "DELETE at 1:1 needs a vindex with model weights"},
      {"DELETE FROM EDGES WHERE layer = 1 AND feature = 2", "DELETE at 1:1 needs a vindex with model weights"},
      {"APPLY PATCH 'p.vlp'", "APPLY PATCH at 1:1 needs a vindex with model weights"},
      {"DIFF CURRENT CURRENT RELATION 'capital'", "DIFF ... RELATION at 1:1 needs relation labels"},
      {"DIFF CURRENT CURRENT INTO PATCH 'd.vlp'", "DIFF ... INTO PATCH at 1:1 needs model weights on both sides"},
      {"WALK 'xy' COMPARE", "WALK ... COMPARE is not built yet"},
      {"EXPLAIN INFER 'xy' WITH ATTENTION", "EXPLAIN INFER ... WITH ATTENTION needs a vindex with model weights"},
      {"INFER 'xy' COMPARE", "INFER ... COMPARE needs a vindex with model weights"},
  };
  for (const auto& [src, needle] : cases) EXPECT_NE(error_of(src).find(needle), std::string::npos) << src;
  // A statement in a pipeline is rejected at its own position.
  EXPECT_NE(error_of("STATS |> SAVE PATCH", ErrorKind::InvalidArgument).find("SAVE PATCH at 1:10: no patch is being recorded"),
            std::string::npos);
  EXPECT_NE(error_of("REMOVE PATCH 'p.vlp'", ErrorKind::NotFound).find("REMOVE PATCH at 1:1: no patch \"p.vlp\""),
            std::string::npos);
  // A patch file ends in .vlp, in an existing directory, outside the vindex in use.
  EXPECT_EQ(error_of("BEGIN PATCH 'notes.txt'", ErrorKind::InvalidArgument),
            "BEGIN PATCH at 1:1: a patch file's name ends in .vlp, got \"notes.txt\"");
  EXPECT_NE(error_of("DIFF CURRENT CURRENT INTO PATCH 'd.txt'", ErrorKind::InvalidArgument).find("DIFF ... INTO PATCH at 1:1: a patch file's name ends in .vlp"),
            std::string::npos);
  EXPECT_NE(error_of("BEGIN PATCH '/no/such/dir/p.vlp'", ErrorKind::NotFound).find("no directory"), std::string::npos);
  // Recording needs no weights; SHOW PATCHES lists the recording.
  run("BEGIN PATCH 'p.vlp'");
  const Table p = run("SHOW PATCHES");
  ASSERT_EQ(p.rows.size(), 1u);
  EXPECT_EQ(std::get<std::string>(p.rows[0][1]), "p.vlp");
  EXPECT_EQ(std::get<std::string>(p.rows[0][2]), "recording");
  // COMPILE INTO MODEL exports; a browse vindex has no weights to export and says which level.
  EXPECT_NE(error_of("COMPILE CURRENT INTO MODEL 'x.gguf'").find("--level inference"), std::string::npos);
  // DIFF of a vindex with itself: nothing differs (2 layers x 4 features compared).
  const Table d = run("DIFF CURRENT CURRENT");
  EXPECT_TRUE(d.rows.empty());
  ASSERT_FALSE(d.notes.empty());
  EXPECT_NE(d.notes[0].find("0 of 8 features differ"), std::string::npos) << d.notes[0];
  // The forward pass needs weights: a browse vindex says so.
  for (const std::string src : {"INFER 'xy'", "TRACE 'xy'", "EXPLAIN INFER 'xy'"})
    EXPECT_NE(error_of(src).find("needs a vindex with model weights"), std::string::npos) << src;
}

// Range and field errors name the token at fault, not the statement (the vindex has layers 0-1).
TEST_F(Fixture, ErrorsPointAtTheOffendingToken) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"SHOW LAYERS 0-9", "layer 9 at 1:15 is out of range: the vindex has layers 0-1"},
      {"DESCRIBE 'abc' AT LAYER 2", "layer 2 at 1:25 is out of range"},
      {"DIFF CURRENT CURRENT LAYER 9", "layer 9 at 1:28 is out of range"},
      {"SHOW FEATURES 7", "layer 7 at 1:15 is out of range"},
      {"SELECT * FROM EDGES NEAREST TO 'abc' AT LAYER 5", "layer 5 at 1:47 is out of range"},
      {"SHOW ENTITIES AT LAYER 3", "layer 3 at 1:24 is out of range"},
      {"WALK 'xy' LAYERS 1-4", "layer 4 at 1:20 is out of range"},
      {"SELECT layer, foo FROM FEATURES", "unknown field foo at 1:15 (fields of this table: layer, feature"},
      {"SELECT * FROM FEATURES ORDER BY size", "unknown field size at 1:33"},
  };
  for (const auto& [src, want] : cases)
    EXPECT_EQ(error_of(src, ErrorKind::InvalidArgument).rfind(want, 0), 0u) << src << ": " << error_of(src, ErrorKind::InvalidArgument);
  // SET's value is typed before the vindex is asked for weights.
  EXPECT_EQ(error_of("UPDATE EDGES SET target = 5 WHERE layer = 0 AND feature = 1", ErrorKind::InvalidArgument),
            "SET target needs a string (a token), got a number at 1:27");
}

// A flat chain of 4096 predicates (the most a WHERE takes) is checked and evaluated without a
// recursion per term; so is the deepest nesting the parser allows.
TEST_F(Fixture, LongAndDeepWheresEvaluate) {
  auto count = [&](const std::string& where) { return run("SELECT * FROM FEATURES WHERE " + where + " LIMIT 100").rows.size(); };
  std::string ors = "feature = 2";
  for (int i = 1; i < 4096; ++i) ors += " OR feature = " + std::to_string(100 + i);
  EXPECT_EQ(count(ors), 2u);  // feature 2 of layers 0 and 1
  std::string ands = "layer = 1";
  for (int i = 1; i < 4096; ++i) ands += " AND score > 0.3";
  EXPECT_EQ(count(ands), 3u);  // layer 1's c_scores .5 .9375 .125 .375: three above 0.3
  // The type check reaches the last term of a long chain.
  std::string typo = "feature = 2";
  for (int i = 1; i < 4095; ++i) typo += " OR feature = 2";
  EXPECT_NE(error_of("SELECT * FROM FEATURES WHERE " + typo + " OR token = 7", ErrorKind::InvalidArgument).find("is a text"),
            std::string::npos);
  // NOTs around a group at the deepest nesting (the predicates at depth 256): layer 0 has
  // features 0-3, so the group holds for 3 of the 8 features and its negation for 5.
  std::string nots;
  for (int i = 0; i < 253; ++i) nots += "NOT ";
  EXPECT_EQ(count(nots + "(layer = 0 AND feature < 3)"), 5u);  // 253: odd
  EXPECT_EQ(count(nots + "NOT (layer = 0 AND feature < 3)"), 3u);  // 254: even
  // 30,000 terms: refused by the parser with a message (it crashed the type check).
  std::string huge = "layer = 1";
  for (int i = 1; i < 30000; ++i) huge += " OR layer = 1";
  try {
    parse_one("SELECT * FROM EDGES WHERE " + huge + " LIMIT 1");
    ADD_FAILURE() << "30,000 conditions parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("WHERE has more than 4096 conditions"), std::string::npos);
  }
}

// IN over a long list is a set lookup: 100,000 rows against 200,000 values, as numbers and as
// texts, in well under the 5 s bound (a linear scan per row did 2e10 comparisons).
TEST(WhereIn, ALongListIsASetLookup) {
  std::string nums = "n IN (", texts = "t IN (";
  for (int i = 0; i < 200000; ++i) {
    nums += (i ? ", " : "") + std::to_string(2 * i + 1);             // the odd numbers 1..399999
    texts += (i ? ", 'W" : "'W") + std::to_string(2 * i + 1) + "'";  // "w1", "w3", ... any case
  }
  Table t;
  t.columns = {{"n", Column::Type::Int}, {"t"}};
  for (int64_t i = 0; i < 100000; ++i) t.rows.push_back({i, "w" + std::to_string(i)});
  const auto t0 = std::chrono::steady_clock::now();
  Table a = t, b = t;
  detail::filter_rows(a, std::get<DeleteStmt>(parse_one("DELETE FROM EDGES WHERE " + nums + ")").stages.at(0).body).where);
  detail::filter_rows(b, std::get<DeleteStmt>(parse_one("DELETE FROM EDGES WHERE " + texts + ")").stages.at(0).body).where);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(a.rows.size(), 50000u);  // the odd i below 100,000
  EXPECT_EQ(b.rows.size(), 50000u);
  EXPECT_EQ(std::get<int64_t>(a.rows.front()[0]), 1);
  EXPECT_EQ(std::get<int64_t>(b.rows.back()[0]), 99999);
  EXPECT_LT(s, 5.0);
}

// USE takes a vindex directory, or a short name found in the model directories; a file (a GGUF
// model) or a missing name is an error that says what LQL needs, at the statement's place.
TEST(ExecutorUse, ShortNamesAndFilesThatAreNotVindexes) {
  const fs::path dir = fs::path(tiny_vindex()).parent_path();
  const fs::path gguf = dir / "model.gguf";
  std::ofstream(gguf) << "GGUF";
  SessionOptions o{1, "."};
  o.model_dirs = {"/nonexistent-models", dir.string()};
  Session s(o);
  Executor e(s);
  auto error = [&](const std::string& src) -> std::string {
    try {
      e.run(parse_one(src));
    } catch (const Error& err) {
      return err.what();
    }
    return "(ran)";
  };
  e.run(parse_one("USE 'tiny'"));
  EXPECT_EQ(s.path(), (dir / "tiny.vindex").string());
  e.run(parse_one("USE \"tiny.vindex\""));
  EXPECT_EQ(s.path(), (dir / "tiny.vindex").string());
  const std::string want = "USE at 1:1: LQL needs a vindex, and " + gguf.string() +
                           " is a file (a GGUF model?), not a vindex directory: extract one with `larql extract " +
                           gguf.string() + " -o model.vindex --level inference` and USE \"model.vindex\"";
  EXPECT_EQ(error("USE '" + gguf.string() + "'"), want);
  EXPECT_EQ(error("USE 'model'"), want);  // the short name finds the GGUF file
  EXPECT_EQ(error("\n  USE 'model'").rfind("USE at 2:3: LQL needs a vindex", 0), 0u);
  EXPECT_EQ(error("DIFF CURRENT '" + gguf.string() + "'").rfind("DIFF at 1:14: LQL needs a vindex, and " + gguf.string(), 0), 0u);
  EXPECT_EQ(error("USE 'nope'"), "USE at 1:1: no vindex nope: no such directory, and no vindex of that name in "
                                 "/nonexistent-models, " + dir.string());
  EXPECT_EQ(error("USE '" + dir.string() + "'"),
            "USE at 1:1: LQL needs a vindex, and " + dir.string() +
                " is a directory without index.json (a Hugging Face checkpoint?), not a vindex: extract one with `larql "
                "extract " + dir.string() + " -o " + dir.filename().string() + ".vindex --level inference` and USE \"" +
                dir.filename().string() + ".vindex\"");
  EXPECT_EQ(s.path(), (dir / "tiny.vindex").string());  // the failures left the vindex in use
}

TEST_F(Fixture, ACancelFlagStopsTheStatement) {
  std::atomic<bool> flag{true};
  session.set_cancel(&flag);
  for (const std::string src : {"DESCRIBE 'abc'", "WALK 'xy'", "SELECT * FROM FEATURES", "SHOW FEATURES 0",
                                "SELECT * FROM EDGES NEAREST TO 'abc' AT LAYER 0"})
    EXPECT_NE(error_of(src, ErrorKind::Cancelled).find("cancelled"), std::string::npos) << src;
  flag = false;
  EXPECT_EQ(run("DESCRIBE 'abc'").rows.size(), 2u);
}

TEST(ExecutorNoVindex, StatementsNeedAVindexInUse) {
  Session s(SessionOptions{1, "."});
  Executor e(s);
  try {
    e.run(parse_one("STATS"));
    FAIL();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("no vindex in use"), std::string::npos);
  }
  try {
    e.run(parse_one("USE '/nonexistent/x.vindex'"));
    FAIL();
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::NotFound) << err.what();
  }
  EXPECT_FALSE(s.has_vindex());
}

TEST(ExecutorModels, ShowModelsListsVindexDirectories) {
  const fs::path parent = fs::path(tiny_vindex()).parent_path();
  Session s(SessionOptions{1, parent.string()});
  Executor e(s);
  const auto t = e.run(parse_one("SHOW MODELS"));
  ASSERT_EQ(t.at(0).rows.size(), 1u);
  EXPECT_EQ(std::get<std::string>(t[0].rows[0][0]), "tiny.vindex");
  EXPECT_EQ(std::get<int64_t>(t[0].rows[0][2]), 2);
}

TEST_F(Fixture, JsonDocumentFollowsTheSchema) {
  const auto j = nlohmann::json::parse(render_json(run("SELECT layer, token, score, also FROM FEATURES LIMIT 1")));
  EXPECT_EQ(j["statement"], "SELECT");
  EXPECT_EQ(j["columns"][0], (nlohmann::json{{"name", "layer"}, {"type", "int"}}));
  EXPECT_EQ(j["columns"][2]["type"], "float");
  EXPECT_EQ(j["columns"][3]["type"], "list");
  EXPECT_EQ(j["rows"][0], nlohmann::json::parse(R"([0, "xy", 0.875, ["ab"]])"));
  EXPECT_EQ(j["notes"].size(), 1u);
}

}  // namespace
}  // namespace larql::lql
