// Pure scoring functions (hand-derived values), the needle builder, the JSONL parser, and one
// small structural smoke run through the library with the real model (skipped if absent).
#include "accuracy/accuracy.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "compute/logits.h"
#include "formats/gguf.h"
#include "inference/forward.h"
#include "model/model.h"
#include "testlib/paths.h"
#include "util/error.h"

namespace larql::accuracy {
namespace {

std::vector<double> logs(std::vector<double> p) {
  for (double& x : p) x = std::log(x);
  return p;
}

TEST(Distributions, LogSoftmaxOfEqualLogitsIsUniform) {
  const float x[4] = {3, 3, 3, 3};
  std::vector<double> out;
  compute::log_softmax(x, 4, out);
  for (double v : out) EXPECT_NEAR(v, std::log(0.25), 1e-12);
}

TEST(Distributions, KlHandDerived) {
  // KL([.5,.5] || [.25,.75]) = .5 ln 2 + .5 ln(2/3) = .5 ln(4/3)
  EXPECT_NEAR(kl_nats(logs({0.5, 0.5}), logs({0.25, 0.75})), 0.5 * std::log(4.0 / 3.0), 1e-12);
  EXPECT_NEAR(kl_nats(logs({0.2, 0.3, 0.5}), logs({0.2, 0.3, 0.5})), 0.0, 1e-15);
  // A zero in P contributes nothing: KL([1,0] || [.5,.5]) = ln 2.
  std::vector<double> p = {0.0, -INFINITY};
  EXPECT_NEAR(kl_nats(p, logs({0.5, 0.5})), std::log(2.0), 1e-12);
}

TEST(Distributions, JsHandDerived) {
  // Disjoint supports: JS = ln 2.
  std::vector<double> p = {0.0, -INFINITY}, q = {-INFINITY, 0.0};
  EXPECT_NEAR(js_nats(p, q), std::log(2.0), 1e-12);
  EXPECT_NEAR(js_nats(logs({0.3, 0.7}), logs({0.3, 0.7})), 0.0, 1e-15);
  // P=[1,0], Q=[.5,.5]: M=[.75,.25]; KL(P||M)=ln(4/3); KL(Q||M)=.5 ln(2/3)+.5 ln 2 = .5 ln(4/3)
  std::vector<double> one = {0.0, -INFINITY};
  EXPECT_NEAR(js_nats(one, logs({0.5, 0.5})), 0.5 * (std::log(4.0 / 3.0) + 0.5 * std::log(4.0 / 3.0)), 1e-12);
  // Symmetric.
  EXPECT_NEAR(js_nats(logs({0.1, 0.9}), logs({0.6, 0.4})), js_nats(logs({0.6, 0.4}), logs({0.1, 0.9})), 1e-15);
}

TEST(Distributions, CosineHandDerived) {
  // [1,0] . [.5,.5] = .5; norms 1 and sqrt(.5): cos = .5/sqrt(.5) = sqrt(.5).
  std::vector<double> one = {0.0, -INFINITY};
  EXPECT_NEAR(cosine_probs(one, logs({0.5, 0.5})), std::sqrt(0.5), 1e-12);
  EXPECT_NEAR(cosine_probs(logs({0.2, 0.8}), logs({0.2, 0.8})), 1.0, 1e-12);
  std::vector<double> other = {-INFINITY, 0.0};
  EXPECT_NEAR(cosine_probs(one, other), 0.0, 1e-15);
}

TEST(Distributions, BitsAndArgmax) {
  const auto lp = logs({0.5, 0.25, 0.125, 0.125});
  EXPECT_NEAR(surprisal_bits(lp, 0), 1.0, 1e-12);
  EXPECT_NEAR(surprisal_bits(lp, 1), 2.0, 1e-12);
  EXPECT_NEAR(surprisal_bits(lp, 3), 3.0, 1e-12);
  EXPECT_EQ(compute::argmax(lp.data(), 4), 0);
  EXPECT_THROW(surprisal_bits(lp, 4), Error);
  EXPECT_THROW(kl_nats(lp, logs({0.5, 0.5})), Error);
}

int64_t words(std::string_view s) {
  std::istringstream in{std::string(s)};
  std::string w;
  int64_t n = 0;
  while (in >> w) ++n;
  return n;
}

TEST(Needle, LengthWithinFivePercentAndNeedleAtDepth) {
  for (int64_t target : {512, 1024, 2048, 4096, 8192}) {
    for (double depth : {0.0, 0.1, 0.5, 0.9, 1.0}) {
      const Haystack h = build_haystack(words, target, depth);
      // The estimate is exact for a word-count tokenizer: 1 (BOS) + words.
      EXPECT_EQ(h.tokens, 1 + words(h.text));
      EXPECT_LE(std::abs(h.tokens - target), target * 0.05) << target << " " << depth;
      // The needle starts where the estimate says.
      const size_t at = h.text.find(kNeedle);
      ASSERT_NE(at, std::string::npos);
      EXPECT_EQ(h.needle_token_pos, 1 + words(h.text.substr(0, at)));
      // At the requested depth of the filler, within one sentence (< 20 words) either way.
      const int64_t needle_len = words(kNeedle), question_len = words(kNeedleQuestion);
      const double filler = static_cast<double>(h.tokens - 1 - needle_len - question_len);
      EXPECT_NEAR(static_cast<double>(h.needle_token_pos - 1), depth * filler, 20.0) << target << " " << depth;
      // The question closes the text and appears exactly twice (needle + question).
      EXPECT_EQ(h.text.substr(h.text.size() - std::string(kNeedleQuestion).size()), kNeedleQuestion);
      EXPECT_EQ(h.text.find(kNeedle, at + 1), std::string::npos);
    }
  }
  EXPECT_THROW(build_haystack(words, 10, 0.5), Error);
  EXPECT_THROW(build_haystack(words, 512, 1.5), Error);
  EXPECT_EQ(length_label(512), "512");
  EXPECT_EQ(length_label(8192), "8k");
}

TEST(Corpus, ParsesJsonlAndNamesBadLines) {
  const auto v = parse_jsonl("{\"prompt\": \"2 + 2 =\", \"answer\": \" 4\"}\n\n"
                             "{\"prompt\": \"a\", \"answer\": \" b\", \"parametric\": \" c\"}\n",
                             "x");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].prompt, "2 + 2 =");
  EXPECT_EQ(v[0].answer, " 4");
  EXPECT_EQ(v[1].parametric, " c");
  try {
    parse_jsonl("{\"prompt\": \"a\"}\n", "x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos);
  }
  EXPECT_THROW(parse_jsonl("not json\n", "x"), Error);
}

// Issue 9: the library reads no environment variable. $LARQL_ACCURACY_DATA is the CLI's; it
// passes it as `first_choice`.
TEST(Corpus, DataDirComesFromTheArgumentsNotTheEnvironment) {
  const auto dir = std::filesystem::temp_directory_path() / ("larql-acc-data-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "parametric.jsonl") << "{\"prompt\": \"a\", \"answer\": \" b\"}\n";
  ::setenv("LARQL_ACCURACY_DATA", dir.c_str(), 1);
  std::string found;
  try {
    found = find_data_dir("");  // ./data/accuracy or the source tree's, or none
  } catch (const Error&) {
  }
  ::unsetenv("LARQL_ACCURACY_DATA");
  EXPECT_NE(found, dir.string());
  EXPECT_EQ(find_data_dir("", dir.string()), dir.string());
  EXPECT_EQ(find_data_dir(dir.string(), "elsewhere"), dir.string());
  std::filesystem::remove_all(dir);
}

TEST(Corpus, ShippedCorporaAreBigEnough) {
  const std::string dir = testing::source_dir() + "/data/accuracy";
  EXPECT_GE(load_jsonl(dir + "/parametric.jsonl", "parametric").size(), 100u);
  const auto conflict = load_jsonl(dir + "/conflict.jsonl", "conflict");
  EXPECT_GE(conflict.size(), 20u);
  for (const auto& c : conflict) EXPECT_FALSE(c.parametric.empty()) << c.label;
}

TEST(Suite, QuickSmokeWithStandardOnRealModel) {
  LARQL_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  auto forward = std::make_shared<Forward>(model, 2);
  const Tokenizer tok = Tokenizer(model->source().vocabulary());
  auto cases = load_jsonl(testing::source_dir() + "/data/accuracy/parametric.jsonl", "parametric");
  cases.resize(3);
  // The bare "▁" before a digit joins the prompt: " 4" scores the token "4".
  const Target t = make_target(tok, Case{"p", "p:1", "2 + 2 =", " 4", ""});
  EXPECT_EQ(tok.token_to_piece(t.answer_id), "4");
  // Needle prompts with the real tokenizer: within 5% of the target length.
  for (const Case& c : build_cases(tok, {"in-context"}, true, testing::source_dir() + "/data/accuracy", 32768)) {
    const int64_t want = c.corpus == "in-context-512" ? 512 : 1024;
    const auto n = static_cast<int64_t>(make_target(tok, c).prompt_ids.size());
    EXPECT_LE(std::abs(n - want), want * 0.05) << c.label << ": " << n;
    EXPECT_EQ(tok.token_to_piece(make_target(tok, c).answer_id), "7");
  }
  const auto scores = run_suite(forward, tok, parse_engine_list("standard;standard:window=4096"), cases);
  ASSERT_EQ(scores.size(), 2u);
  for (const Score& s : scores) {
    EXPECT_TRUE(s.skipped.empty()) << s.skipped;
    EXPECT_EQ(s.cases, 3);
    EXPECT_GE(s.top1, 0.0);
    EXPECT_LE(s.top1, 1.0);
    EXPECT_GE(s.mean_bits, 0.0);
    EXPECT_NEAR(s.mean_kl, 0.0, 1e-9);  // standard vs itself (a window wider than the prompt too)
    EXPECT_NEAR(s.mean_js, 0.0, 1e-9);
    EXPECT_NEAR(s.mean_cosine, 1.0, 1e-9);
    EXPECT_EQ(s.parametric_rate, -1);
  }
}

}  // namespace
}  // namespace larql::accuracy
