// Sampler: greedy, top-k, top-p, min-p, temperature, repetition penalty and parameter checks.
// Expected picks are derived by hand from the definitions in sampler.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "inference/sampler.h"
#include "util/error.h"

namespace larql {
namespace {

SamplerParams params(float temp, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f, uint64_t seed = 1) {
  SamplerParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repeat_penalty = 1.0f;
  p.seed = seed;
  return p;
}

const std::vector<float> kLogits = {0.5f, 2.0f, -1.0f, 1.9f, 0.0f, 1.0f};  // argmax = 1

TEST(Sampler, Argmax) {  // compute::argmax (tests/compute/logits_test.cc), as the sampler uses it
  EXPECT_EQ(compute::argmax(kLogits.data(), 6), 1);
  const float ties[3] = {3.0f, 5.0f, 5.0f};
  EXPECT_EQ(compute::argmax(ties, 3), 1);  // first on ties
  const float one[1] = {-7.0f};
  EXPECT_EQ(compute::argmax(one, 1), 0);
}

TEST(Sampler, GreedyIsArgmax) {
  Sampler s(params(0.0f, 40, 0.95f, 0.05f));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(kLogits.data(), 6, {}), 1);
  const float ties[3] = {5.0f, 1.0f, 5.0f};
  EXPECT_EQ(s.sample(ties, 3, {}), 0);
}

TEST(Sampler, TopK1IsArgmaxAtAnyTemperature) {
  for (float t : {0.1f, 1.0f, 5.0f, 100.0f}) {
    Sampler s(params(t, 1, 1.0f, 0.0f, 42));
    for (int i = 0; i < 50; ++i) ASSERT_EQ(s.sample(kLogits.data(), 6, {}), 1) << "temperature " << t;
  }
}

TEST(Sampler, TopKRestrictsToTheKBest) {
  // top_k = 2 keeps ids 1 (2.0) and 3 (1.9); at a high temperature both appear, nothing else.
  Sampler s(params(10.0f, 2, 1.0f, 0.0f, 3));
  std::set<int32_t> seen;
  for (int i = 0; i < 400; ++i) seen.insert(s.sample(kLogits.data(), 6, {}));
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3}));
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedDifferent) {
  std::vector<float> flat(50, 0.0f);  // uniform: maximally random
  auto draw = [&](uint64_t seed) {
    Sampler s(params(1.0f, 0, 1.0f, 0.0f, seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(flat.data(), 50, {}));
    return out;
  };
  EXPECT_EQ(draw(123), draw(123));
  EXPECT_NE(draw(123), draw(124));  // probability of equality 50^-64
  std::set<int32_t> distinct;
  for (int32_t v : draw(5)) distinct.insert(v);
  EXPECT_GT(distinct.size(), 20u);
}

TEST(Sampler, SmallTopPAlwaysPicksTheTopToken) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    Sampler s(params(2.0f, 0, 0.01f, 0.0f, seed));
    for (int i = 0; i < 100; ++i) ASSERT_EQ(s.sample(kLogits.data(), 6, {}), 1);
  }
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // Logits log(0.5), log(0.3), log(0.2): top_p = 0.7 keeps {0, 1} (0.5 < 0.7 <= 0.8).
  const float lg[3] = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s(params(1.0f, 0, 0.7f, 0.0f, 9));
  std::map<int32_t, int> count;
  for (int i = 0; i < 2000; ++i) ++count[s.sample(lg, 3, {})];
  EXPECT_EQ(count.count(2), 0u);
  EXPECT_GT(count[0], 1000);  // 5/8 of the draws expected
  EXPECT_GT(count[1], 550);   // 3/8 expected (750)
}

TEST(Sampler, MinP) {
  // p = (0.5, 0.3, 0.2): min_p = 0.5 keeps tokens with p >= 0.25 -> {0, 1}.
  const float lg[3] = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s(params(1.0f, 0, 1.0f, 0.5f, 11));
  std::set<int32_t> seen;
  for (int i = 0; i < 1000; ++i) seen.insert(s.sample(lg, 3, {}));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
  // min_p = 1 keeps only the top token.
  Sampler one(params(5.0f, 0, 1.0f, 1.0f, 11));
  for (int i = 0; i < 100; ++i) ASSERT_EQ(one.sample(lg, 3, {}), 0);
}

TEST(Sampler, RepetitionPenaltyHandCase) {
  // Logits (3.0, 2.0, -1.0, -0.5) with penalty 2 on history {0, 3}: token 0 -> 1.5 (divided),
  // token 3 -> -1.0 (multiplied); token 1 (2.0) becomes the argmax.
  const float lg[4] = {3.0f, 2.0f, -1.0f, -0.5f};
  SamplerParams p = params(0.0f);
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 64;
  Sampler s(p);
  EXPECT_EQ(s.sample(lg, 4, {0, 3}), 1);
  EXPECT_EQ(s.sample(lg, 4, {}), 0);
  // Penalty 1.4: 3.0 / 1.4 = 2.14 > 2.0 -> token 0 stays on top.
  p.repeat_penalty = 1.4f;
  Sampler s2(p);
  EXPECT_EQ(s2.sample(lg, 4, {0}), 0);
  // Negative logits are multiplied: (-1, -0.5) with history {1}: -0.5 * 3 = -1.5 < -1 -> token 0.
  const float neg[2] = {-1.0f, -0.5f};
  p.repeat_penalty = 3.0f;
  Sampler s3(p);
  EXPECT_EQ(s3.sample(neg, 2, {1}), 0);
  EXPECT_EQ(s3.sample(neg, 2, {}), 1);
  // repeat_last_n bounds the history looked at: token 0 is 3 tokens back, window 2 ignores it.
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 2;
  Sampler s4(p);
  EXPECT_EQ(s4.sample(lg, 4, {0, 2, 2}), 0);
  EXPECT_EQ(s4.sample(lg, 4, {2, 0}), 1);
  // Ids outside the vocabulary in the history are ignored.
  EXPECT_EQ(s4.sample(lg, 4, {-1, 99}), 0);
}

