// The standard engine on a synthetic Gemma 3 model: prefill/decode parity, errors, state files,
// the window=N variant and context overflow.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "kv/registry.h"
#include "kv/standard.h"
#include "model/model.h"
#include "testlib/reference_gemma3.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"
#include "testlib/engine_testing.h"

namespace larql {
namespace {

using testing::make_synthetic_model;
using testing::SyntheticSpec;

const std::vector<int32_t> kSeq = {2, 270, 277, 7, 100, 271, 5, 4, 262, 200, 150, 265};

using testing::expect_error;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("larql-kvtest-" + std::to_string(::getpid()) + "-" + name)).string();
}

struct Fixture {
  explicit Fixture(SyntheticSpec s = {}) : sm(make_synthetic_model(s)), model(Model::load(sm->path)),
                                           fwd(std::make_shared<Forward>(model, 2)) {}
  std::vector<float> logits(const std::vector<float>& h) {
    std::vector<float> lg(static_cast<size_t>(model->config().vocab));
    fwd->logits(h.data(), 1, lg.data());
    return lg;
  }
  /// Logits of every position from one batched pass.
  std::vector<std::vector<float>> batched(const std::vector<int32_t>& toks) {
    const auto& c = model->config();
    KvCache cache(c);
    std::vector<float> x(toks.size() * c.hidden), lg(toks.size() * c.vocab);
    fwd->forward(toks.data(), static_cast<int64_t>(toks.size()), cache, x.data());
    fwd->logits(x.data(), static_cast<int64_t>(toks.size()), lg.data());
    std::vector<std::vector<float>> out;
    for (size_t t = 0; t < toks.size(); ++t)
      out.emplace_back(lg.begin() + t * c.vocab, lg.begin() + (t + 1) * c.vocab);
    return out;
  }
  std::unique_ptr<testing::SyntheticModel> sm;
  std::shared_ptr<Model> model;
  std::shared_ptr<Forward> fwd;
};

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, double(std::abs(a[i] - b[i])));
  return d;
}

TEST(StandardEngine, PrefillThenDecodeEqualsOnePrefill) {
  Fixture fx;
  const auto all = fx.batched(kSeq);
  StandardEngine e(fx.fwd, 0);
  const std::vector<int32_t> prompt(kSeq.begin(), kSeq.begin() + 3);
  auto h = e.prefill(prompt);
  EXPECT_EQ(h.size(), 64u);
  EXPECT_EQ(e.n_past(), 3);
  EXPECT_LE(max_diff(fx.logits(h), all[2]), 1e-4);
  for (size_t t = 3; t < kSeq.size(); ++t) {
    h = e.decode_step(kSeq[t]);
    EXPECT_EQ(e.n_past(), static_cast<int64_t>(t + 1));
    EXPECT_LE(max_diff(fx.logits(h), all[t]), 1e-4) << "position " << t;
  }
  // And one prefill of the whole sequence agrees with the independent reference.
  StandardEngine one(fx.fwd, 0);
  const auto lg = fx.logits(one.prefill(kSeq));
  const auto ref = testing::ReferenceGemma3(*fx.sm).logits(kSeq).back();
  double d = 0, s = 0;
  for (size_t v = 0; v < ref.size(); ++v) {
    d = std::max(d, std::abs(lg[v] - ref[v]));
    s = std::max(s, std::abs(ref[v]));
  }
  EXPECT_LE(d, 1e-3 * std::max(1.0, s));
}

TEST(StandardEngine, PrefillRestartsTheSequence) {
  Fixture fx;
  StandardEngine e(fx.fwd, 0);
  e.prefill({2, 100, 101, 102, 103});
  const auto again = fx.logits(e.prefill({2, 270}));
  EXPECT_EQ(e.n_past(), 2);
  EXPECT_LE(max_diff(again, fx.batched({2, 270})[1]), 1e-4);
}

