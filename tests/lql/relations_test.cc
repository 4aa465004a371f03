// Relation labels in the executor (SHOW RELATIONS, RELATIONS ONLY, the relation column) on a
// hand-made vindex — the one of executor_test.cc (2 layers x 4 features, hidden 4) — with and
// without a hand-written feature_labels.json. Every expected row is derived by hand below.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lql/executor.h"
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

// The shared tiny vindex (tests/testlib/tiny_vindex.h).
// Labels: L0 f0 capital-of 0.75 (3 of 4: Aa, Bb), L1 f1 capital-of 0.5 (2 of 4), L1 f3 colour-of
// 1.0 (2 of 2: Xx); relation "empty-rel" has no feature.
std::string make_vindex(const std::string& name, bool labels) {
  const fs::path d = testing::process_temp_dir("larql-lql-rel-test") / name;
  testing::write_tiny_vindex(d);
  if (labels)
    std::ofstream(d / "feature_labels.json") << R"({
  "version": 1, "model": "tiny", "top_k": 2, "min_fraction": 0.5, "min_margin": 0.3,
  "relations": [{"name": "capital-of", "template": "The capital of {} is", "subjects": 4},
                {"name": "colour-of", "template": "The colour of {} is", "subjects": 2},
                {"name": "empty-rel", "template": "{} and", "subjects": 3}],
  "features": [
    {"layer": 1, "feature": 3, "relation": "colour-of", "score": 1.0, "fires": 2, "of": 2, "examples": ["Xx"]},
    {"layer": 0, "feature": 0, "relation": "capital-of", "score": 0.75, "fires": 3, "of": 4, "examples": ["Aa", "Bb"]},
    {"layer": 1, "feature": 1, "relation": "capital-of", "score": 0.5, "fires": 2, "of": 4, "examples": ["Bb", "Cc"]}
  ]
})";
  return d.string();
}

struct Labelled : ::testing::Test {
  Session session{SessionOptions{1, "."}};
  Executor exec{session};
  void SetUp() override {
    static const std::string dir = make_vindex("labelled.vindex", true);
    session.use(dir);
  }
  Table run(const std::string& src) { return exec.run(parse_one(src)).at(0); }
};

Cell at(const Table& t, size_t row, const std::string& col) {
  const int c = t.column(col);
  EXPECT_GE(c, 0) << col;
  return c < 0 ? Cell{} : t.rows.at(row).at(static_cast<size_t>(c));
}
std::string text(const Cell& c) { return std::get<std::string>(c); }
int64_t num(const Cell& c) { return std::get<int64_t>(c); }
std::vector<std::string> list(const Cell& c) { return std::get<std::vector<std::string>>(c); }
using L = std::vector<std::string>;

TEST_F(Labelled, ShowRelationsSummarisesPerRelation) {
  const Table t = run("SHOW RELATIONS");
  ASSERT_EQ(t.rows.size(), 3u);  // every relation of the probe set, in the file's order
  EXPECT_EQ(text(at(t, 0, "relation")), "capital-of");
  EXPECT_EQ(num(at(t, 0, "features")), 2);
  EXPECT_EQ(list(at(t, 0, "layers")), (L{"L0", "L1"}));
  EXPECT_DOUBLE_EQ(std::get<double>(at(t, 0, "best_score")), 0.75);
  EXPECT_EQ(list(at(t, 0, "tokens")), (L{"xy"}));  // L0 f0 and L1 f1 both write xy
  EXPECT_EQ(text(at(t, 0, "prompt")), "The capital of {} is");
  EXPECT_EQ(text(at(t, 1, "relation")), "colour-of");
  EXPECT_EQ(list(at(t, 1, "tokens")), (L{"x"}));
  EXPECT_EQ(num(at(t, 2, "features")), 0);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(at(t, 2, "best_score")));
  EXPECT_EQ(t.column("examples"), -1);

  const Table ex = run("SHOW RELATIONS WITH EXAMPLES");
  EXPECT_EQ(list(at(ex, 0, "examples")), (L{"Aa", "Bb", "Cc"}));  // union, first seen first

  const Table brief = run("SHOW RELATIONS AT LAYER 1 BRIEF");
  ASSERT_EQ(brief.columns.size(), 2u);
  EXPECT_EQ(num(at(brief, 0, "features")), 1);  // capital-of: L1 f1 only
  EXPECT_EQ(num(at(brief, 1, "features")), 1);  // colour-of: L1 f3
}

TEST_F(Labelled, VerboseAndRawListEachLabelledFeature) {
  const Table v = run("SHOW RELATIONS VERBOSE");
  ASSERT_EQ(v.rows.size(), 3u);  // by relation, then score: capital-of L0 f0 (.75), L1 f1 (.5); colour-of L1 f3
  EXPECT_EQ(num(at(v, 0, "layer")), 0);
  EXPECT_EQ(num(at(v, 1, "feature")), 1);
  EXPECT_EQ(text(at(v, 1, "token")), "xy");
  EXPECT_EQ(text(at(v, 2, "relation")), "colour-of");
  EXPECT_EQ(text(at(v, 2, "token")), "x");
  const Table r = run("SHOW RELATIONS RAW");
  ASSERT_EQ(r.rows.size(), 3u);  // (layer, feature) order: L0 f0, L1 f1, L1 f3
  EXPECT_EQ(num(at(r, 2, "feature")), 3);
  EXPECT_EQ(num(at(r, 0, "fires")), 3);
  EXPECT_EQ(num(at(r, 0, "of")), 4);
  EXPECT_EQ(list(at(r, 2, "examples")), (L{"Xx"}));
  EXPECT_EQ(run("SHOW RELATIONS AT LAYER 0 RAW").rows.size(), 1u);
}

