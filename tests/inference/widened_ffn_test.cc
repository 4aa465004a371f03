// OverlaySource::widen_ffn (MODE SUBJECT's appended features): the widened model computes the
// same logits as the base bit for bit (zero gate and up rows give an exact zero activation, zero
// blocks of down add exact zeros), the appended range columns hold +-R (R the layer's largest
// |down| value), and a feature written into an appended block changes no other value of it.
// Expected values: the definition of the widening (docs/lql.md "Knowledge edits", MODE SUBJECT), the base model's
// own logits, and Q8_0's step (block max / 127), not the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "model/gguf_source.h"
#include "model/model.h"
#include "model/overlay_source.h"
#include "quant/quant.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"

namespace larql {
namespace {

using testing::make_synthetic_model;
using testing::SyntheticSpec;

std::vector<float> mat(const SourceTensor& t) {
  const int64_t cols = static_cast<int64_t>(t.dims.at(0)), rows = static_cast<int64_t>(t.dims.at(1));
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const size_t rb = *row_bytes(t.type, static_cast<uint64_t>(cols));
  for (int64_t r = 0; r < rows; ++r) quant::dequantize_row(t.type, t.data + r * rb, out.data() + r * cols, cols);
  return out;
}

std::vector<float> last_logits(std::shared_ptr<const Model> m) {
  Forward f(std::move(m), 1);
  const ModelConfig& c = f.config();
  KvCache cache(c);
  const std::vector<int32_t> p = {2, 17, 5, 33, 8, 21};
  std::vector<float> x(p.size() * static_cast<size_t>(c.hidden)), lg(static_cast<size_t>(c.vocab));
  f.forward(p.data(), static_cast<int64_t>(p.size()), cache, x.data());
  f.logits(x.data() + (p.size() - 1) * static_cast<size_t>(c.hidden), 1, lg.data());
  return lg;
}

TEST(WidenedFfn, SameLogitsBitForBitAndRangeColumns) {
  SyntheticSpec spec;
  spec.matrix_type = DType::Q8_0;
  auto sm = make_synthetic_model(spec);
  auto base = GgufSource::open(sm->path);
  const int64_t H = spec.hidden, F = spec.ffn, L = 3;
  auto ov = std::make_shared<OverlaySource>(base);
  EXPECT_THROW(ov->widen_ffn(100), Error);
  ov->widen_ffn(kFfnAppendBlock);
  EXPECT_EQ(ov->config().ffn, F + kFfnAppendBlock);
  EXPECT_EQ(ov->appended_ffn(), kFfnAppendBlock);
  EXPECT_NE(ov->fingerprint(), base->fingerprint());
  const int64_t F2 = F + kFfnAppendBlock;
  const auto gate = mat(*ov->tensor(TensorRole::FfnGate, L));
  ASSERT_EQ(gate.size(), static_cast<size_t>(F2 * H));
  for (int64_t f = F; f < F2; ++f)
    for (int64_t i = 0; i < H; ++i) ASSERT_EQ(gate[f * H + i], 0.0f) << f;
  const auto down0 = mat(*base->tensor(TensorRole::FfnDown, L));
  float R = 0;
  for (float v : down0) R = std::max(R, std::fabs(v));
  const auto down = mat(*ov->tensor(TensorRole::FfnDown, L));
  ASSERT_EQ(down.size(), static_cast<size_t>(F2 * H));
  for (int64_t r = 0; r < H; ++r) {
    for (int64_t c = 0; c < F; ++c) ASSERT_EQ(down[r * F2 + c], down0[r * F + c]);
    for (int64_t c = F; c < F2; ++c) {
      const int64_t k = (c - F) % 16;
      const float want = k == 0 ? R : k == 1 ? -R : 0.0f;
      EXPECT_EQ(ffn_append_range_column(c, F), k < 2);
      ASSERT_NEAR(down[r * F2 + c], want, R / 127 + 1e-7f) << r << "," << c;
    }
  }
  // The forward pass: the base's logits, bit for bit.
  const auto a = last_logits(Model::load(base)), b = last_logits(Model::load(ov));
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  // A feature written into the appended block: its own column only.
  std::vector<float> g(H), d(H);
  for (int64_t i = 0; i < H; ++i) g[i] = std::sin(0.3f * i), d[i] = 0.8f * R * std::cos(0.7f * i);
  const int64_t f = F + 2;
  const auto rep = ov->set_ffn_feature(L, f, g.data(), g.data(), d.data());
  const auto down1 = mat(*ov->tensor(TensorRole::FfnDown, L));
  for (int64_t r = 0; r < H; ++r)
    for (int64_t c = 0; c < F2; ++c) {
      if (c == f) EXPECT_NEAR(down1[r * F2 + c], d[r], R / 127 + 1e-7f) << r;
      else ASSERT_EQ(down1[r * F2 + c], down[r * F2 + c]) << r << "," << c;
    }
  for (int64_t c : rep.changed_columns) EXPECT_EQ(c, f);
  // ... and it now changes the output (the widened model runs it).
  const auto e = last_logits(Model::load(ov));
  EXPECT_NE(std::memcmp(a.data(), e.data(), a.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace larql
