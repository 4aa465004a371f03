// OverlaySource: feature edits land where the layout says (gate / up rows, down columns), touch
// nothing else, are copy-on-write, and leave the base's bytes as they were; the Q6_K column edit
// stays inside its 16-value sub-block. Expected values: the stored layouts (ggml's block structs)
// and the quantisation step of each format, not the code under test.
#include "model/overlay_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "model/gguf_source.h"
#include "quant/quant.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"

namespace larql {
namespace {

using testing::make_synthetic_model;
using testing::SyntheticSpec;

std::vector<float> rows_of(const SourceTensor& t, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const size_t rb = *row_bytes(t.type, static_cast<uint64_t>(cols));
  for (int64_t r = 0; r < rows; ++r) quant::dequantize_row(t.type, t.data + r * rb, out.data() + r * cols, cols);
  return out;
}

TEST(OverlaySource, FeatureEditTouchesOnlyItsRowsAndColumnQ8) {
  SyntheticSpec spec;
  spec.matrix_type = DType::Q8_0;
  auto sm = make_synthetic_model(spec);
  auto base = GgufSource::open(sm->path);
  const int64_t H = spec.hidden, F = spec.ffn, L = 2, f = 37;
  const auto gate0 = rows_of(*base->tensor(TensorRole::FfnGate, L), F, H);
  const auto down0 = rows_of(*base->tensor(TensorRole::FfnDown, L), H, F);
  const auto base_bytes = std::vector<uint8_t>(base->tensor(TensorRole::FfnDown, L)->data,
                                               base->tensor(TensorRole::FfnDown, L)->data + base->tensor(TensorRole::FfnDown, L)->nbytes);
  std::vector<float> g(H), d(H);
  for (int64_t i = 0; i < H; ++i) g[i] = std::sin(0.3f * i), d[i] = 0.05f * std::cos(0.7f * i);
  OverlaySource ov(base);
  EXPECT_EQ(ov.fingerprint(), base->fingerprint());
  const auto rep = ov.set_ffn_feature(L, f, g.data(), nullptr, d.data());
  EXPECT_NE(ov.fingerprint(), base->fingerprint());
  const auto gate1 = rows_of(*ov.tensor(TensorRole::FfnGate, L), F, H);
  const auto down1 = rows_of(*ov.tensor(TensorRole::FfnDown, L), H, F);
  // Gate: row f is the new vector within Q8_0's step (block max / 127); every other row as before.
  for (int64_t r = 0; r < F; ++r)
    for (int64_t i = 0; i < H; ++i) {
      if (r == f) EXPECT_NEAR(gate1[r * H + i], g[i], 1.0 / 127 + 1e-6) << i;
      else ASSERT_EQ(gate1[r * H + i], gate0[r * H + i]) << r << "," << i;
    }
  // Down: column f is the new vector; columns outside f's 32-block are untouched.
  for (int64_t r = 0; r < H; ++r)
    for (int64_t c = 0; c < F; ++c) {
      if (c == f) EXPECT_NEAR(down1[r * F + c], d[r], 0.2 / 127) << r;
      else if (c / 32 != f / 32) ASSERT_EQ(down1[r * F + c], down0[r * F + c]) << r << "," << c;
    }
  EXPECT_TRUE(rep.changed_columns.count(f));
  for (int64_t c : rep.changed_columns) EXPECT_EQ(c / 32, f / 32);
  // The up matrix (not given) and the other layers are the base's own bytes.
  EXPECT_EQ(ov.tensor(TensorRole::FfnUp, L)->data, base->tensor(TensorRole::FfnUp, L)->data);
  EXPECT_EQ(ov.tensor(TensorRole::FfnGate, L + 1)->data, base->tensor(TensorRole::FfnGate, L + 1)->data);
  // The base is untouched.
  const auto* now = base->tensor(TensorRole::FfnDown, L)->data;
  EXPECT_EQ(std::memcmp(now, base_bytes.data(), base_bytes.size()), 0);
  // Copy-on-write: editing a copy leaves the original's bytes.
  const auto before = rows_of(*ov.tensor(TensorRole::FfnGate, L), F, H);
  OverlaySource copy(ov);
  copy.set_ffn_feature(L, f, d.data(), nullptr, nullptr);
  EXPECT_EQ(rows_of(*ov.tensor(TensorRole::FfnGate, L), F, H), before);
  EXPECT_NE(rows_of(*copy.tensor(TensorRole::FfnGate, L), F, H), before);
  // Reading back the feature gives what was stored.
  std::vector<float> rg, rd;
  ov.ffn_feature(L, f, &rg, nullptr, &rd);
  for (int64_t i = 0; i < H; ++i) {
    EXPECT_EQ(rg[i], gate1[f * H + i]);
    EXPECT_EQ(rd[i], down1[i * F + f]);
  }
  EXPECT_THROW(ov.set_ffn_feature(L, F, g.data(), nullptr, nullptr), Error);
  EXPECT_THROW(ov.set_ffn_feature(spec.n_layers, 0, g.data(), nullptr, nullptr), Error);
  EXPECT_THROW(ov.replace(TensorRole::FfnUp, L, std::vector<uint8_t>(3)), Error);
}

// A source of one layer: gate/up F32 [ffn, hidden], down Q6_K [hidden, ffn = 256].
class Q6Source final : public WeightSource {
 public:
  Q6Source() {
    cfg_.n_layers = 1;
    cfg_.hidden = 8;
    cfg_.ffn = 256;
    std::mt19937 rng(7);
    std::normal_distribution<float> n(0, 1);
    std::vector<float> v(256);
    down_.resize(8 * 210);
    for (int r = 0; r < 8; ++r) {
      for (auto& x : v) x = n(rng);
      quant::quantize_row(DType::Q6_K, v.data(), down_.data() + r * 210, 256);
    }
    gate_.assign(256 * 8 * 4, 0);
  }
  const std::string& path() const override { return path_; }
  std::string format() const override { return "test"; }
  const ModelConfig& config() const override { return cfg_; }
  std::optional<SourceTensor> tensor(TensorRole role, int64_t layer) const override {
    SourceTensor t;
    t.name = tensor_name(role, layer);
    if (role == TensorRole::FfnDown) {
      t.type = DType::Q6_K;
      t.dims = {256, 8};
      t.data = down_.data();
      t.nbytes = down_.size();
      return t;
    }
    if (role == TensorRole::FfnGate || role == TensorRole::FfnUp) {
      t.type = DType::F32;
      t.dims = {8, 256};
      t.data = gate_.data();
      t.nbytes = gate_.size();
      return t;
    }
    return std::nullopt;
  }
  std::string tensor_name(TensorRole role, int64_t layer) const override {
    return "t" + std::to_string(static_cast<int>(role)) + "." + std::to_string(layer);
  }
  std::vector<SourceTensor> tensors() const override { return {}; }
  VocabData vocabulary() const override { return {}; }
  const SpecialTokens& special_tokens() const override { return sp_; }
  std::vector<MetadataEntry> metadata() const override { return {}; }
  uint64_t byte_size() const override { return 0; }
  const std::string& fingerprint() const override { return path_; }

