// The apollo retrieval engine: store layout and validation, routing and entry selection on
// hand-built stores (expected values derived by hand from the formulas in kv/apollo/router.h),
// and the engine contract on the real model (RetrievalMiss, EmptyPrompt, decode before prefill,
// state files).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "kv/apollo/engine.h"
#include "kv/apollo/router.h"
#include "kv/apollo/store.h"
#include "kv/registry.h"
#include "kv/standard.h"
#include "model/model.h"
#include "testlib/engine_testing.h"
#include "testlib/paths.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace larql {
namespace {

using testing::expect_error;
using testing::logits_of;
using testing::max_abs_diff;

std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("larql-apollo-" + std::to_string(::getpid()) + "-" + name)).string();
}

// A vocabulary of 1,000 pieces with scores descending by id, so a piece's rank is id + 1.
Tokenizer rank_vocab() {
  VocabData v;
  for (int i = 0; i < 1000; ++i) {
    v.tokens.push_back(i == 0 ? "<bos>" : i == 1 ? "," : i == 2 ? "\n" : "\xE2\x96\x81w" + std::to_string(i));
    v.scores.push_back(-static_cast<float>(i));
    v.types.push_back(i == 0 ? TokenType::Control : TokenType::Normal);
  }
  v.bos_id = 0;
  return Tokenizer(std::move(v));
}

TEST(ApolloStore, ContentWeightsFollowRankAndSkipNonWords) {
  const auto w = content_weights(rank_vocab());
  EXPECT_EQ(w[0], 0.0f);    // control
  EXPECT_EQ(w[1], 0.0f);    // no letter or digit
  EXPECT_EQ(w[200], 0.0f);  // rank 201 <= 300: frequent
  EXPECT_NEAR(w[599], std::log(600.0 / 300.0), 1e-6);  // rank 600
  EXPECT_NEAR(w[999], std::log(1000.0 / 300.0), 1e-6);
}

TEST(ApolloStore, IdfIsBm25s) {
  EXPECT_NEAR(window_idf(1, 10), std::log(1.0 + 9.5 / 1.5), 1e-12);
  EXPECT_NEAR(window_idf(10, 10), std::log(1.0 + 0.5 / 10.5), 1e-12);
}

TEST(ApolloStore, WindowsCoverTheDocumentWithOverlap) {
  const Tokenizer tok = rank_vocab();
  std::vector<int32_t> doc;
  for (int i = 0; i < 100; ++i) doc.push_back(500 + i);
  const ApolloStore s = build_apollo_store(doc, tok, "fp", 40, 30);
  ASSERT_EQ(s.windows.size(), 3u);  // [0,40) [30,70) [60,100)
  EXPECT_EQ(s.windows[0].start, 0);
  EXPECT_EQ(s.windows[1].start, 30);
  EXPECT_EQ(s.windows[2].start, 60);
  EXPECT_EQ(s.windows[2].len, 40);
  EXPECT_EQ(s.entries.size(), 120u);  // every token weighs > 0, 3 x 40 positions
  EXPECT_EQ(s.window_tokens_of(1).front(), 530);
  expect_error(ErrorKind::InvalidArgument, [&] { build_apollo_store({}, tok, "fp", 40, 30); }, "empty");
  expect_error(ErrorKind::InvalidArgument, [&] { build_apollo_store(doc, tok, "fp", 40, 41); }, "stride > window");
  expect_error(ErrorKind::InvalidArgument, [&] { build_apollo_store(doc, tok, "fp", 8, 4); }, "tiny window");
}

TEST(ApolloStore, RoundTripsAndRejectsBadFiles) {
  const Tokenizer tok = rank_vocab();
  std::vector<int32_t> doc;
  for (int i = 0; i < 50; ++i) doc.push_back(400 + (i * 7) % 300);
  const ApolloStore s = build_apollo_store(doc, tok, "model-a", 20, 15);
  const std::string p = tmp_path("roundtrip.store");
  save_apollo_store(s, p);
  const ApolloStore r = load_apollo_store(p, "model-a", 1000);
  EXPECT_EQ(r.doc, s.doc);
  EXPECT_EQ(r.separator, s.separator);
  ASSERT_EQ(r.windows.size(), s.windows.size());
  ASSERT_EQ(r.entries.size(), s.entries.size());
  EXPECT_EQ(r.entries[7].token, s.entries[7].token);
  EXPECT_EQ(r.entries[7].coefficient, s.entries[7].coefficient);
  expect_error(ErrorKind::InvariantViolation, [&] { load_apollo_store(p, "model-b", 1000); }, "another model");
  expect_error(ErrorKind::Format, [&] { load_apollo_store(p, "model-a", 300); }, "ids beyond the vocabulary");
  // Truncate the file at every 97th byte: always a clean Format error, never a crash.
  std::ifstream in(p, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t cut = 0; cut < bytes.size(); cut += 97) {
    const std::string q = tmp_path("cut.store");
    std::ofstream(q, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(cut));
    expect_error(ErrorKind::Format, [&] { load_apollo_store(q, "model-a", 1000); }, "cut at " + std::to_string(cut));
    std::remove(q.c_str());
  }
  expect_error(ErrorKind::NotFound, [&] { load_apollo_store(tmp_path("missing.store"), "model-a", 1000); });
  std::remove(p.c_str());
}

