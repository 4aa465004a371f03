// The executor on a hand-made vindex (2 layers, 4 features, hidden 4, a 10-token vocabulary)
// whose gate vectors, embeddings and down_meta are chosen so that every result below is derived
// by hand in the comments, not taken from the code under test.
#include "lql/executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lql/parser.h"
#include "tokenizer/hf_json.h"
#include "util/error.h"
#include "vindex/down_meta_file.h"
#include "vindex/index.h"

namespace larql::lql {
namespace {

namespace fs = std::filesystem;

// Token ids of the tiny vocabulary.
constexpr uint32_t kA = 2, kB = 3, kC = 4, kAB = 5, kABC = 6, kX = 7, kY = 8, kXY = 9;

void write_floats(const fs::path& p, const std::vector<float>& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

// Builds the vindex once per process.
//   embeddings (unscaled, embed_scale 2): abc = e0, xy = e1, ab = e2, every other token 0.
//   gates, layer 0: f0 = 3 e0, f1 = -5 e0, f2 = e0 + e1, f3 = e3
//   gates, layer 1: f0 = 2 e1, f1 = 4 e0, f2 = -e0,     f3 = 0.5 e0
//   down_meta (top-2 per feature, token:logit), layer 0: f0 xy:.875 ab:.0625, f1 ab:.75 c:.0625,
//   f2 c:.25 x:.0625, f3 y:.625 a:.0625; layer 1: f0 abc:.5 xy:.0625, f1 xy:.9375 b:.0625,
//   f2 b:.125 a:.0625, f3 x:.375 y:.0625.
//   layer_bands: syntax [0, 0], knowledge [1, 1] (no output band).
std::string tiny_vindex() {
  static const std::string dir = [] {
    const fs::path d = fs::temp_directory_path() / ("lql_exec_test_" + std::to_string(::getpid())) / "tiny.vindex";
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
    std::vector<float> emb(10 * 4, 0.0f);
    emb[kABC * 4 + 0] = 1;
    emb[kXY * 4 + 1] = 1;
    emb[kAB * 4 + 2] = 1;
    write_floats(d / "embeddings.bin", emb);
    const std::vector<float> gates = {3, 0, 0, 0, -5, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1,  // layer 0
                                      0, 2, 0, 0, 4, 0, 0, 0, -1, 0, 0, 0, 0.5, 0, 0, 0};
    write_floats(d / "gate_vectors.bin", gates);
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

TEST_F(Fixture, DescribeMergesEdgesByTokenAcrossLayers) {
  // Positive gates for 2 e0: L0 f0 6 (xy), f2 2 (c); L1 f1 8 (xy), f3 1 (x). One-letter tokens
  // are not content words; xy merges over L0 and L1 with its best gate 8 at L1 f1.
  const Table t = run("DESCRIBE \"abc\"");
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(as_text(at(t, 0, "token")), "xy");
  EXPECT_DOUBLE_EQ(as_num(at(t, 0, "gate")), 8.0);
  EXPECT_EQ(as_int(at(t, 0, "layer")), 1);
  EXPECT_EQ(as_int(at(t, 0, "feature")), 1);
  EXPECT_EQ(as_int(at(t, 0, "hits")), 2);
  EXPECT_EQ(as_text(at(t, 0, "band")), "knowledge");
  EXPECT_EQ(std::get<std::vector<std::string>>(at(t, 0, "layers")), (std::vector<std::string>{"L0", "L1"}));
  // RAW keeps every positive hit: xy 8, c 2, x 1 (sections: syntax c first, then knowledge).
  const Table raw = run("DESCRIBE \"abc\" RAW");
  ASSERT_EQ(raw.rows.size(), 3u);
  EXPECT_EQ(as_text(at(raw, 0, "token")), "c");
  EXPECT_EQ(as_text(at(raw, 1, "token")), "xy");
  EXPECT_EQ(as_text(at(raw, 2, "token")), "x");
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
}

TEST_F(Fixture, WhatIsNotBuiltIsRejectedWithItsPosition) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"INSERT INTO EDGES (entity, relation, target) VALUES ('a', 'b', 'c')", "INSERT at 1:1 needs a vindex with model weights"},
      {"UPDATE EDGES SET target = 'x' WHERE entity = 'a'", "UPDATE with this WHERE is not built yet (1:1)"},
      {"DELETE FROM EDGES WHERE entity = 'a'", "DELETE with this WHERE is not built yet (1:1)"},
      {"DELETE FROM EDGES WHERE layer = 1 AND feature = 2", "DELETE at 1:1 needs a vindex with model weights"},
      {"APPLY PATCH 'p.vlp'", "APPLY PATCH at 1:1 needs a vindex with model weights"},
      {"DIFF CURRENT CURRENT RELATION 'capital'", "DIFF ... RELATION is not built yet (1:1)"},
      {"DIFF CURRENT CURRENT INTO PATCH 'd.vlp'", "DIFF ... INTO PATCH is not built yet"},
      {"WALK 'xy' COMPARE", "WALK ... COMPARE is not built yet"},
      {"EXPLAIN INFER 'xy' WITH ATTENTION", "WITH ATTENTION is not built yet"},
      {"INFER 'xy' COMPARE", "INFER ... COMPARE is not built yet"},
      {"SELECT * FROM ENTITIES NEAREST TO 'a' AT LAYER 0", "FROM ENTITIES NEAREST TO is not built yet"},
  };
  for (const auto& [src, needle] : cases) EXPECT_NE(error_of(src).find(needle), std::string::npos) << src;
  // A statement in a pipeline is rejected at its own position.
  EXPECT_NE(error_of("STATS |> SAVE PATCH", ErrorKind::InvalidArgument).find("SAVE PATCH at 1:10: no patch is being recorded"),
            std::string::npos);
  EXPECT_NE(error_of("REMOVE PATCH 'p.vlp'", ErrorKind::NotFound).find("REMOVE PATCH at 1:1: no patch \"p.vlp\""),
            std::string::npos);
  // A patch file ends in .vlp, in an existing directory, outside the vindex in use.
  EXPECT_NE(error_of("BEGIN PATCH 'notes.txt'", ErrorKind::InvalidArgument).find("ends in .vlp"), std::string::npos);
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

TEST_F(Fixture, ACancelFlagStopsTheStatement) {
  std::atomic<bool> flag{true};
  session.set_cancel(&flag);
  for (const std::string src : {"DESCRIBE 'abc'", "WALK 'xy'", "SELECT * FROM FEATURES", "SHOW FEATURES 0",
                                "SELECT * FROM EDGES NEAREST TO 'abc' AT LAYER 0"})
    EXPECT_NE(error_of(src, ErrorKind::Cancelled).find("cancelled"), std::string::npos) << src;
  flag = false;
  EXPECT_EQ(run("DESCRIBE 'abc'").rows.size(), 1u);
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
