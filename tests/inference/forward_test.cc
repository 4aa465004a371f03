// Forward::forward + Forward::logits on a synthetic Gemma 3 model against an independent naive
// double-precision reference (tests/testlib/reference_gemma3.h), for a sequence longer than the
// sliding window; and token-at-a-time decode against one batched pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "model/model.h"
#include "testlib/paths.h"
#include "testlib/reference_gemma3.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"

namespace larql {
namespace {

using testing::make_synthetic_model;
using testing::ReferenceGemma3;
using testing::SyntheticSpec;

const std::vector<int32_t> kTokens = {2, 270, 277, 7, 100, 271, 5, 4, 262, 200, 150, 265};  // 12 > window 4

std::vector<float> run_all(Forward& f, const std::vector<int32_t>& toks) {
  const auto& c = f.config();
  KvCache cache(c);
  std::vector<float> x(toks.size() * c.hidden), lg(toks.size() * c.vocab);
  f.forward(toks.data(), static_cast<int64_t>(toks.size()), cache, x.data());
  f.logits(x.data(), static_cast<int64_t>(toks.size()), lg.data());
  return lg;
}

double max_abs_diff(const std::vector<float>& got, const std::vector<std::vector<double>>& ref, int64_t vocab,
                    double* ref_scale) {
  double d = 0, s = 0;
  for (size_t t = 0; t < ref.size(); ++t)
    for (int64_t v = 0; v < vocab; ++v) {
      d = std::max(d, std::abs(got[t * vocab + v] - ref[t][v]));
      s = std::max(s, std::abs(ref[t][v]));
    }
  if (ref_scale) *ref_scale = s;
  return d;
}

TEST(Forward, ConfigOfTheSyntheticModel) {
  auto sm = make_synthetic_model();
  auto model = Model::load(sm->path);
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.n_layers, 7);
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.vocab, sm->vocab);
  EXPECT_EQ(c.q_dim(), 64);
  EXPECT_EQ(c.kv_dim(), 16);
  EXPECT_NEAR(c.attn_scale, 0.25f, 1e-7);
  EXPECT_NEAR(c.embed_scale, 8.0f, 1e-6);
  EXPECT_TRUE(c.tied_embeddings);
  for (int64_t l = 0; l < 7; ++l) {
    EXPECT_EQ(c.layers[l].sliding, l != 5) << l;
    EXPECT_EQ(c.layers[l].window, l != 5 ? 4 : 0) << l;
    EXPECT_EQ(c.layers[l].rope_base, l != 5 ? 10000.0 : 1e6) << l;
  }
}

TEST(Forward, MatchesNaiveReferenceF32) {
  auto sm = make_synthetic_model();
  auto model = Model::load(sm->path);
  for (int threads : {1, 2}) {
    Forward f(model, threads);
    const auto lg = run_all(f, kTokens);
    const auto ref = ReferenceGemma3(*sm).logits(kTokens);
    double scale = 0;
    const double diff = max_abs_diff(lg, ref, sm->vocab, &scale);
    EXPECT_GT(scale, 1.0);  // the logits are not trivially small
    EXPECT_LE(diff, 1e-3 * std::max(1.0, scale)) << "threads=" << threads << " max |ref| " << scale;
  }
}

// The comparison above can fail: a reference that ignores the sliding window disagrees.
TEST(Forward, ReferenceWithoutSlidingWindowDisagrees) {
  auto sm = make_synthetic_model();
  auto model = Model::load(sm->path);
  Forward f(model, 1);
  const auto lg = run_all(f, kTokens);
  testing::RefOptions o;
  o.honour_sliding_window = false;
  const auto ref = ReferenceGemma3(*sm, o).logits(kTokens);
  double scale = 0;
  EXPECT_GT(max_abs_diff(lg, ref, sm->vocab, &scale), 1e-2 * std::max(1.0, scale));
  // ... but only from position `window` on: the first 4 positions see no more than 4 tokens.
  const std::vector<std::vector<double>> head(ref.begin(), ref.begin() + 4);
  EXPECT_LE(max_abs_diff(lg, head, sm->vocab, &scale), 1e-3 * std::max(1.0, scale));
}

TEST(Forward, MatchesNaiveReferenceWithGroupedHeadsAndOtherShape) {
  SyntheticSpec s;
  s.n_layers = 3;  // no global layer
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.head_dim = 8;
  s.sliding_window = 3;
  s.seed = 7;
  auto sm = make_synthetic_model(s);
  auto model = Model::load(sm->path);
  Forward f(model, 2);
  const auto lg = run_all(f, kTokens);
  const auto ref = ReferenceGemma3(*sm).logits(kTokens);
  double scale = 0;
  EXPECT_LE(max_abs_diff(lg, ref, sm->vocab, &scale), 1e-3 * std::max(1.0, scale));
}

TEST(Forward, Q8_0WeightsStayCloseToTheF32Reference) {
  SyntheticSpec s;
  s.matrix_type = DType::Q8_0;
  auto sm = make_synthetic_model(s);
  auto model = Model::load(sm->path);
  Forward f(model, 2);
  const auto lg = run_all(f, kTokens);
  const auto ref = ReferenceGemma3(*sm).logits(kTokens);
  double scale = 0;
  const double diff = max_abs_diff(lg, ref, sm->vocab, &scale);
  // Loose: weights and activations are 8-bit; a wrong kernel would be off by O(scale).
  EXPECT_LE(diff, 0.1 * scale);
  // Top-1 mostly agrees.
  int agree = 0;
  for (size_t t = 0; t < kTokens.size(); ++t) {
    const auto& r = ref[t];
    const int64_t rb = std::max_element(r.begin(), r.end()) - r.begin();
    const int64_t gb = std::max_element(lg.begin() + t * sm->vocab, lg.begin() + (t + 1) * sm->vocab) -
                       (lg.begin() + t * sm->vocab);
    agree += rb == gb;
  }
  EXPECT_GE(agree, 9);
}

