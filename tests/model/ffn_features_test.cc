// FFN feature numbering (model/ffn_features.h, docs/vindex-format.md "Experts"): hand-derived on
// small configs, and on the committed Qwen2-MoE fixture (4 experts of 32, a shared expert of 64,
// f32; tests/model/data/families/) that a feature's gate / up row and down column are the expert
// matrices' own, and that OverlaySource writes exactly those and nothing else. The model_config
// JSON keeps the mixture's fields.
#include "model/ffn_features.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/config_json.h"
#include "model/gguf_source.h"
#include "model/model.h"
#include "model/overlay_source.h"
#include "quant/quant.h"
#include "testlib/paths.h"
#include "util/error.h"

namespace larql {
namespace {

ModelConfig moe_config(int64_t experts, int64_t width, int64_t shared) {
  ModelConfig c;
  c.hidden = 8;
  c.ffn = 99;  // not used by a mixture's numbering
  c.n_experts = experts;
  c.n_experts_used = 2;
  c.expert_ffn = width;
  c.shared_expert_ffn = shared;
  return c;
}

TEST(FfnFeatures, DenseNumberingIsTheRow) {
  ModelConfig c;
  c.hidden = 8;
  c.ffn = 10;
  EXPECT_EQ(ffn_feature_count(c), 10);
  const FfnFeatureRef r = ffn_feature_ref(c, 7);
  EXPECT_EQ(r.expert, -1);
  EXPECT_EQ(r.gate, TensorRole::FfnGate);
  EXPECT_EQ(r.down, TensorRole::FfnDown);
  EXPECT_EQ(r.gate_row, 7);
  EXPECT_EQ(r.down_row0, 0);
  EXPECT_EQ(r.down_col, 7);
  EXPECT_EQ(ffn_feature_expert_label(r.expert), "");
  EXPECT_THROW(ffn_feature_ref(c, 10), Error);
  EXPECT_THROW(ffn_feature_ref(c, -1), Error);
}

TEST(FfnFeatures, ExpertsThenTheSharedExpert) {
  const ModelConfig c = moe_config(4, 3, 5);  // features 0-11 routed (3 per expert), 12-16 shared
  EXPECT_EQ(ffn_feature_count(c), 17);
  // Feature 7 = expert 2, index 1: row 7 of the stacked gate, column 1 of rows [16, 24) of the
  // stacked down ([4 x hidden 8, width 3]).
  FfnFeatureRef r = ffn_feature_ref(c, 7);
  EXPECT_EQ(r.expert, 2);
  EXPECT_EQ(r.index, 1);
  EXPECT_EQ(r.gate, TensorRole::FfnGateExps);
  EXPECT_EQ(r.up, TensorRole::FfnUpExps);
  EXPECT_EQ(r.down, TensorRole::FfnDownExps);
  EXPECT_EQ(r.gate_row, 7);
  EXPECT_EQ(r.down_row0, 16);
  EXPECT_EQ(r.down_col, 1);
  EXPECT_EQ(ffn_feature_expert_label(r.expert), "E2");
  r = ffn_feature_ref(c, 13);
  EXPECT_EQ(r.expert, FfnFeatureRef::kSharedExpert);
  EXPECT_EQ(r.index, 1);
  EXPECT_EQ(r.gate, TensorRole::FfnGateShexp);
  EXPECT_EQ(r.down, TensorRole::FfnDownShexp);
  EXPECT_EQ(r.gate_row, 1);
  EXPECT_EQ(r.down_row0, 0);
  EXPECT_EQ(r.down_col, 1);
  EXPECT_EQ(ffn_feature_expert_label(r.expert), "shared");
  EXPECT_THROW(ffn_feature_ref(c, 17), Error);
  EXPECT_EQ(ffn_feature_count(moe_config(8, 4, 0)), 32);
}

TEST(FfnFeatures, ConfigJsonKeepsTheMixture) {
  ModelConfig c = moe_config(4, 32, 64);
  c.arch = "qwen2moe";
  c.n_layers = 1;
  c.n_heads = c.n_kv_heads = 1;
  c.head_dim = 8;
  c.vocab = 10;
  c.context_length = 16;
  c.expert_weights_norm = true;
  c.layers.resize(1);
  const ModelConfig back = config_from_json(config_to_json(c), "test");
  EXPECT_EQ(back.n_experts, 4);
  EXPECT_EQ(back.n_experts_used, 2);
  EXPECT_EQ(back.expert_ffn, 32);
  EXPECT_EQ(back.shared_expert_ffn, 64);
  EXPECT_TRUE(back.expert_weights_norm);
  c.n_experts_used = 5;  // top-k above the experts
  try {
    config_from_json(config_to_json(c), "test");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model_config.moe.n_experts_used = 5 is more than model_config.moe.n_experts = 4"),
              std::string::npos)
        << e.what();
  }
}

class MoeFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::source_dir() + "/tests/model/data/families/qwen2_moe/qwen2_moe-f32.gguf";
    source_ = GgufSource::open(path);
    model_ = Model::load(source_);
    c_ = model_->config();
    ASSERT_EQ(c_.n_experts, 4);
    ASSERT_EQ(c_.expert_ffn, 32);
    ASSERT_EQ(c_.shared_expert_ffn, 64);
  }
  // Element (r, col) of a 2-D f32 view of tensor `role` at layer 1 read as [rows, cols].
  float at(const WeightSource& s, TensorRole role, int64_t r, int64_t col) const {
    const SourceTensor t = *s.tensor(role, 1);
    EXPECT_EQ(t.type, DType::F32);
    float v;
    std::memcpy(&v, t.data + (static_cast<size_t>(r) * t.dims[0] + static_cast<size_t>(col)) * 4, 4);
    return v;
  }
  std::shared_ptr<const WeightSource> source_;
  std::shared_ptr<Model> model_;
  ModelConfig c_;
};