TEST_F(Labelled, RelationColumnAndRelationsOnly) {
  // DESCRIBE "abc" RAW: positive gates of q = 2 e0: L0 f0 6 (xy), f2 2 (c); L1 f1 8 (xy), f3 1 (x).
  const Table all = run("DESCRIBE \"abc\" RAW");
  // Merged within a band only: syntax (L0) xy 6, c 2; knowledge (L1) xy 8, x 1.
  ASSERT_EQ(all.rows.size(), 4u);
  EXPECT_EQ(text(at(all, 0, "relation")), "capital-of");                         // L0 f0
  EXPECT_TRUE(std::holds_alternative<std::monostate>(at(all, 1, "relation")));  // L0 f2: unlabelled
  EXPECT_EQ(text(at(all, 2, "relation")), "capital-of");                         // L1 f1
  EXPECT_EQ(text(at(all, 3, "relation")), "colour-of");                          // L1 f3
  const Table only = run("DESCRIBE \"abc\" RAW RELATIONS ONLY");
  ASSERT_EQ(only.rows.size(), 3u);
  EXPECT_EQ(text(at(only, 0, "token")), "xy");
  EXPECT_EQ(text(at(only, 1, "token")), "xy");
  EXPECT_EQ(text(at(only, 2, "token")), "x");
  // EXPLAIN WALK "xy" TOP 4: every feature of both layers; three are labelled.
  const Table e = run("EXPLAIN WALK \"xy\" TOP 4 RELATIONS ONLY");
  ASSERT_EQ(e.rows.size(), 3u);
  // SELECT filters on the relation column.
  const Table s = run("SELECT layer, feature FROM FEATURES WHERE relation = 'capital-of'");
  ASSERT_EQ(s.rows.size(), 2u);
  EXPECT_EQ(num(s.rows[1][0]), 1);
  EXPECT_EQ(num(s.rows[1][1]), 1);
  const Table n = run("SELECT relation FROM EDGES NEAREST TO 'abc' AT LAYER 1 LIMIT 1");  // L1 f1 (8)
  EXPECT_EQ(text(n.rows.at(0).at(0)), "capital-of");
}

TEST_F(Labelled, DiffRelationComparesOnlyThatRelationsFeatures) {
  // capital-of labels L0 f0 and L1 f1: 2 features compared; colour-of: L1 f3 only.
  const Table d = run("DIFF CURRENT CURRENT RELATION 'capital-of'");
  EXPECT_TRUE(d.rows.empty());
  EXPECT_NE(d.notes.at(0).find("0 of 2 features differ"), std::string::npos) << d.notes.at(0);
  EXPECT_NE(run("DIFF CURRENT CURRENT RELATION 'colour-of'").notes.at(0).find("0 of 1 features differ"), std::string::npos);
  EXPECT_NE(run("DIFF CURRENT CURRENT RELATION 'empty-rel'").notes.at(0).find("0 of 0 features differ"), std::string::npos);
  try {
    run("DIFF CURRENT CURRENT RELATION 'size-of'");
    ADD_FAILURE() << "an unknown relation was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no relation \"size-of\" in the labels (capital-of, colour-of, empty-rel)"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(Labelled, UpdateWhereRelationSelectsTheLabelledFeatures) {
  const auto st = std::get<DeleteStmt>(parse_one("DELETE FROM EDGES WHERE relation = 'capital-of' OR feature = 2 AND layer = 0")
                                           .stages.at(0)
                                           .body);
  using V = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(detail::select_slots(session, st.where, "DELETE", Pos{}), (V{{0, 0}, {0, 2}, {1, 1}}));
}

TEST(Unlabelled, RelationsNeedLarqlLabel) {
  Session s(SessionOptions{1, "."});
  Executor exec(s);
  s.use(make_vindex("plain.vindex", false));
  for (const std::string src : {"SHOW RELATIONS", "DESCRIBE 'abc' RELATIONS ONLY", "EXPLAIN WALK 'xy' RELATIONS ONLY"}) {
    try {
      exec.run(parse_one(src));
      ADD_FAILURE() << src << " ran";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
      EXPECT_NE(std::string(e.what()).find("needs relation labels"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("larql label"), std::string::npos) << e.what();
    }
  }
  // No relation column without labels.
  EXPECT_EQ(exec.run(parse_one("DESCRIBE 'abc'")).at(0).column("relation"), -1);
}

TEST(Unlabelled, ABadLabelsFileFailsUseNamingIt) {
  Session s(SessionOptions{1, "."});
  const std::string dir = make_vindex("bad.vindex", false);
  std::ofstream(fs::path(dir) / "feature_labels.json") << "{\"version\": 7}";
  try {
    s.use(dir);
    ADD_FAILURE() << "USE accepted a bad feature_labels.json";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("feature_labels.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace larql::lql