TEST(StandardEngine, Errors) {
  Fixture fx;
  StandardEngine e(fx.fwd, 0);
  expect_error(ErrorKind::EmptyPrompt, [&] { e.prefill({}); }, "empty prompt");
  expect_error(ErrorKind::InvariantViolation, [&] { e.decode_step(7); }, "decode before prefill");
  expect_error(ErrorKind::InvariantViolation, [&] { e.save_state(temp_path("never.state")); }, "save before prefill");
  expect_error(ErrorKind::InvalidArgument, [&] { e.prefill({2, static_cast<int32_t>(fx.sm->vocab)}); }, "bad token");
}

TEST(StandardEngine, InfoAndRegistry) {
  Fixture fx;
  auto e = make_engine(parse_engine_spec("sliding:window=5"), fx.fwd);
  EXPECT_EQ(e->info().name, "standard");
  EXPECT_EQ(e->info().backend, "cpu");
  EXPECT_EQ(e->info().config, "window=5");
  EXPECT_EQ(make_engine(parse_engine_spec("standard:window=5,sink=0"), fx.fwd)->info().config, "window=5,sink=0");
  EXPECT_EQ(make_engine(parse_engine_spec("full"), fx.fwd)->info().config, "");
  // A window below the model's sliding window (4) would cut the sliding layers' own span.
  for (const char* spec : {"standard:window=3", "standard:window=1"}) {
    try {
      make_engine(parse_engine_spec(spec), fx.fwd);
      ADD_FAILURE() << spec << " accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(std::string(err.what()).find("sliding window (4 positions)"), std::string::npos) << err.what();
    }
  }
  expect_error(ErrorKind::InvalidArgument, [&] { parse_engine_spec("standard:window=8,sink=2"); }, "sink=2");
}

TEST(StandardEngine, MemoryCountsLogicalRows) {
  Fixture fx;
  const size_t row = 16 * 2 * sizeof(float);  // kv_dim 16, K and V
  StandardEngine full(fx.fwd, 0);
  full.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 10));
  // 6 sliding layers keep their window (4 rows), the global layer keeps all 10.
  EXPECT_EQ(full.memory().hot_bytes, (6 * 4 + 10) * row);
  EXPECT_EQ(full.memory().cold_bytes, 0u);
  EXPECT_EQ(full.memory().window_tokens, 0);
  // window=5 (above the sliding window 4): sliding layers keep their own 4 rows, the global
  // layer the newest 5 plus the sink row (position 0) once it has left them.
  StandardEngine w5(fx.fwd, 5);
  w5.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 10));
  EXPECT_EQ(w5.memory().hot_bytes, (6 * 4 + 5 + 1) * row);
  EXPECT_EQ(w5.memory().window_tokens, 5);
  for (int i = 0; i < 2; ++i) w5.decode_step(kSeq[10 + i]);
  EXPECT_EQ(w5.memory().hot_bytes, (6 * 4 + 5 + 1) * row);
  EXPECT_EQ(w5.n_past(), 12);
  StandardEngine w8(fx.fwd, 8, false);  // no sink
  w8.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 10));
  EXPECT_EQ(w8.memory().hot_bytes, (6 * 4 + 8) * row);
  StandardEngine shortp(fx.fwd, 5);
  shortp.prefill({2, 100});
  EXPECT_EQ(shortp.memory().hot_bytes, 7 * 2 * row);  // the sink is still a live row: counted once
}

