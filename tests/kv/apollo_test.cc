// The apollo retrieval engine: store layout and validation, routing and entry selection on
// hand-built stores (expected values derived by hand from the formulas in kv/apollo/router.h),
// and the engine contract on the real model (RetrievalMiss, EmptyPrompt, decode before prefill,
// state files).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "kv/apollo/engine.h"
#include "kv/apollo/router.h"
#include "kv/apollo/store.h"
#include "kv/apollo/words.h"
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
  expect_error(ErrorKind::InvalidArgument, [&] { load_apollo_store(p, "model-b", 1000); }, "another model");
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

// Word pieces: the words of a token sequence and their weights (kv/apollo/words.h, router.h).
TEST(ApolloWords, NormalisedWordsOfText) {
  EXPECT_EQ(normalize_word("Zanzibar"), "zanzibar");
  EXPECT_EQ(normalize_word("ZANZIBAR"), "zanzibar");
  EXPECT_EQ(normalize_word("\xEF\xBD\x9A\xEF\xBD\x81\xEF\xBD\x8E"), "zan");  // fullwidth "ｚａｎ" (NFKC)
  EXPECT_EQ(normalize_word("\xC3\x89TAT"), "\xC3\xA9tat");                    // "ÉTAT" -> "état"
  EXPECT_EQ(normalize_word("Stra\xC3\x9F" "e"), "strasse");                   // "Straße": full case folding
  using V = std::vector<std::string>;
  EXPECT_EQ(words_of_text("Vantreel's net-mender, in 1614!"), (V{"vantreel", "s", "net", "mender", "in", "1614"}));
  EXPECT_EQ(words_of_text("  \n\t.,;"), V{});
  // Curly quotes and dashes separate words; combining marks stay with their letter.
  EXPECT_EQ(words_of_text("island\xE2\x80\x94the \xE2\x80\x9Cpier\xE2\x80\x9D"), (V{"island", "the", "pier"}));
  EXPECT_EQ(words_of_text("cafe\xCC\x81 ok"), (V{"caf\xC3\xA9", "ok"}));  // e + U+0301 -> é (NFKC composes)
  EXPECT_EQ(words_of_text("a\xFF" "b"), (V{"a", "b"}));                   // an ill-formed byte separates
}

// A vocabulary of whole-word pieces and the split a word gets at the start of a line.
Tokenizer word_vocab() {
  VocabData v;
  v.tokens = {"<bos>", "\n", ".", "\xE2\x96\x81" "alpha", "\xE2\x96\x81" "beta", "\xE2\x96\x81" "gamma",
              "\xE2\x96\x81" "delta", "\xE2\x96\x81" "the", "Al", "pha", "\xE2\x96\x81" "Alpha", "\xE2\x96\x81" "ALPHA",
              "\xE2\x96\x81" "epsilon", "\xE2\x96\x81" "zeta", "\xE2\x96\x81" "eta", "\xE2\x96\x81" "theta", "\xE2\x96\x81" "iota"};
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    v.scores.push_back(-static_cast<float>(i));
    v.types.push_back(i == 0 ? TokenType::Control : TokenType::Normal);
  }
  v.bos_id = 0;
  return Tokenizer(std::move(v));
}
enum : int32_t { kNl = 1, kDot, kAlpha, kBeta, kGamma, kDelta, kThe, kAl, kPha, kAlphaCap, kAlphaUp, kEpsilon, kZeta, kEta, kTheta, kIota };

TEST(ApolloWords, SameWordsHoweverTokenised) {
  const Tokenizer tok = word_vocab();
  // "\nAlpha the ALPHA." with "Alpha" split at the line start, then " Alpha" as one piece.
  const auto w = words_of_tokens(tok, {0, kNl, kAl, kPha, kThe, kAlphaUp, kDot, kAlphaCap});
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0].text, "alpha");
  EXPECT_EQ(w[0].first, 2);  // token indices, BOS (control) counted but contributing nothing
  EXPECT_EQ(w[0].last, 3);
  EXPECT_EQ(w[1].text, "the");
  EXPECT_EQ(w[2].text, "alpha");
  EXPECT_EQ(w[2].first, 5);
  EXPECT_EQ(w[2].last, 5);
  EXPECT_EQ(w[3].text, "alpha");
  EXPECT_EQ(w[3].first, 7);
}

