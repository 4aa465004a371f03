// The layer as stages (Forward::attn_block, ffn_block, norm), the FFN behind an interface chosen
// per layer (Forward::set_ffn) and layer observers, on the synthetic Gemma 3 model. Expected
// values: the naive double-precision reference (tests/testlib/reference_gemma3.h) with the same
// FFN patch, and a plain run rebuilt layer by layer from the public primitives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include "compute/ops.h"
#include "inference/ffn.h"
#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "model/model.h"
#include "testlib/reference_gemma3.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"

namespace larql {
namespace {

using testing::make_synthetic_model;
using testing::ReferenceGemma3;
using testing::RefOptions;

const std::vector<int32_t> kTokens = {2, 270, 277, 7, 100, 271, 5, 4, 262, 200, 150, 265};

std::vector<float> logits_of(Forward& f, const std::vector<int32_t>& toks) {
  const auto& c = f.config();
  KvCache cache(c);
  std::vector<float> x(toks.size() * c.hidden), lg(toks.size() * c.vocab);
  f.forward(toks.data(), static_cast<int64_t>(toks.size()), cache, x.data());
  f.logits(x.data(), static_cast<int64_t>(toks.size()), lg.data());
  return lg;
}

double max_rel_diff(const std::vector<float>& got, const std::vector<std::vector<double>>& ref) {
  double d = 0, s = 0;
  const size_t vocab = ref[0].size();
  for (size_t t = 0; t < ref.size(); ++t)
    for (size_t v = 0; v < vocab; ++v) {
      d = std::max(d, std::abs(got[t * vocab + v] - ref[t][v]));
      s = std::max(s, std::abs(ref[t][v]));
    }
  return d / std::max(1.0, s);
}

// An FFN that scales the dense one and adds a fixed vector.
class PatchedFfn final : public Ffn {
 public:
  PatchedFfn(float scale, std::vector<float> add) : scale_(scale), add_(std::move(add)) {}
  void run(Forward& f, int64_t layer, const float* h, int64_t n, float* out) override {
    DenseFfn().run(f, layer, h, n, out);
    const int64_t H = f.config().hidden;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < H; ++i) out[t * H + i] = scale_ * out[t * H + i] + (add_.empty() ? 0.0f : add_[i]);
    ++calls;
  }
  int calls = 0;

 private:
  float scale_;
  std::vector<float> add_;
};

TEST(ForwardStages, ZeroFfnAtOneLayerMatchesTheReferenceWithoutThatFfn) {
  auto sm = make_synthetic_model();
  auto model = Model::load(sm->path);
  Forward f(model, 2);
  const auto plain = logits_of(f, kTokens);
  auto zero = std::make_shared<PatchedFfn>(0.0f, std::vector<float>{});
  f.set_ffn(3, zero);
  const auto patched = logits_of(f, kTokens);
  EXPECT_EQ(zero->calls, 1);  // one chunk, one call at layer 3
  RefOptions o;
  o.ffn_patch_layer = 3;
  o.ffn_scale = 0.0;
  const auto ref = ReferenceGemma3(*sm, o).logits(kTokens);
  EXPECT_LE(max_rel_diff(patched, ref), 1e-3);
  // ... and the patch matters: the plain run is far from that reference.
  EXPECT_GT(max_rel_diff(plain, ref), 1e-2);
  // Back to dense: the plain logits again, bit for bit.
  f.set_ffn(3, nullptr);
  EXPECT_EQ(logits_of(f, kTokens), plain);
}

TEST(ForwardStages, AddedVectorAtOneLayerMatchesTheReference) {
  auto sm = make_synthetic_model();
  auto model = Model::load(sm->path);
  Forward f(model, 1);
  std::vector<float> add(64);
  std::vector<double> add_d(64);
  for (int i = 0; i < 64; ++i) add_d[i] = add[i] = 0.05f * static_cast<float>((i * 7) % 11 - 5);
  f.set_ffn(5, std::make_shared<PatchedFfn>(1.0f, add));
  const auto got = logits_of(f, kTokens);
  RefOptions o;
  o.ffn_patch_layer = 5;
  o.ffn_add = add_d;
  EXPECT_LE(max_rel_diff(got, ReferenceGemma3(*sm, o).logits(kTokens)), 1e-3);
  RefOptions wrong_layer = o;
  wrong_layer.ffn_patch_layer = 4;
  EXPECT_GT(max_rel_diff(got, ReferenceGemma3(*sm, wrong_layer).logits(kTokens)), 1e-3);
}

TEST(ForwardStages, SetFfnRejectsALayerOutOfRange) {
  auto sm = make_synthetic_model();
  Forward f(Model::load(sm->path), 1);
  for (int64_t bad : {int64_t{-1}, int64_t{7}}) {
    try {
      f.set_ffn(bad, std::make_shared<DenseFfn>());
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    }
  }
}

// Records every reported row, keyed by (layer, position).
class Recorder final : public LayerObserver {
 public:
  explicit Recorder(std::vector<int64_t> only = {}) : only_(std::move(only)) {}
  bool wants(int64_t pos) const override {
    return only_.empty() || std::find(only_.begin(), only_.end(), pos) != only_.end();
  }
  void on_layer(const LayerTrace& t) override {
    auto row = [&](const float* p) { return std::vector<float>(p, p + t.hidden); };
    Rows& r = rows[{t.layer, t.pos}];
    r = {row(t.residual_in), row(t.attn_out), row(t.ffn_in), row(t.ffn_out), row(t.residual_out)};
  }
  struct Rows {
    std::vector<float> in, attn_out, ffn_in, ffn_out, out;
  };
  std::map<std::pair<int64_t, int64_t>, Rows> rows;

