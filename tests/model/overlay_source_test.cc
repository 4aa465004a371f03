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
#include "util/half.h"

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

// A source of one layer: gate/up F32 [ffn, hidden], down `type` (Q6_K by default) [hidden, ffn = 256].
class Q6Source final : public WeightSource {
 public:
  explicit Q6Source(DType type = DType::Q6_K) : type_(type) {
    cfg_.n_layers = 1;
    cfg_.hidden = 8;
    cfg_.ffn = 256;
    std::mt19937 rng(7);
    std::normal_distribution<float> n(0, 1);
    std::vector<float> v(256);
    const size_t rb = *row_bytes(type_, 256);
    down_.resize(8 * rb);
    for (int r = 0; r < 8; ++r) {
      for (auto& x : v) x = n(rng);
      uint8_t* row = down_.data() + r * rb;
      if (type_ == DType::Q4_1 || type_ == DType::Q5_1) {  // no quantiser: random codes under set scales
        for (size_t i = 0; i < rb; ++i) row[i] = static_cast<uint8_t>(rng());
        for (size_t b = 0; b < rb; b += rb / 8) {  // 8 blocks of 32: d, m (f16) first
          const uint16_t dm[2] = {f32_to_f16(0.05f + 0.01f * static_cast<float>(r)), f32_to_f16(-0.4f)};
          std::memcpy(row + b, dm, sizeof dm);
        }
      } else {
        quant::quantize_row(type_, v.data(), row, 256);
      }
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
      t.type = type_;
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
  DType type_;
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

// Every block type whose element is its own code times the block's scales: a down-column value the
// scales can hold changes that element's code alone — every other value of the row keeps its bits
// (a re-quantised block would re-round all 32 or 256), and the value is within half a step of the
// one wanted (the step: the smallest gap between two values of its group of 32 before the edit).
// A value beyond the group's range still lands (the block is re-quantised).
TEST(OverlaySource, ColumnEditInsideTheScalesChangesOneCodePerRow) {
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K}) {
    SCOPED_TRACE(dtype_name(type));
    auto base = std::make_shared<Q6Source>(type);
    const auto before = rows_of(*base->tensor(TensorRole::FfnDown, 0), 8, 256);
    OverlaySource ov(base);
    const int64_t f = 173;  // group [160, 192)
    std::vector<float> d(8), step(8, INFINITY);
    for (int r = 0; r < 8; ++r) {
      float lo = INFINITY, hi = -INFINITY;
      for (int c = 160; c < 192; ++c) {
        const float v = before[r * 256 + c];
        lo = std::min(lo, v), hi = std::max(hi, v);
        for (int c2 = 160; c2 < 192; ++c2)
          if (const float g = std::fabs(v - before[r * 256 + c2]); g > 0) step[r] = std::min(step[r], g);
      }
      d[r] = lo + (hi - lo) * (0.13f + 0.1f * static_cast<float>(r));  // inside the group's range, off its grid
    }
    const auto rep = ov.set_ffn_feature(0, f, nullptr, nullptr, d.data());
    const auto after = rows_of(*ov.tensor(TensorRole::FfnDown, 0), 8, 256);
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 256; ++c) {
        if (c == f) EXPECT_LE(std::fabs(after[r * 256 + c] - d[r]), 0.5f * step[r] * 1.0001f) << r;
        else ASSERT_EQ(after[r * 256 + c], before[r * 256 + c]) << r << "," << c;
      }
    for (int64_t c : rep.changed_columns) EXPECT_EQ(c, f);
    // Far beyond the range: the block is re-quantised to hold it (Unsupported where larql has no
    // quantiser for the type).
    std::vector<float> big(8, 50.0f);
    if (type == DType::Q4_1 || type == DType::Q5_1) {
      EXPECT_THROW(ov.set_ffn_feature(0, f, nullptr, nullptr, big.data()), Error);
      continue;
    }
    ov.set_ffn_feature(0, f, nullptr, nullptr, big.data());
    const auto far = rows_of(*ov.tensor(TensorRole::FfnDown, 0), 8, 256);
    for (int r = 0; r < 8; ++r) EXPECT_NEAR(far[r * 256 + f], 50.0f, 50.0f / 7) << r;
  }
}

}  // namespace
}  // namespace larql