// Scores 0, -1, -2, ... so a piece's rank is its id + 1; fillers keep the test pieces' ranks
// where the formula needs them.
TEST(ApolloWords, WordWeightSumsThePiecesOfTheWordAfterASpace) {
  VocabData v;
  auto add = [&](const std::string& piece) {
    v.tokens.push_back(piece);
    v.types.push_back(v.tokens.size() == 1 ? TokenType::Control : TokenType::Normal);
    v.scores.push_back(-static_cast<float>(v.scores.size()));
  };
  auto fill_to = [&](size_t id) {
    while (v.tokens.size() < id) add("\xE2\x96\x81" "f" + std::to_string(v.tokens.size()));
  };
  const std::string sp = "\xE2\x96\x81";
  add("<bos>");
  add(sp + "the");  // rank 2: frequent, weight 0
  fill_to(350);
  for (const char* p : {"c", "a", "t", "h", "e", "z", "b", "r"}) add(p);
  for (const std::string p : {"", "t", "th", "c", "ca", "z", "ze"}) add(sp + p);
  fill_to(599);
  add(sp + "cat");  // id 599, rank 600
  fill_to(899);
  add(sp + "zeb");  // rank 900
  add("ra");        // rank 901
  v.bos_id = 0;
  const Tokenizer tok(std::move(v));
  ASSERT_EQ(tok.encode(" zebra", false, false), (std::vector<int32_t>{899, 900}));
  const WordWeights weight(tok);
  EXPECT_EQ(weight("the"), 0.0);
  EXPECT_NEAR(weight("cat"), std::log(600.0 / 300.0), 1e-6);
  EXPECT_NEAR(weight("zebra"), std::log(900.0 / 300.0) + std::log(901.0 / 300.0), 1e-6);
}

// Three windows of five tokens, word weights given by hand; window 0 starts with "Alpha" split
// as at the start of a line.
struct HandStore {
  Tokenizer tok = word_vocab();
  ApolloStore store;
  std::map<std::string, double> weight{{"alpha", 5}, {"beta", 6}, {"gamma", 7}, {"delta", 8}, {"the", 0},
                                       {"epsilon", 9.99}, {"zeta", 1}, {"eta", 1}, {"theta", 1}, {"iota", 1}};
  ApolloRouter::WordWeightFn fn = [this](const std::string& w) { return weight.at(w); };
  HandStore() {
    store.window_tokens = 5;
    store.stride = 5;
    store.doc = {kAl, kPha, kGamma, kThe, kNl, /**/ kAlpha, kAlphaUp, kBeta, kDelta, kNl, /**/ kZeta, kEta, kTheta, kIota, kDot};
    store.windows = {{0, 5}, {5, 5}, {10, 5}};
    const std::map<int32_t, float> coef{{kAl, 5}, {kPha, 5}, {kGamma, 7}, {kAlpha, 5}, {kAlphaUp, 5}, {kBeta, 6},
                                        {kDelta, 8}, {kZeta, 1}, {kEta, 1}, {kTheta, 1}, {kIota, 1}};
    for (int w = 0; w < 3; ++w)
      for (int i = 0; i < 5; ++i) {
        const int32_t t = store.doc[static_cast<size_t>(5 * w + i)];
        if (coef.count(t)) store.entries.push_back({t, coef.at(t), w, i});
      }
  }
};