// Three windows of hand-picked tokens; weights: token t weighs t / 100 for t >= 100, else 0.
struct HandStore {
  ApolloStore store;
  std::vector<float> weights = std::vector<float>(1000, 0.0f);
  HandStore() {
    for (int t = 100; t < 1000; ++t) weights[static_cast<size_t>(t)] = static_cast<float>(t) / 100.0f;
    store.window_tokens = 4;
    store.stride = 4;
    store.doc = {500, 600, 700, 50, /**/ 500, 500, 800, 900, /**/ 300, 301, 302, 303};
    store.windows = {{0, 4}, {4, 4}, {8, 4}};
    for (int w = 0; w < 3; ++w)
      for (int i = 0; i < 4; ++i) {
        const int32_t t = store.doc[static_cast<size_t>(4 * w + i)];
        if (weights[static_cast<size_t>(t)] > 0) store.entries.push_back({t, weights[static_cast<size_t>(t)], w, i});
      }
  }
};

TEST(ApolloRouter, ScoresAndCoverageByHand) {
  HandStore h;
  ApolloRouter router(h.store, h.weights);
  // Query {500, 700, 10 (weight 0), 999 (absent)}: content weight 5 + 7 + 9.99 = 21.99.
  // 500 is in windows 0 (tf 1) and 1 (tf 2): df 2 of 3; 700 only in window 0: df 1.
  const ApolloRoute r = router.route({500, 700, 10, 999});
  const double idf2 = std::log(1 + 1.5 / 2.5), idf1 = std::log(1 + 2.5 / 1.5);
  const double s0 = 5 * idf2 * 1 / 2.2 + 7 * idf1 * 1 / 2.2, s1 = 5 * idf2 * 2 / 3.2;
  ASSERT_EQ(r.window, 0);
  EXPECT_NEAR(r.score, s0, 1e-9);
  EXPECT_NEAR(r.coverage, 12.0 / 21.99, 1e-6);
  ASSERT_EQ(r.ranked.size(), 2u);
  EXPECT_EQ(r.ranked[1], 1);
  EXPECT_GT(s0, s1);
  // Nothing in common: no window.
  EXPECT_EQ(router.route({999, 10}).window, -1);
  EXPECT_TRUE(router.route({}).ranked.empty());
}

TEST(ApolloRouter, EntriesNearSeedsWithoutQueryTokens) {
  HandStore h;
  ApolloRouter router(h.store, h.weights);
  // Window 1 = {500, 500, 800, 900}; the query holds 500 (positions 0 and 1).
  auto e = router.entries_for({500}, 1, 12, /*radius=*/1);
  ASSERT_EQ(e.size(), 1u);  // only 800 (position 2) is within 1 of a seed; 900 is 2 away
  EXPECT_EQ(e[0].first, 800);
  e = router.entries_for({500}, 1, 12, 10);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].first, 900);  // best coefficient first
  EXPECT_EQ(router.entries_for({500}, 1, 1, 10).size(), 1u);
  EXPECT_TRUE(router.entries_for({999}, 1, 12, 10).empty());  // no seed, no entries
}

class ApolloRealModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = testing::default_model_path();
    if (path.empty()) return;
    model_ = Model::load(path);
    fwd_ = std::make_shared<Forward>(model_, 2);
    tok_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(model_->file()));
    std::ifstream in(testing::source_dir() + "/data/apollo/document.txt");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    store_ = tmp_path("real.store");
    save_apollo_store(build_apollo_store(tok_->encode(text, false, false), *tok_, model_->fingerprint(), 256, 192), store_);
  }
  static void TearDownTestSuite() {
    if (!store_.empty()) std::remove(store_.c_str());
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "real model missing: run `make setup` (models/...)";
  }
  std::vector<int32_t> ids(const std::string& s) { return tok_->encode(s, true, false); }
  std::unique_ptr<ApolloEngine> make(double coef = 8.0) {
    ApolloOptions o;
    o.store = store_;
    o.coef = coef;
    return std::make_unique<ApolloEngine>(fwd_, o);
  }
  static inline std::shared_ptr<Model> model_;
  static inline std::shared_ptr<Forward> fwd_;
  static inline std::unique_ptr<Tokenizer> tok_;
  static inline std::string store_;
};

