// The standard engine on the real model: decoding token by token must give exactly the logits
// of one batched prefill over the same tokens (the forward pass is batch-invariant: every row's
// arithmetic is the same whatever the batch size), including past the 512-token sliding window.
// This is what lets the other engines promise exact contracts against standard.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "kv/registry.h"
#include "kv/standard.h"
#include "model/model.h"
#include "testlib/paths.h"

namespace larql {
namespace {

std::vector<float> logits_of(Forward& f, const std::vector<float>& h) {
  std::vector<float> out(static_cast<size_t>(f.config().vocab));
  f.logits(h.data(), 1, out.data());
  return out;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

TEST(StandardRealModel, DecodeEqualsBatchedPrefillAcrossTheSlidingWindow) {
  LARQL_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  auto fwd = std::make_shared<Forward>(model, 2);
  // Deterministic pseudo-text ids (ordinary vocabulary range), long enough to pass the window.
  const int64_t window = model->config().layers[0].window;
  ASSERT_EQ(window, 512);
  const int64_t n = window + 40;
  std::vector<int32_t> ids{2};
  uint32_t s = 12345;
  while (static_cast<int64_t>(ids.size()) < n) {
    s = s * 1664525u + 1013904223u;
    ids.push_back(static_cast<int32_t>(300 + (s >> 8) % 20000));
  }
  StandardEngine batched(fwd, 0);
  const auto want = logits_of(*fwd, batched.prefill(ids));

  StandardEngine stepped(fwd, 0);
  const size_t split = static_cast<size_t>(window - 8);  // decode steps cross position 512
  std::vector<float> h = stepped.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + split));
  for (size_t i = split; i < ids.size(); ++i) h = stepped.decode_step(ids[i]);
  const auto got = logits_of(*fwd, h);
  EXPECT_EQ(stepped.n_past(), n);
  EXPECT_LE(max_abs_diff(want, got), 1e-5f);
}

}  // namespace
}  // namespace larql
