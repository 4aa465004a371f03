// Partial models (model/model.h ModelPart) and Forward::run_layers: a part holding layers
// [a, b) run on the residual rows that enter layer a gives, bit for bit, the rows the whole model
// has leaving layer b - 1 (the reference is the whole model's own observer output); what a part
// does not hold is never read and asking for it is an error naming the part.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "inference/forward.h"
#include "model/model.h"
#include "testlib/paths.h"
#include "util/error.h"

namespace larql {
namespace {

std::string fixture(const std::string& family, const std::string& file) {
  return testing::source_dir() + "/tests/model/data/families/" + family + "/" + file;
}

/// Captures every layer's residual_in / residual_out rows.
struct Capture : LayerObserver {
  int64_t hidden = 0;
  std::vector<std::vector<float>> in, out;  // [layer] -> [n, hidden]
  void on_layer(const LayerTrace& t) override {
    const size_t li = static_cast<size_t>(t.layer);
    if (in.size() <= li) in.resize(li + 1), out.resize(li + 1);
    in[li].insert(in[li].end(), t.residual_in, t.residual_in + t.hidden);
    out[li].insert(out[li].end(), t.residual_out, t.residual_out + t.hidden);
  }
};

TEST(ModelPart, ParseRangeIsInclusiveAndStrict) {
  EXPECT_EQ(ModelPart::parse_range("0-8", "--layers"), (std::pair<int64_t, int64_t>{0, 9}));
  EXPECT_EQ(ModelPart::parse_range("5", "--layers"), (std::pair<int64_t, int64_t>{5, 6}));
  for (const char* bad : {"", "8-0", "a-b", "1-", "-3", "1-2-3", "99999999999"})
    EXPECT_THROW(ModelPart::parse_range(bad, "--layers"), Error) << bad;
}

TEST(ModelPart, ResolvedChecksTheModelsCounts) {
  ModelConfig c;
  c.n_layers = 4;
  ModelPart p;
  EXPECT_TRUE(p.resolved(c).whole(c));
  EXPECT_EQ(p.resolved(c).describe(c), "the whole model");
  p.layer_begin = 1;
  p.layer_end = 3;
  p.embedding = false;
  EXPECT_EQ(p.resolved(c).describe(c), "layers 1-2, no embedding");
  p.layer_end = 5;
  try {
    p.resolved(c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 layers"), std::string::npos) << e.what();
  }
  ModelPart ex;
  ex.expert_end = 2;
  EXPECT_THROW(ex.resolved(c), Error);  // experts on a dense model
}

TEST(ModelPart, LayerRangeRunsBitIdenticalToTheWholeModel) {
  const std::string path = fixture("llama3", "llama3-f32.gguf");
  auto whole = Model::load(path);
  const ModelConfig& c = whole->config();
  ASSERT_GE(c.n_layers, 2);
  const std::vector<int32_t> tokens = {1, 5, 9, 14, 3, 7};
  const int64_t n = static_cast<int64_t>(tokens.size()), H = c.hidden;

  Capture cap;
  Forward fw(whole, 1);
  fw.set_observer(&cap);
  KvCache kv_whole(c);
  std::vector<float> x(static_cast<size_t>(n * H));
  fw.forward(tokens.data(), n, kv_whole, x.data());

  for (int64_t li = 0; li < c.n_layers; ++li) {
    ModelPart part;
    part.layer_begin = li;
    part.layer_end = li + 1;
    part.embedding = false;
    auto m = Model::load(path, part);
    EXPECT_TRUE(m->weights().token_embd.data == nullptr);
    for (int64_t other = 0; other < c.n_layers; ++other)
      if (other != li) EXPECT_TRUE(m->weights().layers[static_cast<size_t>(other)].wq.data == nullptr);
    Forward f(m, 2);  // another thread count: the result does not depend on it
    KvCache kv(c);
    std::vector<float> rows = cap.in[static_cast<size_t>(li)];
    f.run_layers(li, li + 1, rows.data(), n, kv);
    EXPECT_EQ(0, std::memcmp(rows.data(), cap.out[static_cast<size_t>(li)].data(), rows.size() * sizeof(float)))
        << "layer " << li;
    EXPECT_EQ(kv.layer(li).end_pos(), n);
    // A decode step at position n continues the same K/V.
    std::vector<float> one(cap.in[static_cast<size_t>(li)].begin(), cap.in[static_cast<size_t>(li)].begin() + H);
    f.run_layers(li, li + 1, one.data(), 1, kv);
    EXPECT_EQ(kv.layer(li).end_pos(), n + 1);
  }
}

TEST(ModelPart, WhatThePartDoesNotHoldIsAnErrorNamingIt) {
  const std::string path = fixture("llama3", "llama3-f32.gguf");
  ModelPart part;
  part.layer_begin = 1;
  part.layer_end = 2;
  part.embedding = false;
  auto m = Model::load(path, part);
  Forward f(m, 1);
  const int32_t tok = 1;
  std::vector<float> x(static_cast<size_t>(m->config().hidden));
  KvCache kv(m->config());
  try {
    f.embed(&tok, 1, x.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("layers 1-1, no embedding"), std::string::npos) << e.what();
  }
  try {
    f.run_layers(0, 2, x.data(), 1, kv);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs layer 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.logits(x.data(), 1, x.data()), Error);

  // Without FFN weights the FFN block is refused unless another Ffn (a remote one) stands in.
  ModelPart no_ffn;
  no_ffn.ffn = false;
  auto a = Model::load(path, no_ffn);
  EXPECT_TRUE(a->weights().layers[0].w_gate.data == nullptr);
  EXPECT_FALSE(a->weights().layers[0].ffn_norm.empty());  // norms are always held
  Forward g(a, 1);
  KvCache kv2(a->config());
  std::vector<float> y(static_cast<size_t>(a->config().hidden));
  try {
    g.forward(&tok, 1, kv2, y.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs the FFN weights"), std::string::npos) << e.what();
  }
}

TEST(ModelPart, AnExpertRangeHoldsOnlyThoseExperts) {
  const std::string path = fixture("mixtral", "mixtral-f32.gguf");
  auto whole = Model::load(path);
  const ModelConfig& c = whole->config();
  ASSERT_GT(c.n_experts, 1);
  ModelPart part;
  part.expert_begin = 0;
  part.expert_end = 1;
  auto m = Model::load(path, part);
  const LayerWeights& l = m->weights().layers[0];
  EXPECT_TRUE(l.exp_gate[0].data != nullptr);
  for (int64_t e = 1; e < c.n_experts; ++e) EXPECT_TRUE(l.exp_gate[static_cast<size_t>(e)].data == nullptr);
  // Routing reaches an expert this part does not hold: an error, not a read of a null view.
  Forward f(m, 1);
  KvCache kv(c);
  std::vector<int32_t> tokens(16);
  for (int i = 0; i < 16; ++i) tokens[static_cast<size_t>(i)] = i + 1;
  std::vector<float> x(static_cast<size_t>(16 * c.hidden));
  try {
    f.forward(tokens.data(), 16, kv, x.data());
    FAIL() << "16 tokens all routed to expert 0 only";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("routes to expert"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace larql
