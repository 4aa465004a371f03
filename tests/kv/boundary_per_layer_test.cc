// boundary-per-layer: policy choice (unit), and its contract on the real model (docs/engines.md):
// calibrate on one text, then end-to-end mean KL vs standard on a different, held-out text stays
// within the record's bound; a record for another model is refused; a missing record says how
// to make one. Sized for a 2-core machine (~1 min).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <fstream>
#include <string>
#include <vector>

#include "kv/cached_residual.h"
#include "kv/calibration.h"
#include "kv/markov_rs.h"
#include "kv/registry.h"
#include "kv/standard.h"
#include "model/model.h"
#include "testlib/engine_testing.h"
#include "testlib/paths.h"
#include "testlib/synthetic_model.h"
#include "tokenizer/tokenizer.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace larql {
namespace {

TEST(BoundaryPerLayerPolicy, GreedyStaysWithinBudgetAndPrefersBytesPerNat) {
  // Layer 0: cheap bf16 and int8; layer 1: expensive int8; layer 2: expensive everything.
  const std::vector<std::array<double, 3>> cost = {{0, 1e-4, 2e-4}, {0, 1e-4, 5e-2}, {0, 1.0, 2.0}};
  double bound = -1;
  auto pol = choose_policy(cost, {100, 100, 100}, 640, 0.01, &bound);
  EXPECT_EQ(pol[0], ColdCodec::Int8);
  EXPECT_EQ(pol[1], ColdCodec::Bf16);
  EXPECT_EQ(pol[2], ColdCodec::F32);
  EXPECT_NEAR(bound, 3e-4, 1e-12);
  pol = choose_policy(cost, {100, 100, 100}, 640, 0.0, &bound);
  for (auto c : pol) EXPECT_EQ(c, ColdCodec::F32);
  EXPECT_EQ(bound, 0.0);
}

TEST(BoundaryPerLayerPolicy, RecordRoundTripsAndMissingRecordSaysHowToMakeOne) {
  BplRecord r;
  r.fingerprint = "abc";
  r.window = 64;
  r.corpus_id = corpus_id({2, 3, 4});
  r.budget = 0.01;
  r.bound = 0.005;
  r.samples = 8;
  r.policy = {ColdCodec::F32, ColdCodec::Bf16, ColdCodec::Int8};
  r.cost = {{0, 1, 2}, {0, 3, 4}, {0, 5, 6}};
  r.cold_rows = {1, 2, 3};
  const std::string path =
      (std::filesystem::temp_directory_path() / ("larql-bpl-unit-" + std::to_string(::getpid()) + ".json")).string();
  write_bpl_record(path, r);
  const BplRecord b = read_bpl_record(path);
  EXPECT_EQ(b.fingerprint, "abc");
  EXPECT_EQ(b.policy, r.policy);
  EXPECT_EQ(b.cost, r.cost);
  EXPECT_EQ(b.window, 64);
  EXPECT_EQ(b.corpus_id, r.corpus_id);
  // An edited or damaged record (one cost changed by hand) fails its checksum.
  {
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const size_t at = text.find("\"int8\": 6");
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, 10, "\"int8\": 7");
    clear_inputs();
    std::ofstream(path, std::ios::trunc) << text;
  }
  try {
    read_bpl_record(path);
    ADD_FAILURE() << "an edited record was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  // A budget that is not a finite number cannot be written (JSON has no inf).
  r.budget = std::numeric_limits<double>::infinity();
  clear_inputs();
  EXPECT_THROW(write_bpl_record(path, r), Error);
  std::filesystem::remove(path);
  try {
    read_bpl_record(path);
    FAIL() << "no error for a missing record";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BackendUnavailable);
    EXPECT_NE(std::string(e.what()).find("larql calibrate MODEL --engine boundary-per-layer --budget"), std::string::npos)
        << e.what();
  }
}