TEST(ApolloRouter, ScoresAndCoverageByHand) {
  HandStore h;
  ApolloRouter router(h.store, h.tok, 0.25, h.fn);
  // Query " Alpha gamma the epsilon": content weight 5 + 7 + 9.99 = 21.99 ("the" weighs 0,
  // "epsilon" is not in the document). "alpha" is in windows 0 (tf 1, as "Al" "pha") and 1
  // (tf 2, as " alpha" and " ALPHA"): df 2 of 3; "gamma" only in window 0: df 1.
  const ApolloRoute r = router.route({0, kAlphaCap, kGamma, kThe, kEpsilon});
  const double idf2 = std::log(1 + 1.5 / 2.5), idf1 = std::log(1 + 2.5 / 1.5);
  const double s0 = 5 * idf2 * 1 / 2.2 + 7 * idf1 * 1 / 2.2, s1 = 5 * idf2 * 2 / 3.2;
  ASSERT_EQ(r.window, 0);
  EXPECT_EQ(r.best, 0);
  EXPECT_TRUE(r.retrieved());
  EXPECT_NEAR(r.score, s0, 1e-9);
  EXPECT_NEAR(r.coverage, 12.0 / 21.99, 1e-9);
  ASSERT_EQ(r.ranked.size(), 2u);
  EXPECT_EQ(r.ranked[1], 1);
  EXPECT_GT(s0, s1);
  // The split "Al" "pha" alone matches " alpha" in both windows: window 1 wins on tf.
  const ApolloRoute a = router.route({kAl, kPha});
  EXPECT_EQ(a.window, 1);
  EXPECT_NEAR(a.score, 5 * idf2 * 2 / 3.2, 1e-9);
  EXPECT_NEAR(a.coverage, 1.0, 1e-12);
  // Nothing in common: no window.
  EXPECT_EQ(router.route({kEpsilon, kThe}).best, -1);
  EXPECT_TRUE(router.route({}).ranked.empty());
}

TEST(ApolloRouter, RefusesBelowMinCoverageWithTheBestWindowKept) {
  HandStore h;
  // The query above covers 12 / 21.99 = 54.6% in window 0.
  ApolloRouter strict(h.store, h.tok, 0.6, h.fn);
  const ApolloRoute r = strict.route({kAlphaCap, kGamma, kEpsilon});
  EXPECT_EQ(r.window, -1);
  EXPECT_FALSE(r.retrieved());
  EXPECT_EQ(r.best, 0);
  EXPECT_NEAR(r.coverage, 12.0 / 21.99, 1e-9);
  ApolloRouter lenient(h.store, h.tok, 0.5, h.fn);
  EXPECT_EQ(lenient.route({kAlphaCap, kGamma, kEpsilon}).window, 0);
  expect_error(ErrorKind::InvalidArgument, [&] { ApolloRouter(h.store, h.tok, 1.5, h.fn); }, "min_coverage > 1");
}

TEST(ApolloRouter, EntriesNearSeedsWithoutQueryWords) {
  HandStore h;
  ApolloRouter router(h.store, h.tok, 0.25, h.fn);
  // Window 1 = " alpha ALPHA beta delta\n"; the query's " Alpha" is both occurrences (positions
  // 0 and 1), whatever their case.
  auto e = router.entries_for({kAlphaCap}, 1, 12, /*radius=*/1);
  ASSERT_EQ(e.size(), 1u);  // only beta (position 2) is within 1 of a seed; delta is 2 away
  EXPECT_EQ(e[0].first, kBeta);
  e = router.entries_for({kAlphaCap}, 1, 12, 10);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].first, kDelta);  // best coefficient first
  EXPECT_EQ(router.entries_for({kAlphaCap}, 1, 1, 10).size(), 1u);
  EXPECT_TRUE(router.entries_for({kEpsilon}, 1, 12, 10).empty());  // no seed, no entries
  // Window 0 = "Al" "pha" " gamma the\n": " alpha" seeds on both pieces, which are part of the
  // query's word and so never injected; gamma is.
  e = router.entries_for({kAlpha}, 0, 12, 10);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].first, kGamma);
}

class ApolloRealModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = testing::default_model_path();
    if (path.empty()) return;
    model_ = Model::load(path);
    fwd_ = std::make_shared<Forward>(model_, 2);
    tok_ = std::make_unique<Tokenizer>(Tokenizer(model_->source().vocabulary()));
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
  expect_error(ErrorKind::InvalidArgument, [&] { ApolloEngine(fwd_, wrong); }, "state file as a store");
  std::remove(state.c_str());
}

