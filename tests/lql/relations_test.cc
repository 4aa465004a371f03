// Relation labels in the executor (SHOW RELATIONS, RELATIONS ONLY, the relation column) on a
// hand-made vindex — the one of executor_test.cc (2 layers x 4 features, hidden 4) — with and
// without a hand-written feature_labels.json. Every expected row is derived by hand below.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lql/executor.h"
#include "lql/parser.h"
#include "tokenizer/hf_json.h"
#include "util/error.h"
#include "vindex/down_meta_file.h"
#include "vindex/index.h"

namespace larql::lql {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kA = 2, kB = 3, kC = 4, kAB = 5, kABC = 6, kX = 7, kY = 8, kXY = 9;

// Gates (layer 0): f0 = 3 e0, f1 = -5 e0, f2 = e0 + e1, f3 = e3; (layer 1): f0 = 2 e1, f1 = 4 e0,
// f2 = -e0, f3 = 0.5 e0. Top tokens: L0 f0 xy, f1 ab, f2 c, f3 y; L1 f0 abc, f1 xy, f2 b, f3 x.
// Embeddings (embed_scale 2): abc = e0, xy = e1, ab = e2.
// Labels: L0 f0 capital-of 0.75 (3 of 4: Aa, Bb), L1 f1 capital-of 0.5 (2 of 4), L1 f3 colour-of
// 1.0 (2 of 2: Xx); relation "empty-rel" has no feature.
std::string make_vindex(const std::string& name, bool labels) {
  const fs::path d = fs::temp_directory_path() / ("lql_rel_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  VocabData v;
  v.tokens = {"<unk>", "<bos>", "a", "b", "c", "ab", "abc", "x", "y", "xy"};
  v.scores = {0, 0, -3, -4, -5, -1, -2, -3, -4, -1};
  v.types.assign(10, TokenType::Normal);
  v.types[0] = v.types[1] = TokenType::Control;
  v.unk_id = 0;
  v.bos_id = 1;
  v.add_bos = true;
  const HfTokenizerFiles hf = to_hf_tokenizer(v);
  std::ofstream(d / "tokenizer.json") << hf.tokenizer_json;
  std::ofstream(d / "tokenizer_config.json") << hf.tokenizer_config_json;
  auto write_floats = [](const fs::path& p, const std::vector<float>& x) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size() * sizeof(float)));
  };
  std::vector<float> emb(10 * 4, 0.0f);
  emb[kABC * 4 + 0] = 1;
  emb[kXY * 4 + 1] = 1;
  emb[kAB * 4 + 2] = 1;
  write_floats(d / "embeddings.bin", emb);
  write_floats(d / "gate_vectors.bin", {3, 0, 0, 0, -5, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1,  //
                                        0, 2, 0, 0, 4, 0, 0, 0, -1, 0, 0, 0, 0.5, 0, 0, 0});
  vindex::DownMetaWriter dm((d / "down_meta.bin").string(), 2, 2);
  dm.add_layer(0, 4, {{kXY, .875f}, {kAB, .0625f}, {kAB, .75f}, {kC, .0625f},
                      {kC, .25f}, {kX, .0625f}, {kY, .625f}, {kA, .0625f}});
  dm.add_layer(1, 4, {{kABC, .5f}, {kXY, .0625f}, {kXY, .9375f}, {kB, .0625f},
                      {kB, .125f}, {kA, .0625f}, {kX, .375f}, {kY, .0625f}});
  dm.commit();
  vindex::VindexIndex ix;
  ix.model = "tiny";
  ix.family = "test";
  ix.num_layers = 2;
  ix.hidden_size = 4;
  ix.intermediate_size = 4;
  ix.vocab_size = 10;
  ix.embed_scale = 2.0;
  ix.dtype = "f32";
  ix.down_top_k = 2;
  ix.layers = {{0, 4, 0, 64}, {1, 4, 64, 64}};
  ix.layer_bands = {{"syntax", {0, 0}}, {"knowledge", {1, 1}}};
  vindex::write_index(d.string(), ix);
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
  ASSERT_EQ(all.rows.size(), 3u);  // c (syntax), xy, x
  EXPECT_TRUE(std::holds_alternative<std::monostate>(at(all, 0, "relation")));  // L0 f2: unlabelled
  EXPECT_EQ(text(at(all, 1, "relation")), "capital-of");                         // xy's best hit: L1 f1
  EXPECT_EQ(text(at(all, 2, "relation")), "colour-of");                          // L1 f3
  const Table only = run("DESCRIBE \"abc\" RAW RELATIONS ONLY");
  ASSERT_EQ(only.rows.size(), 2u);
  EXPECT_EQ(text(at(only, 0, "token")), "xy");
  EXPECT_EQ(text(at(only, 1, "token")), "x");
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