// Without top-k the sampler no longer sorts the vocabulary (sampler.cc); the draws must still
// follow the distribution. 2,000 tokens: ids 0..99 have logit log(10) (weight 10 each, 1,000 in
// all), the other 1,900 logit 0 (1,900 in all): at temperature 1, P(id < 100) = 1000 / 2900.
TEST(Sampler, NoTopKDrawsTheWholeDistribution) {
  std::vector<float> lg(2000, 0.0f);
  for (int i = 0; i < 100; ++i) lg[static_cast<size_t>(i)] = std::log(10.0f);
  Sampler s(params(1.0f, 0, 1.0f, 0.0f, 17));
  const int draws = 20000;
  int high = 0;
  std::set<int32_t> low_seen;
  for (int i = 0; i < draws; ++i) {
    const int32_t id = s.sample(lg.data(), 2000, {});
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 2000);
    if (id < 100) {
      ++high;
    } else {
      low_seen.insert(id);
    }
  }
  const double p = 1000.0 / 2900.0, sd = std::sqrt(draws * p * (1 - p));
  EXPECT_NEAR(high, draws * p, 5 * sd);
  EXPECT_GT(low_seen.size(), 1500u);  // 13,100 draws over 1,900 ids: each missed with p ~ 1e-3
}

// top-p over a large vocabulary (the no-top-k path sorts growing prefixes): 5,000 tokens, the
// 1,000 at multiples of 5 have logit log(2) (probability 2/6000 each, 1/3 in all), the rest 0
// (1/6000 each). top_p = 1/2 + 1/12000 needs the 1,000 high tokens and then 1,001 low ones in id
// order (ties go to the lower id): 1,000 lows lie below 1250, the 1,001st is id 1251.
TEST(Sampler, TopPOverALargeVocabularyKeepsExactlyTheNucleus) {
  std::vector<float> lg(5000, 0.0f);
  for (int i = 0; i < 5000; i += 5) lg[static_cast<size_t>(i)] = std::log(2.0f);
  for (int top_k : {0, 5000}) {  // 5000 = the vocabulary: no top-k either
    Sampler s(params(1.0f, top_k, 0.5f + 1.0f / 12000.0f, 0.0f, 23));
    int32_t max_low = -1;
    for (int i = 0; i < 20000; ++i) {
      const int32_t id = s.sample(lg.data(), 5000, {});
      if (id % 5 == 0) continue;
      ASSERT_LE(id, 1251) << "outside the nucleus, top_k " << top_k;
      max_low = std::max(max_low, id);
    }
    EXPECT_GT(max_low, 1240) << "the nucleus's last low tokens are never drawn, top_k " << top_k;
  }
}

void expect_invalid(SamplerParams p, const std::string& name) {
  try {
    validate(p);
    ADD_FAILURE() << "accepted bad " << name;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
  EXPECT_THROW(Sampler{p}, Error);
}

TEST(Sampler, ValidateRejectsOutOfRange) {
  SamplerParams ok;
  EXPECT_NO_THROW(validate(ok));
  SamplerParams p;
  p = ok; p.top_p = 2.0f; expect_invalid(p, "top-p");
  p = ok; p.top_p = 0.0f; expect_invalid(p, "top-p");
  p = ok; p.top_p = std::nanf(""); expect_invalid(p, "top-p");
  p = ok; p.temperature = -1.0f; expect_invalid(p, "temperature");
  p = ok; p.temperature = INFINITY; expect_invalid(p, "temperature");
  p = ok; p.temperature = std::nanf(""); expect_invalid(p, "temperature");
  p = ok; p.top_k = -1; expect_invalid(p, "top-k");
  p = ok; p.min_p = -0.1f; expect_invalid(p, "min-p");
  p = ok; p.min_p = 1.5f; expect_invalid(p, "min-p");
  p = ok; p.repeat_penalty = 0.0f; expect_invalid(p, "repeat-penalty");
  p = ok; p.repeat_penalty = -1.0f; expect_invalid(p, "repeat-penalty");
  p = ok; p.repeat_last_n = -1; expect_invalid(p, "repeat-last-n");
  // Edges that are allowed.
  p = ok; p.top_p = 1.0f; p.min_p = 0.0f; p.temperature = 0.0f; p.top_k = 0;
  EXPECT_NO_THROW(validate(p));
  p.min_p = 1.0f;
  EXPECT_NO_THROW(validate(p));
}

}  // namespace
}  // namespace larql