// Issue 9: engines read no environment variable. The record is the spec's `record`, else
// <model>.bpl.json; $LARQL_BPL_RECORD is the CLI's default for that key, which the engine ignores.
TEST(BoundaryPerLayerPolicy, RecordComesFromTheSpecNotTheEnvironment) {
  auto sm = testing::make_synthetic_model();
  auto fwd = std::make_shared<Forward>(Model::load(sm->path), 1);
  EXPECT_EQ(bpl_record_path("dir/m.gguf"), "dir/m.gguf.bpl.json");
  BplRecord rec;  // a valid record for this model: f32 on every layer
  rec.fingerprint = fwd->model().fingerprint();
  rec.window = 8;
  rec.corpus_id = "hand-made";
  rec.bound = 0.25;
  for (int64_t l = 0; l < fwd->config().n_layers; ++l) {
    rec.policy.push_back(ColdCodec::F32);
    rec.cost.push_back({0, 0, 0});
    rec.cold_rows.push_back(0);
  }
  const std::string path =
      (std::filesystem::temp_directory_path() / ("larql-bpl-env-" + std::to_string(::getpid()) + ".json")).string();
  write_bpl_record(path, rec);
  ::setenv("LARQL_BPL_RECORD", path.c_str(), 1);
  auto plain = make_engine(parse_engine_spec("boundary-per-layer"), fwd);
  ::unsetenv("LARQL_BPL_RECORD");
  EXPECT_NE(plain->info().config.find("uncalibrated"), std::string::npos) << plain->info().config;
  EXPECT_NE(plain->info().note.find("no calibration record at " + bpl_record_path(sm->path)), std::string::npos)
      << plain->info().note;
  auto keyed = make_engine(parse_engine_spec("boundary-per-layer:record=" + path), fwd);
  EXPECT_NE(keyed->info().config.find("bound=0.25"), std::string::npos) << keyed->info().config;
  EXPECT_NE(keyed->info().config.find("window=8,"), std::string::npos) << keyed->info().config;
  std::filesystem::remove(path);
}

std::vector<int32_t> text_tokens(const Tokenizer& tok, const std::string& unit, int64_t n) {
  std::vector<int32_t> ids{tok.bos_id()};
  const auto u = tok.encode(unit, false, false);
  while (static_cast<int64_t>(ids.size()) < n) ids.insert(ids.end(), u.begin(), u.end());
  ids.resize(static_cast<size_t>(n));
  return ids;
}

const char* kCalibText =
    "The river rose through the night, and by morning the lower fields were under water. Farmers moved "
    "their animals to the ridge, where the old church stood, and waited for the rain to stop. Children "
    "counted the boats that drifted past; one carried a piano, another a wardrobe with its doors open. ";
const char* kHeldOutText =
    "In mathematics, a group is a set with an operation that combines any two elements to form a third, "
    "such that the operation is associative, an identity element exists, and every element has an inverse. "
    "Groups describe symmetry, from crystals to the solutions of polynomial equations. ";

