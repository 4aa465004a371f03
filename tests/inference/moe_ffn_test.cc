// route_experts: the router's choice and weights on hand-derived cases (softmax by hand; the
// top-k and renormalisation as transformers' MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock and
// llama.cpp's build_moe_ffn describe them). The whole MoE layer is checked against llama.cpp and
// transformers in tests/python/test_families_gguf.py and test_family_fixtures.py.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "inference/ffn.h"

namespace larql {
namespace {

TEST(RouteExperts, TopKOfTheSoftmaxRenormalised) {
  const float logits[4] = {1.0f, 3.0f, 2.0f, 0.0f};
  float probs[4], w[2];
  int32_t chosen[2];
  route_experts(logits, 4, 2, /*renormalise=*/true, probs, chosen, w);
  const double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(0.0);
  EXPECT_NEAR(probs[1], std::exp(3.0) / z, 1e-6);
  EXPECT_EQ(chosen[0], 1);
  EXPECT_EQ(chosen[1], 2);
  // Renormalised: e^3 / (e^3 + e^2) and e^2 / (e^3 + e^2).
  EXPECT_NEAR(w[0], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
  EXPECT_NEAR(w[1], std::exp(2.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
}

TEST(RouteExperts, ProbabilitiesAsTheyAreWithoutRenormalisation) {
  const float logits[4] = {1.0f, 3.0f, 2.0f, 0.0f};
  float probs[4], w[2];
  int32_t chosen[2];
  route_experts(logits, 4, 2, /*renormalise=*/false, probs, chosen, w);
  const double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(0.0);
  EXPECT_NEAR(w[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(w[1], std::exp(2.0) / z, 1e-6);
}

TEST(RouteExperts, TiesGoToTheLowerExpertAndKCanBeAll) {
  const float logits[3] = {0.5f, 0.5f, 0.5f};
  float probs[3], w[3];
  int32_t chosen[3];
  route_experts(logits, 3, 1, true, probs, chosen, w);
  EXPECT_EQ(chosen[0], 0);
  EXPECT_FLOAT_EQ(w[0], 1.0f);
  route_experts(logits, 3, 3, false, probs, chosen, w);
  EXPECT_EQ(std::vector<int32_t>(chosen, chosen + 3), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0f, 1e-6);
}

}  // namespace
}  // namespace larql