// window=N: every layer attends to its newest N positions, itself included (the model's own
// sliding-window convention), plus position 0 — the attention sink — unless sink=0; sliding layers
// keep their own (smaller) window. The same mask applies in prefill and in decode (issue 8:
// prefill used to see its whole chunk plus N older rows, decode N rows plus itself), so one
// prefill of the first t + 1 tokens and token-by-token decode both match the independent
// reference with that mask at every position t.
TEST(StandardEngine, WindowedPrefillAndDecodeMatchReferenceWithThatWindowEverywhere) {
  Fixture fx;
  for (int64_t window : {4, 6}) {
    for (bool sink : {true, false}) {
      SCOPED_TRACE(std::to_string(window) + (sink ? " sink" : " no sink"));
      StandardEngine e(fx.fwd, window, sink);
      testing::RefOptions o;
      o.window_all_layers = window;
      o.sink = sink;
      const auto ref = testing::ReferenceGemma3(*fx.sm, o).logits(kSeq);
      std::vector<float> h = e.prefill({kSeq[0]});
      for (size_t t = 0; t < kSeq.size(); ++t) {
        if (t > 0) h = e.decode_step(kSeq[t]);
        StandardEngine one(fx.fwd, window, sink);
        const auto hp = one.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + t + 1));
        EXPECT_EQ(testing::max_abs_diff(h, hp), 0.0f) << "prefill vs decode at position " << t;
        const auto lg = fx.logits(h);
        double d = 0, sc = 0;
        for (size_t v = 0; v < lg.size(); ++v) {
          d = std::max(d, std::abs(lg[v] - ref[t][v]));
          sc = std::max(sc, std::abs(ref[t][v]));
        }
        EXPECT_LE(d, 1e-3 * std::max(1.0, sc)) << "position " << t;
      }
    }
  }
  // Without the sink the reference is far off: the test can see the sink.
  testing::RefOptions wrong;
  wrong.window_all_layers = 6;
  const auto wr = testing::ReferenceGemma3(*fx.sm, wrong).logits(kSeq).back();
  StandardEngine e(fx.fwd, 6);
  const auto lg = fx.logits(e.prefill(kSeq));
  double d = 0;
  for (size_t v = 0; v < lg.size(); ++v) d = std::max(d, std::abs(lg[v] - wr[v]));
  EXPECT_GT(d, 1e-2);
}

TEST(StandardEngine, SaveLoadContinuesWithIdenticalLogits) {
  for (int64_t window : {0, 5}) {  // 5: the sink row has left the window by the save
    SCOPED_TRACE(window);
    Fixture fx;
    const std::string path = temp_path("w" + std::to_string(window) + ".state");
    StandardEngine a(fx.fwd, window);
    a.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 7));
    a.save_state(path);
    EXPECT_GT(std::filesystem::file_size(path), 0u);
    // A fresh engine (and a fresh Forward on a freshly loaded model) continues identically.
    auto model2 = Model::load(fx.sm->path);
    auto fwd2 = std::make_shared<Forward>(model2, 1);
    StandardEngine b(fwd2, window);
    b.load_state(path);
    EXPECT_EQ(b.n_past(), 7);
    EXPECT_EQ(b.memory().hot_bytes, a.memory().hot_bytes);
    std::vector<float> lb(static_cast<size_t>(fx.sm->vocab));
    for (size_t t = 7; t < kSeq.size(); ++t) {
      const auto la = fx.logits(a.decode_step(kSeq[t]));
      const auto hb = b.decode_step(kSeq[t]);
      fwd2->logits(hb.data(), 1, lb.data());
      EXPECT_LE(max_diff(la, lb), 1e-5) << "position " << t;
    }
    // Loading replaces existing state.
    StandardEngine c(fx.fwd, window);
    c.prefill({2, 100, 101});
    c.load_state(path);
    EXPECT_EQ(c.n_past(), 7);
    std::filesystem::remove(path);
  }
}

TEST(StandardEngine, StateFromAnotherModelOrEngineConfigIsRefused) {
  Fixture fx;
  SyntheticSpec other;
  other.seed = 2;
  Fixture fy(other);
  const std::string path = temp_path("other.state");
  StandardEngine a(fy.fwd, 0);
  a.prefill({2, 100, 101});
  a.save_state(path);
  StandardEngine b(fx.fwd, 0);
  expect_error(ErrorKind::InvalidArgument, [&] { b.load_state(path); }, "other model");
  EXPECT_THROW(b.decode_step(5), Error);  // still not started
  // A state saved with window=5 does not load into an unbounded engine.
  StandardEngine w(fx.fwd, 5);
  w.prefill({2, 100, 101});
  w.save_state(path);
  expect_error(ErrorKind::InvalidArgument, [&] { b.load_state(path); }, "other config");
  std::filesystem::remove(path);
}

