// The unlimited-context engine: exact while the context fits one window, the mask beyond it
// (against the independent reference), replay of closed windows reproduces their K/V bit for bit,
// state files, errors. Beyond one window on the real model: tests/kv/chunk_invariance_test.cc
// (no cliff at a boundary).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "kv/registry.h"
#include "kv/standard.h"
#include "kv/unlimited_context.h"
#include "model/model.h"
#include "testlib/paths.h"
#include "testlib/real_model.h"
#include "testlib/reference_gemma3.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"
#include "testlib/engine_testing.h"

namespace larql {
namespace {

using testing::expect_error;

using testing::logits_of;

using testing::max_abs_diff;
using testing::pseudo_text;



void expect_same_kv(const WindowKv& a, const WindowKv& b) {
  ASSERT_EQ(a.first_pos, b.first_pos);
  ASSERT_EQ(a.rows, b.rows);
  ASSERT_EQ(a.layer_first, b.layer_first);
  ASSERT_EQ(a.k.size(), b.k.size());
  for (size_t l = 0; l < a.k.size(); ++l) {
    EXPECT_EQ(max_abs_diff(a.k[l], b.k[l]), 0.0f) << "K layer " << l;
    EXPECT_EQ(max_abs_diff(a.v[l], b.v[l]), 0.0f) << "V layer " << l;
  }
}

struct Syn {
  Syn() : sm(testing::make_synthetic_model()), model(Model::load(sm->path)), fwd(std::make_shared<Forward>(model, 2)) {}
  std::unique_ptr<testing::SyntheticModel> sm;
  std::shared_ptr<Model> model;
  std::shared_ptr<Forward> fwd;
};

TEST(UnlimitedContext, SyntheticExactInOneWindowAndReplay) {
  Syn s;
  const auto ids = pseudo_text(40, 6, 270, 11);
  // Within two windows of 16: identical to standard.
  UnlimitedContextEngine u(s.fwd, 16);
  StandardEngine st(s.fwd, 0);
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 5);
  EXPECT_EQ(max_abs_diff(logits_of(*s.fwd, u.prefill(prompt)), logits_of(*s.fwd, st.prefill(prompt))), 0.0f);
  for (size_t t = 5; t < 16; ++t)
    EXPECT_EQ(max_abs_diff(logits_of(*s.fwd, u.decode_step(ids[t])), logits_of(*s.fwd, st.decode_step(ids[t]))), 0.0f) << t;
  EXPECT_EQ(u.current_window_id(), 0);  // full but still current (lazy close)
  const WindowKv w0 = u.current_window_kv();
  EXPECT_EQ(w0.rows, 16);
  const auto& c = s.model->config();
  for (int64_t l = 0; l < c.n_layers; ++l)  // sliding layers hold only their own span (4)
    EXPECT_EQ(w0.layer_first[l], c.layers[l].sliding ? 12 : 0) << l;
  u.decode_step(ids[16]);
  EXPECT_EQ(u.current_window_id(), 1);
  expect_same_kv(u.replay(0), w0);
  // Window 1 built partly by decode; then by a fresh prefill crossing windows.
  for (size_t t = 17; t < 32; ++t) u.decode_step(ids[t]);
  const WindowKv w1 = u.current_window_kv();
  u.decode_step(ids[32]);
  expect_same_kv(u.replay(1), w1);
  expect_same_kv(u.replay(0), w0);  // replay changes nothing
  UnlimitedContextEngine p(s.fwd, 16);
  p.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + 33));  // one prefill, three windows
  EXPECT_EQ(max_abs_diff(logits_of(*s.fwd, p.decode_step(ids[33])), logits_of(*s.fwd, u.decode_step(ids[33]))), 0.0f);
  expect_same_kv(p.replay(1), w1);
  expect_error(ErrorKind::InvalidArgument, [&] { u.replay(2); });
  expect_error(ErrorKind::InvalidArgument, [&] { u.replay(-1); });
  // Memory at 34 tokens (window 2 holds 2): hot = 6 sliding layers x 4 rows + the global layer's
  // sink, window 1 (16 rows) and 2 rows; cold = 34 token ids.
  const size_t row = 16 * 2 * sizeof(float);
  int64_t global = 0;
  for (const auto& l : c.layers) global += l.sliding ? 0 : 1;
  ASSERT_EQ(global, 1);
  EXPECT_EQ(u.memory().hot_bytes, (6 * 4 + 1 + 16 + 2) * row);
  EXPECT_EQ(u.memory().cold_bytes, 34u * 4);
  EXPECT_EQ(u.memory().window_tokens, 16);
}