 private:
  std::vector<int64_t> only_;
};

// A plain run rebuilt from the public primitives, keeping every layer's stages per position.
std::map<std::pair<int64_t, int64_t>, Recorder::Rows> by_hand(Forward& f, const std::vector<int32_t>& toks) {
  const ModelConfig& c = f.config();
  const int64_t n = static_cast<int64_t>(toks.size()), H = c.hidden;
  KvCache cache(c);
  std::vector<float> x(n * H), q(n * c.q_dim()), k(n * c.kv_dim()), v(n * c.kv_dim()), attn(n * c.q_dim());
  std::vector<float> before, mid, h(n * H), ffn(n * H);
  f.embed(toks.data(), n, x.data());
  std::map<std::pair<int64_t, int64_t>, Recorder::Rows> out;
  for (int64_t li = 0; li < c.n_layers; ++li) {
    LayerKv& kv = cache.layer(li);
    before = x;
    f.qkv(li, x.data(), n, 0, q.data(), k.data(), v.data());
    kv.append(k.data(), v.data(), n);
    f.attend(li, q.data(), n, 0, span_of(kv), attn.data(), mask_of(kv));
    kv.evict();
    f.attn_block(li, attn.data(), n, x.data());
    mid = x;
    f.norm(NormSite::Ffn, li, x.data(), n, h.data());
    f.ffn(li).run(f, li, h.data(), n, ffn.data());
    f.norm(NormSite::PostFfn, li, ffn.data(), n, ffn.data());
    for (int64_t i = 0; i < n * H; ++i) x[i] += ffn[i];
    for (int64_t t = 0; t < n; ++t) {
      auto row = [&](const std::vector<float>& b) { return std::vector<float>(b.begin() + t * H, b.begin() + (t + 1) * H); };
      // attn_out holds the residual between the blocks here; compared as in + attn_out.
      out[{li, t}] = {row(before), row(mid), row(h), row(ffn), row(x)};
    }
  }
  return out;
}

TEST(ForwardStages, ObserverSeesEveryLayerOfAPlainRunBitForBit) {
  auto sm = make_synthetic_model();
  auto model = Model::load(sm->path);
  Forward f(model, 2);
  const auto plain = logits_of(f, kTokens);
  const auto expect = by_hand(f, kTokens);
  Recorder rec;
  f.set_observer(&rec);
  const auto observed = logits_of(f, kTokens);
  f.set_observer(nullptr);
  EXPECT_EQ(observed, plain);  // observing changes nothing
  const ModelConfig& c = f.config();
  ASSERT_EQ(rec.rows.size(), static_cast<size_t>(c.n_layers) * kTokens.size());
  for (const auto& [key, want] : expect) {
    SCOPED_TRACE(::testing::Message() << "layer " << key.first << " pos " << key.second);
    const Recorder::Rows& got = rec.rows.at(key);
    EXPECT_EQ(got.in, want.in);
    EXPECT_EQ(got.ffn_in, want.ffn_in);
    EXPECT_EQ(got.ffn_out, want.ffn_out);
    EXPECT_EQ(got.out, want.out);
    std::vector<float> mid(got.in.size());
    for (size_t i = 0; i < mid.size(); ++i) mid[i] = got.in[i] + got.attn_out[i];
    EXPECT_EQ(mid, want.attn_out);
  }
  // The last layer's output is what forward() returns.
  KvCache cache(c);
  std::vector<float> x(kTokens.size() * c.hidden);
  f.forward(kTokens.data(), static_cast<int64_t>(kTokens.size()), cache, x.data());
  for (size_t t = 0; t < kTokens.size(); ++t)
    EXPECT_EQ(rec.rows.at({c.n_layers - 1, static_cast<int64_t>(t)}).out,
              std::vector<float>(x.begin() + t * c.hidden, x.begin() + (t + 1) * c.hidden));
}

TEST(ForwardStages, ObserverGetsOnlyItsPositionsInPrefillAndDecode) {
  auto sm = make_synthetic_model();
  auto model = Model::load(sm->path);
  Forward f(model, 2);
  const ModelConfig& c = f.config();
  Recorder rec({3, 10});
  f.set_observer(&rec);
  KvCache cache(c);
  std::vector<float> x(kTokens.size() * c.hidden);
  f.forward(kTokens.data(), 8, cache, x.data());  // positions 0..7
  for (int64_t p = 8; p < 12; ++p) f.forward(&kTokens[static_cast<size_t>(p)], 1, cache, x.data());
  EXPECT_EQ(rec.rows.size(), 2u * static_cast<size_t>(c.n_layers));
  for (int64_t li = 0; li < c.n_layers; ++li) {
    EXPECT_TRUE(rec.rows.count({li, 3})) << li;
    EXPECT_TRUE(rec.rows.count({li, 10})) << li;
  }
}

}  // namespace
}  // namespace larql