TEST(Forward, DecodeOneAtATimeEqualsBatched) {
  auto sm = make_synthetic_model();
  auto model = Model::load(sm->path);
  Forward f(model, 2);
  const auto& c = f.config();
  const auto all = run_all(f, kTokens);
  KvCache cache(c);
  std::vector<float> x(c.hidden), lg(c.vocab);
  double diff = 0;
  for (size_t t = 0; t < kTokens.size(); ++t) {
    EXPECT_EQ(cache.n_past(), static_cast<int64_t>(t));
    f.forward(&kTokens[t], 1, cache, x.data());
    f.logits(x.data(), 1, lg.data());
    for (int64_t v = 0; v < c.vocab; ++v) diff = std::max(diff, double(std::abs(lg[v] - all[t * c.vocab + v])));
  }
  EXPECT_LE(diff, 1e-4);
  // Sliding layers keep at most their window, the global layer keeps everything.
  for (int64_t l = 0; l < c.n_layers; ++l) {
    EXPECT_EQ(cache.layer(l).rows(), l == 5 ? 12 : 4) << l;
    EXPECT_EQ(cache.layer(l).end_pos(), 12);
  }
}

TEST(Forward, MixedChunksEqualBatched) {
  auto sm = make_synthetic_model();
  auto model = Model::load(sm->path);
  Forward f(model, 2);
  const auto& c = f.config();
  const auto all = run_all(f, kTokens);
  KvCache cache(c);
  std::vector<float> x(kTokens.size() * c.hidden), lg(kTokens.size() * c.vocab);
  // 5 tokens, then 1, then 6.
  size_t off = 0;
  double diff = 0;
  for (size_t n : {5u, 1u, 6u}) {
    f.forward(&kTokens[off], static_cast<int64_t>(n), cache, x.data());
    f.logits(x.data(), static_cast<int64_t>(n), lg.data());
    for (size_t t = 0; t < n; ++t)
      for (int64_t v = 0; v < c.vocab; ++v)
        diff = std::max(diff, double(std::abs(lg[t * c.vocab + v] - all[(off + t) * c.vocab + v])));
    off += n;
  }
  EXPECT_LE(diff, 1e-4);
}

// Logits of every position of `toks`, fed in chunks of the given sizes (a chunk of 1 is decode).
std::vector<float> run_chunked(Forward& f, const std::vector<int32_t>& toks, const std::vector<size_t>& chunks) {
  const auto& c = f.config();
  KvCache cache(c);
  std::vector<float> out(toks.size() * c.vocab), x(toks.size() * c.hidden);
  size_t off = 0;
  for (size_t n : chunks) {
    f.forward(&toks[off], static_cast<int64_t>(n), cache, x.data());
    f.logits(x.data(), static_cast<int64_t>(n), out.data() + off * c.vocab);
    off += n;
  }
  return out;
}

// Quantised weights go through the tiled prefill kernels in a batch and through the row kernels
// one token at a time: the logits must be identical, bit for bit, whatever the chunking and the
// thread count.
TEST(Forward, QuantisedBatchedEqualsTokenByTokenBitExact) {
  for (DType t : {DType::Q8_0, DType::Q5_0, DType::Q4_0}) {
    SyntheticSpec s;
    s.matrix_type = t;
    auto sm = make_synthetic_model(s);
    auto model = Model::load(sm->path);
    Forward f1(model, 1), f3(model, 3);
    const auto batched = run_chunked(f1, kTokens, {kTokens.size()});
    const auto one_by_one = run_chunked(f3, kTokens, std::vector<size_t>(kTokens.size(), 1));
    const auto mixed = run_chunked(f3, kTokens, {5, 1, 6});
    EXPECT_EQ(batched, one_by_one) << dtype_name(t);
    EXPECT_EQ(batched, mixed) << dtype_name(t);
  }
}

// The same on the real model (Q5_0, Q8_0, Q4_K, Q6_K weights and the Q8_0 lm_head).
TEST(Forward, RealModelBatchedEqualsTokenByTokenBitExact) {
  LARQL_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  std::vector<int32_t> toks = {2};
  for (int i = 1; i < 21; ++i) toks.push_back(1000 + 997 * i % 20000);
  Forward f2(model, 2), f1(model, 1);
  const auto batched = run_chunked(f2, toks, {toks.size()});
  const auto one_by_one = run_chunked(f1, toks, std::vector<size_t>(toks.size(), 1));
  const auto mixed = run_chunked(f1, toks, {9, 1, 4, 7});
  EXPECT_TRUE(batched == one_by_one);
  EXPECT_TRUE(batched == mixed);
}

TEST(Forward, EmbedRejectsOutOfRangeToken) {
  auto sm = make_synthetic_model();
  auto model = Model::load(sm->path);
  Forward f(model, 1);
  std::vector<float> x(64);
  for (int32_t bad : {-1, static_cast<int32_t>(sm->vocab)}) {
    try {
      f.embed(&bad, 1, x.data());
      ADD_FAILURE() << "no error for token " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    }
  }
  // embed = row * sqrt(hidden)
  const int32_t t = 270;
  f.embed(&t, 1, x.data());
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(x[i], sm->w.token_embd[270 * 64 + i] * 8.0f, 1e-5);
}

}  // namespace
}  // namespace larql