TEST_F(MoeFixture, ViewsAreTheStackedTensorsRowsAndColumns) {
  const LayerWeights& w = model_->weights().layers[1];
  std::vector<float> row(static_cast<size_t>(c_.hidden));
  for (int64_t f : {0, 37, 127, 128, 191}) {
    const FfnFeatureRef r = ffn_feature_ref(c_, f);
    const FfnFeatureViews v = ffn_feature_views(c_, w, f);
    quant::dequantize_row(v.gate->type, v.gate->row(v.row), row.data(), c_.hidden);
    for (int64_t i = 0; i < c_.hidden; ++i) ASSERT_EQ(row[static_cast<size_t>(i)], at(*source_, r.gate, r.gate_row, i)) << f;
    for (int64_t i = 0; i < c_.hidden; ++i) {
      float d;
      quant::dequantize_row(v.down->type, v.down->row(i), row.data(), v.down->cols);
      d = row[static_cast<size_t>(v.col)];
      ASSERT_EQ(d, at(*source_, r.down, r.down_row0 + i, r.down_col)) << f;
    }
  }
}

TEST_F(MoeFixture, OverlayWritesOneExpertFeatureAndNothingElse) {
  const int64_t f = 2 * 32 + 9;  // expert 2, index 9
  std::vector<float> g(static_cast<size_t>(c_.hidden)), u(g.size()), d(g.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.5f + i, u[i] = -1.0f - i, d[i] = 0.25f * i;
  OverlaySource ov(source_);
  const FeatureEditReport rep = ov.set_ffn_feature(1, f, g.data(), u.data(), d.data());
  EXPECT_EQ(rep.changed_columns, (std::set<int64_t>{f}));  // f32: one value per block
  const int64_t H = c_.hidden;
  for (TensorRole role : {TensorRole::FfnGateExps, TensorRole::FfnUpExps})
    for (int64_t r = 0; r < 4 * 32; ++r)
      for (int64_t i = 0; i < H; ++i) {
        const float want = r == f ? (role == TensorRole::FfnGateExps ? g : u)[static_cast<size_t>(i)] : at(*source_, role, r, i);
        ASSERT_EQ(at(ov, role, r, i), want) << r << "," << i;
      }
  for (int64_t r = 0; r < 4 * H; ++r)  // stacked down: [4 x hidden rows, 32 columns]
    for (int64_t col = 0; col < 32; ++col) {
      const float want = (r / H == 2 && col == 9) ? d[static_cast<size_t>(r % H)] : at(*source_, TensorRole::FfnDownExps, r, col);
      ASSERT_EQ(at(ov, TensorRole::FfnDownExps, r, col), want) << r << "," << col;
    }
  for (TensorRole role : {TensorRole::FfnGateShexp, TensorRole::FfnDownShexp, TensorRole::FfnGateInp})
    EXPECT_EQ(ov.tensor(role, 1)->data, source_->tensor(role, 1)->data);  // untouched: still the base's bytes
  std::vector<float> g2, u2, d2;
  ov.ffn_feature(1, f, &g2, &u2, &d2);
  EXPECT_EQ(g2, g);
  EXPECT_EQ(u2, u);
  EXPECT_EQ(d2, d);
  // The shared expert's feature 3 (= 128 + 3): its own rows and column.
  ov.set_ffn_feature(1, 131, g.data(), nullptr, d.data());
  for (int64_t i = 0; i < H; ++i) {
    EXPECT_EQ(at(ov, TensorRole::FfnGateShexp, 3, i), g[static_cast<size_t>(i)]);
    EXPECT_EQ(at(ov, TensorRole::FfnDownShexp, i, 3), d[static_cast<size_t>(i)]);
    EXPECT_EQ(at(ov, TensorRole::FfnDownShexp, i, 2), at(*source_, TensorRole::FfnDownShexp, i, 2));
  }
  EXPECT_THROW(ov.set_ffn_feature(1, 192, g.data(), nullptr, nullptr), Error);
}

}  // namespace
}  // namespace larql