TEST(BoundaryPerLayerRealModel, HeldOutKlWithinCalibratedBound_RecordChecks) {
  LARQL_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  auto fwd = std::make_shared<Forward>(model, 2);
  const Tokenizer tok = Tokenizer(model->source().vocabulary());
  const ModelConfig& c = model->config();
  using clk = std::chrono::steady_clock;
  const auto t0 = clk::now();

  CalibrationOptions opt;
  opt.window = 64;
  opt.budget = 0.02;
  opt.decode_steps = 8;
  const BplRecord rec = calibrate_boundary_per_layer(fwd, text_tokens(tok, kCalibText, 240), opt);
  const double t_cal = std::chrono::duration<double>(clk::now() - t0).count();
  std::printf("[real] calibration (240 tokens, window 64, %lld steps): %.1fs, bound %.3g nats (joint %.3g, budget %.3g)\n",
              static_cast<long long>(rec.samples), t_cal, rec.bound, rec.joint, rec.budget);
  for (size_t li = 0; li < rec.policy.size(); ++li)
    std::printf("[real]   layer %2zu cold_rows=%4lld bf16=%.3g int8=%.3g -> %s\n", li,
                static_cast<long long>(rec.cold_rows[li]), rec.cost[li][1], rec.cost[li][2],
                cold_codec_name(rec.policy[li]));
  EXPECT_LE(rec.bound, opt.budget);
  EXPECT_EQ(static_cast<int64_t>(rec.policy.size()), c.n_layers);
  EXPECT_TRUE(std::any_of(rec.policy.begin(), rec.policy.end(), [](ColdCodec x) { return x != ColdCodec::F32; }));

  const std::string file =
      (std::filesystem::temp_directory_path() / ("larql-bpl-real-" + std::to_string(::getpid()) + ".json")).string();
  write_bpl_record(file, rec);

  // Held-out: a different text, greedy tokens from standard, mean KL over the decode steps.
  auto engine = make_boundary_per_layer(fwd, file, 0, 0, opt.budget);
  StandardEngine st(fwd, 0);
  const auto prompt = text_tokens(tok, kHeldOutText, 300);
  std::vector<float> a(static_cast<size_t>(c.vocab)), b(a.size());
  fwd->logits(st.prefill(prompt).data(), 1, a.data());
  fwd->logits(engine->prefill(prompt).data(), 1, b.data());
  const int64_t steps = 8;
  double sum = 0, mx = 0;
  for (int64_t s = 0; s < steps; ++s) {
    const auto tokid = static_cast<int32_t>(std::max_element(a.begin(), a.end()) - a.begin());
    fwd->logits(st.decode_step(tokid).data(), 1, a.data());
    fwd->logits(engine->decode_step(tokid).data(), 1, b.data());
    const double k = testing::kl_logits(a, b);
    sum += k;
    mx = std::max(mx, k);
  }
  const double mean = sum / double(steps);
  const EngineMemory m = engine->memory();
  std::printf("[real] boundary-per-layer held-out (300 tokens, %lld steps): mean KL %.3g, max %.3g, bound %.3g; "
              "hot %zu cold %zu bytes; config %s\n",
              static_cast<long long>(steps), mean, mx, rec.bound, m.hot_bytes, m.cold_bytes, engine->info().config.c_str());
  EXPECT_LE(mean, rec.bound);
  EXPECT_GT(m.cold_bytes, 0u);

  // Save / load continues with identical logits.
  const std::string state = file + ".state";
  engine->save_state(state);
  auto other = make_boundary_per_layer(fwd, file, 0, 0, -1);
  other->load_state(state);
  std::vector<float> l1(a.size()), l2(a.size());
  fwd->logits(engine->decode_step(1000).data(), 1, l1.data());
  fwd->logits(other->decode_step(1000).data(), 1, l2.data());
  double d = 0;
  for (size_t i = 0; i < l1.size(); ++i) d = std::max(d, double(std::fabs(l1[i] - l2[i])));
  EXPECT_LE(d, 1e-4);
  std::filesystem::remove(state);

  // Refusals: another model's fingerprint; another window; a budget below the bound.
  BplRecord foreign = rec;
  foreign.fingerprint = "not-this-model";
  clear_inputs();  // this process read the record: rewriting it on purpose (a CLI command may not)
  write_bpl_record(file, foreign);
  try {
    make_boundary_per_layer(fwd, file, 0, 0, -1);
    ADD_FAILURE() << "record for another fingerprint accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
  }
  clear_inputs();
  write_bpl_record(file, rec);
  EXPECT_THROW(make_boundary_per_layer(fwd, file, 128, 0, -1), Error);
  if (rec.bound > 0) {
    EXPECT_THROW(make_boundary_per_layer(fwd, file, 0, 0, rec.bound / 2), Error);
  }
  std::filesystem::remove(file);
  // Missing record: the engine runs bf16 on every layer and its note says how to calibrate
  // (issue 7: refusing to run was a default that did not start); a budget cannot be checked.
  {
    auto e = make_boundary_per_layer(fwd, file, 0, 0, -1);
    EXPECT_NE(e->info().config.find("policy=" + std::string(static_cast<size_t>(fwd->config().n_layers), 'b')),
              std::string::npos)
        << e->info().config;
    EXPECT_NE(e->info().note.find("larql calibrate MODEL --engine boundary-per-layer --budget X"), std::string::npos)
        << e->info().note;
  }
  try {
    make_boundary_per_layer(fwd, file, 0, 0, 0.01);
    ADD_FAILURE() << "a budget without a record was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BackendUnavailable);
    EXPECT_NE(std::string(e.what()).find("run `larql calibrate MODEL --engine boundary-per-layer --budget X`"),
              std::string::npos)
        << e.what();
  }
  std::printf("[real] boundary-per-layer contract test: %.1fs\n", std::chrono::duration<double>(clk::now() - t0).count());
}

// With an all-f32 policy the engine is markov-rs: exact vs standard with a cold tier.
TEST(BoundaryPerLayerRealModel, AllF32PolicyIsExact) {
  LARQL_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  auto fwd = std::make_shared<Forward>(model, 2);
  const ModelConfig& c = model->config();
  CachedResidualEngine e(fwd, 32, std::vector<ColdCodec>(static_cast<size_t>(c.n_layers), ColdCodec::F32));
  StandardEngine st(fwd, 0);
  std::vector<int32_t> prompt{2};
  for (int i = 0; i < 100; ++i) prompt.push_back(300 + (i * 7919) % 20000);
  std::vector<float> a(static_cast<size_t>(c.vocab)), b(a.size());
  fwd->logits(st.prefill(prompt).data(), 1, a.data());
  fwd->logits(e.prefill(prompt).data(), 1, b.data());
  double mx = testing::kl_logits(a, b);
  for (int s = 0; s < 6; ++s) {
    const auto t = static_cast<int32_t>(std::max_element(a.begin(), a.end()) - a.begin());
    fwd->logits(st.decode_step(t).data(), 1, a.data());
    fwd->logits(e.decode_step(t).data(), 1, b.data());
    mx = std::max(mx, testing::kl_logits(a, b));
  }
  EXPECT_LE(mx, 1e-6);
  EXPECT_GT(e.memory().cold_bytes, 0u);
}

}  // namespace
}  // namespace larql