TEST(StandardEngine, CorruptOrTruncatedStateIsRefused) {
  Fixture fx;
  const std::string path = temp_path("good.state"), bad = temp_path("bad.state");
  StandardEngine a(fx.fwd, 0);
  a.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 6));
  a.save_state(path);
  std::vector<char> bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto write = [&](const std::vector<char>& b) {
    std::ofstream out(bad, std::ios::binary | std::ios::trunc);
    out.write(b.data(), static_cast<std::streamsize>(b.size()));
  };
  StandardEngine b(fx.fwd, 0);
  // Truncated anywhere: header, layer table, payload.
  for (size_t keep : {size_t{0}, size_t{5}, size_t{12}, size_t{40}, bytes.size() / 2, bytes.size() - 1}) {
    write(std::vector<char>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(keep)));
    expect_error(ErrorKind::Format, [&] { b.load_state(bad); }, "truncated to " + std::to_string(keep));
  }
  // Bad magic.
  auto m = bytes;
  m[0] = 'X';
  write(m);
  expect_error(ErrorKind::Format, [&] { b.load_state(bad); }, "bad magic");
  // Unknown version (bytes 8..11).
  m = bytes;
  m[8] = 9;
  write(m);
  expect_error(ErrorKind::Format, [&] { b.load_state(bad); }, "version");
  // Trailing garbage.
  m = bytes;
  m.push_back(0);
  write(m);
  expect_error(ErrorKind::Format, [&] { b.load_state(bad); }, "trailing bytes");
  // n_past (the u64 after the header strings) changed: the layer tables no longer end there.
  const size_t n_past_off = bytes.size() - static_cast<size_t>(a.memory().hot_bytes) - 7 * 16 - 8;
  m = bytes;
  m[n_past_off] = 5;
  write(m);
  expect_error(ErrorKind::Format, [&] { b.load_state(bad); }, "n_past");
  // A huge row count must be refused before allocating.
  m = bytes;
  for (int i = 0; i < 8; ++i) m[n_past_off + 8 + 8 + i] = static_cast<char>(0x7f);
  write(m);
  expect_error(ErrorKind::Format, [&] { b.load_state(bad); }, "huge rows");
  // Missing file.
  try {
    b.load_state(temp_path("does-not-exist.state"));
    ADD_FAILURE() << "loaded a missing file";
  } catch (const Error& e) {
    EXPECT_TRUE(e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::Io) << e.what();
  }
  // After all these failures the engine is still usable and unstarted.
  expect_error(ErrorKind::InvariantViolation, [&] { b.decode_step(5); });
  b.load_state(path);
  EXPECT_EQ(b.n_past(), 6);
  std::filesystem::remove(path);
  std::filesystem::remove(bad);
}

TEST(StandardEngine, ContextOverflow) {
  SyntheticSpec s;
  s.context_length = 8;
  Fixture fx(s);
  EXPECT_EQ(fx.model->config().context_length, 8);
  StandardEngine e(fx.fwd, 0);
  expect_error(ErrorKind::ContextOverflow, [&] { e.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 9)); });
  e.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 6));
  e.decode_step(kSeq[6]);
  e.decode_step(kSeq[7]);
  EXPECT_EQ(e.n_past(), 8);
  expect_error(ErrorKind::ContextOverflow, [&] { e.decode_step(kSeq[8]); });
  EXPECT_EQ(e.n_past(), 8);  // the failed step left the state alone
  // A windowed engine is bounded by the model's context too (positions stay absolute).
  StandardEngine w(fx.fwd, 4);
  w.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 8));
  expect_error(ErrorKind::ContextOverflow, [&] { w.decode_step(kSeq[8]); });
}

}  // namespace
}  // namespace larql