TEST_F(ApolloRealModel, ErrorsOfTheContract) {
  auto eng = make();
  expect_error(ErrorKind::InvariantViolation, [&] { eng->decode_step(5); }, "decode before prefill");
  expect_error(ErrorKind::EmptyPrompt, [&] { eng->prefill({}); }, "empty");
  expect_error(ErrorKind::EmptyPrompt, [&] { eng->prefill({tok_->bos_id()}); }, "BOS only");
  expect_error(ErrorKind::RetrievalMiss, [&] { eng->prefill(ids("Question: How many protons are in sodium?\nAnswer:")); },
               "unrelated question");
  expect_error(ErrorKind::RetrievalMiss, [&] { ApolloEngine(fwd_, ApolloOptions{}); }, "no store");
  ApolloOptions bad;
  bad.store = store_;
  bad.layer = 18;
  expect_error(ErrorKind::InvalidArgument, [&] { ApolloEngine(fwd_, bad); }, "layer beyond the model");
  expect_error(ErrorKind::RetrievalMiss, [&] { make_engine(parse_engine_spec("apollo"), fwd_); }, "registry, no store");
  // A store that is really a state file of another engine.
  StandardEngine std_eng(fwd_, 0);
  std_eng.prefill(ids("Hello"));
  const std::string state = tmp_path("standard.state");
  std_eng.save_state(state);
  ApolloOptions wrong;
  wrong.store = state;
  expect_error(ErrorKind::InvariantViolation, [&] { ApolloEngine(fwd_, wrong); }, "state file as a store");
  std::remove(state.c_str());
}

TEST_F(ApolloRealModel, WithoutInjectionItIsStandardOverPassagePlusQuery) {
  // coef = 0: the logits must equal standard's on [BOS] + routed window + "\n\n" + query.
  auto eng = make(0.0);
  const auto q = ids("Question: What year was the Tamsin Bridge completed?\nAnswer:");
  const auto h = eng->prefill(q);
  const int64_t w = eng->last_route().window;
  ASSERT_GE(w, 0);
  std::vector<int32_t> ctx{tok_->bos_id()};
  const auto passage = eng->store().window_tokens_of(w);
  ctx.insert(ctx.end(), passage.begin(), passage.end());
  const auto sep = tok_->encode("\n\n", false, false);
  ctx.insert(ctx.end(), sep.begin(), sep.end());
  ctx.insert(ctx.end(), q.begin() + 1, q.end());
  StandardEngine ref(fwd_, 0);
  EXPECT_EQ(max_abs_diff(logits_of(*fwd_, h), logits_of(*fwd_, ref.prefill(ctx))), 0.0f);
  EXPECT_EQ(eng->n_past(), static_cast<int64_t>(ctx.size()));
  EXPECT_EQ(max_abs_diff(logits_of(*fwd_, eng->decode_step(42)), logits_of(*fwd_, ref.decode_step(42))), 0.0f);
}

TEST_F(ApolloRealModel, InjectionMovesTheLastPositionOnly) {
  auto plain = make(0.0), injected = make(8.0);
  const auto q = ids("Question: Which engineer from Lowfield designed the bridge?\nAnswer:");
  const auto a = logits_of(*fwd_, plain->prefill(q));
  const auto b = logits_of(*fwd_, injected->prefill(q));
  ASSERT_FALSE(injected->last_entries().empty());
  EXPECT_GT(max_abs_diff(a, b), 1e-3f);
  for (const auto& [t, c] : injected->last_entries()) EXPECT_GT(c, 0.0f);
}

TEST_F(ApolloRealModel, StateFileContinuesIdentically) {
  auto eng = make();
  const auto q = ids("Question: In what year was the Lantern Fair started?\nAnswer:");
  eng->prefill(q);
  const std::string p = tmp_path("apollo.state");
  eng->save_state(p);
  const auto direct = logits_of(*fwd_, eng->decode_step(1234));
  auto other = make();
  other->load_state(p);
  EXPECT_EQ(max_abs_diff(direct, logits_of(*fwd_, other->decode_step(1234))), 0.0f);
  StandardEngine std_eng(fwd_, 0);
  expect_error(ErrorKind::InvariantViolation, [&] { std_eng.load_state(p); }, "apollo state into standard");
  auto different = make(4.0);
  expect_error(ErrorKind::InvariantViolation, [&] { different->load_state(p); }, "other options");
  std::remove(p.c_str());
}

}  // namespace
}  // namespace larql