// Issue 7: a word at the start of a line is tokenised `Z` `anz` `ibar`, after a space
// `▁Zanzibar`; the question must still find the line.
TEST_F(ApolloRealModel, FindsAWordAtTheStartOfALine) {
  const std::string doc =
      "The harbour of Brindlemoor was rebuilt after the storm of 1802, when the old wooden pier was lost to the sea.\n"
      "Zanzibar is an island off the coast of East Africa, famous for its cloves and its old stone town.\n"
      "The lighthouse keeper kept a diary of every ship that passed the point during the long winter.\n";
  const auto doc_ids = tok_->encode(doc, false, false);
  const auto line_start = tok_->encode("\nZanzibar", false, false), after_space = tok_->encode(" Zanzibar", false, false);
  ASSERT_EQ(after_space.size(), 1u);  // the instance: the question's token never occurs in the document
  ASSERT_EQ(std::find(doc_ids.begin(), doc_ids.end(), after_space[0]), doc_ids.end());
  ASSERT_GT(line_start.size(), 2u);
  const std::string p = tmp_path("zanzibar.store");
  save_apollo_store(build_apollo_store(doc_ids, *tok_, model_->fingerprint(), 24, 24), p);
  ApolloOptions o;
  o.store = p;
  ApolloEngine eng(fwd_, o);
  std::remove(p.c_str());
  // The expected window: the one whose text holds the line's opening words.
  int64_t expected = -1;
  for (int64_t w = 0; w < static_cast<int64_t>(eng.store().windows.size()); ++w)
    if (tok_->decode(eng.store().window_tokens_of(w)).find("Zanzibar is an island") != std::string::npos) {
      ASSERT_EQ(expected, -1) << "the layout must put the line in one window";
      expected = w;
    }
  ASSERT_GE(expected, 0);
  for (const char* q : {"Where is Zanzibar?", "WHERE IS ZANZIBAR?", "where is zanzibar", "Zanzibar: where is it?"})
    EXPECT_EQ(eng.route(ids(q)).window, expected) << q;
  eng.prefill(ids("Question: Where is Zanzibar?\nAnswer:"));
  EXPECT_EQ(eng.last_route().window, expected);
  // The pieces of "Zanzibar" are the query's own word: never injected.
  for (const auto& [t, c] : eng.last_entries())
    EXPECT_EQ(std::find(line_start.begin() + 1, line_start.end(), t), line_start.end()) << tok_->token_text(t);
  // The lighthouse line is elsewhere.
  EXPECT_NE(eng.route(ids("Who kept a diary in the lighthouse?")).window, expected);
}

// Issue 7: route() and prefill must make one decision — a question route() retrieves a window
// for is answered, one prefill refuses has no window.
TEST_F(ApolloRealModel, RouteAndPrefillAgreeOnRefusals) {
  auto eng = make();
  for (const char* q : {"How many protons are in sodium?", "Who won the Wimbledon tennis championship?",
                        "Did the Pellory astronomers photograph quasars, nebulae, pulsars and comets?",
                        "Which engineer from Lowfield designed the bridge?", "In what year was the Lantern Fair started?"}) {
    const auto prompt = ids(std::string("Question: ") + q + "\nAnswer:");
    const ApolloRoute r = eng->route(prompt);
    bool refused = false;
    try {
      eng->prefill(prompt);
    } catch (const Error& e) {
      ASSERT_EQ(e.kind(), ErrorKind::RetrievalMiss) << e.what();
      refused = true;
    }
    EXPECT_EQ(r.window >= 0, !refused) << q << " (window " << r.window << ", coverage " << r.coverage << ")";
    EXPECT_EQ(eng->last_route().window, r.window) << q;
  }
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
  expect_error(ErrorKind::InvalidArgument, [&] { std_eng.load_state(p); }, "apollo state into standard");
  auto different = make(4.0);
  expect_error(ErrorKind::InvalidArgument, [&] { different->load_state(p); }, "other options");
  std::remove(p.c_str());
}

}  // namespace
}  // namespace larql