 private:
  std::string path_ = "q6";
  ModelConfig cfg_;
  SpecialTokens sp_;
  std::vector<uint8_t> down_, gate_;
};

TEST(OverlaySource, Q6KColumnEditStaysInItsSubBlock) {
  auto base = std::make_shared<Q6Source>();
  const auto before = rows_of(*base->tensor(TensorRole::FfnDown, 0), 8, 256);
  OverlaySource ov(base);
  const int64_t f = 77;  // sub-block [64, 80)
  std::vector<float> d(8);
  for (int r = 0; r < 8; ++r) d[r] = 0.1f * (r - 4);  // inside every row's range
  const auto rep = ov.set_ffn_feature(0, f, nullptr, nullptr, d.data());
  EXPECT_EQ(rep.clamped, 0);
  const auto after = rows_of(*ov.tensor(TensorRole::FfnDown, 0), 8, 256);
  for (int r = 0; r < 8; ++r) {
    float amax = 0;
    for (int c = 64; c < 80; ++c) amax = std::max(amax, std::fabs(before[r * 256 + c]));
    for (int c = 0; c < 256; ++c) {
      if (c == f) EXPECT_NEAR(after[r * 256 + c], d[r], amax / 32.0f + 1e-6f) << r;  // one 6-bit step of the sub-block
      else if (c < 64 || c >= 80) ASSERT_EQ(after[r * 256 + c], before[r * 256 + c]) << r << "," << c;
    }
  }
  for (int64_t c : rep.changed_columns) EXPECT_TRUE(c >= 64 && c < 80) << c;
  // Far beyond the block's range: clamped, and reported.
  std::vector<float> big(8, 1e6f);
  EXPECT_GT(ov.set_ffn_feature(0, f, nullptr, nullptr, big.data()).clamped, 0);
}

}  // namespace
}  // namespace larql