// What each layer sees beyond one window, against the independent reference with that mask:
// global layers the sink (unless sink=0), the previous window and their own window; sliding
// layers their own span, straight across the boundaries (issue 8: every layer used to restart at
// a boundary from the previous window's last row). Every position of 3+ windows, token by token
// and by one prefill.
TEST(UnlimitedContext, AcrossWindowsGlobalLayersSeeSinkCheckpointAndWindowSlidingLayersTheirSpan) {
  Syn s;
  const auto ids = pseudo_text(22, 6, 270, 21);
  for (bool sink : {true, false}) {
    for (int64_t W : {4, 6}) {
      SCOPED_TRACE(std::to_string(W) + (sink ? " sink" : " no sink"));
      testing::RefOptions o;
      o.global_window = W;
      o.sink = sink;
      const auto ref = testing::ReferenceGemma3(*s.sm, o).logits(ids);
      UnlimitedContextEngine u(s.fwd, W, sink);
      std::vector<float> h = u.prefill({ids[0]});
      for (size_t t = 0; t < ids.size(); ++t) {
        if (t > 0) h = u.decode_step(ids[t]);
        UnlimitedContextEngine one(s.fwd, W, sink);
        EXPECT_EQ(max_abs_diff(one.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + t + 1)), h), 0.0f)
            << "prefill vs decode at " << t;
        const auto lg = logits_of(*s.fwd, h);
        double d = 0, sc = 0;
        for (size_t v = 0; v < lg.size(); ++v) {
          d = std::max(d, std::abs(lg[v] - ref[t][v]));
          sc = std::max(sc, std::abs(ref[t][v]));
        }
        EXPECT_LE(d, 1e-3 * std::max(1.0, sc)) << "position " << t;
      }
    }
  }
  // Past one window that mask is not standard's: the comparisons above can fail.
  testing::RefOptions o;
  o.global_window = 4;
  o.sink = true;
  const auto ok = testing::ReferenceGemma3(*s.sm, o).logits(ids).back();
  testing::RefOptions full;
  const auto st = testing::ReferenceGemma3(*s.sm, full).logits(ids).back();
  double d = 0;
  for (size_t v = 0; v < ok.size(); ++v) d = std::max(d, std::abs(ok[v] - st[v]));
  EXPECT_GT(d, 1e-3) << "past one window the engine is not standard";
}

TEST(UnlimitedContext, SaveLoadRegistryAndErrors) {
  Syn s;
  const auto ids = pseudo_text(30, 6, 270, 5);
  const std::string path = (std::filesystem::temp_directory_path() / ("larql-ulc-" + std::to_string(::getpid()) + ".state")).string();
  UnlimitedContextEngine a(s.fwd, 8);
  expect_error(ErrorKind::EmptyPrompt, [&] { a.prefill({}); });
  expect_error(ErrorKind::InvariantViolation, [&] { a.decode_step(3); });
  expect_error(ErrorKind::InvariantViolation, [&] { a.save_state(path); });
  for (int64_t n : {8, 19}) {  // a full-but-current window and a partial one
    SCOPED_TRACE(n);
    a.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + n));
    a.save_state(path);
    UnlimitedContextEngine b(std::make_shared<Forward>(Model::load(s.sm->path), 1), 8);
    b.load_state(path);
    EXPECT_EQ(b.n_past(), n);
    EXPECT_EQ(b.memory().hot_bytes, a.memory().hot_bytes);
    EXPECT_EQ(b.memory().cold_bytes, a.memory().cold_bytes);
    for (size_t t = n; t < 26; ++t)
      EXPECT_EQ(max_abs_diff(logits_of(*s.fwd, a.decode_step(ids[t])), logits_of(*s.fwd, b.decode_step(ids[t]))), 0.0f) << t;
    if (n == 19) expect_same_kv(b.replay(1), a.replay(1));
  }
  UnlimitedContextEngine other(s.fwd, 4);
  expect_error(ErrorKind::InvalidArgument, [&] { other.load_state(path); }, "other window");
  // A window below the sliding window (4) would cut the sliding layers' span.
  expect_error(ErrorKind::InvalidArgument, [&] { UnlimitedContextEngine(s.fwd, 3); }, "window 3");
  expect_error(ErrorKind::InvalidArgument, [&] { make_engine(parse_engine_spec("unlimited:window=2"), s.fwd); }, "window=2");
  StandardEngine st(s.fwd, 0);
  expect_error(ErrorKind::InvalidArgument, [&] { st.load_state(path); }, "standard reading ours");
  std::filesystem::remove(path);
  expect_error(ErrorKind::ContextOverflow, [&] { a.prefill(pseudo_text(65, 6, 200, 1)); });
  auto e = make_engine(parse_engine_spec("unlimited"), s.fwd);
  EXPECT_EQ(e->info().name, "unlimited-context");
  EXPECT_EQ(e->info().config, "window=512");
  EXPECT_EQ(make_engine(parse_engine_spec("unlimited_context:window=64"), s.fwd)->info().config, "window=64");
  EXPECT_EQ(make_engine(parse_engine_spec("unlimited:sink=0"), s.fwd)->info().config, "window=512,sink=0");
  expect_error(ErrorKind::InvalidArgument, [&] { parse_engine_spec("unlimited-context:sink=2"); });
  {  // a state saved with the sink does not load without it
    UnlimitedContextEngine with(s.fwd, 8), without(s.fwd, 8, false);
    with.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + 19));
    with.save_state(path);
    expect_error(ErrorKind::InvalidArgument, [&] { without.load_state(path); }, "sink=0 reading sink=1");
    std::filesystem::remove(path);
  }
  expect_error(ErrorKind::InvalidArgument, [&] { parse_engine_spec("unlimited-context:window=x"); });
}

TEST(UnlimitedContextRealModel, ExactWithinOneWindow) {
  LARQL_REQUIRE_MODEL(path);
  auto fwd = testing::shared_real_model()->fwd;
  const auto ids = pseudo_text(208, 300, 20000, 777);
  UnlimitedContextEngine u(fwd, 512);
  StandardEngine st(fwd, 0);
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 200);
  float worst = max_abs_diff(logits_of(*fwd, u.prefill(prompt)), logits_of(*fwd, st.prefill(prompt)));
  for (size_t t = 200; t < ids.size(); ++t)
    worst = std::max(worst, max_abs_diff(logits_of(*fwd, u.decode_step(ids[t])), logits_of(*fwd, st.decode_step(ids[t]))));
  std::printf("[unlimited-context] window 512, 208 tokens: max |dlogit| vs standard = %g\n", worst);
  EXPECT_EQ(worst, 0.0f);
}

}  // namespace
}  // namespace larql
