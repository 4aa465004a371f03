// no-cache, markov-rs and markov-rs-codec on the synthetic Gemma 3 model (7 layers, layer 5
// global, sliding window 4, context 64): parity with standard, the tier accounting (hand-derived),
// state files, errors and the spec keys. Real-model contracts: markov_rs_real_model_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "kv/markov_rs.h"
#include "kv/no_cache.h"
#include "kv/registry.h"
#include "testlib/engine_testing.h"
#include "kv/standard.h"
#include "model/model.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"

namespace larql {
namespace {

using testing::make_synthetic_model;
using testing::expect_error;
using testing::kl_logits;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("larql-mrs-" + std::to_string(::getpid()) + "-" + name)).string();
}

struct Fx {
  Fx() : sm(make_synthetic_model()), model(Model::load(sm->path)), fwd(std::make_shared<Forward>(model, 1)) {}
  std::vector<float> logits(const std::vector<float>& h) {
    std::vector<float> lg(static_cast<size_t>(model->config().vocab));
    fwd->logits(h.data(), 1, lg.data());
    return lg;
  }
  /// Per-position logits: prefill the first `prompt` tokens, then decode the rest one by one.
  std::vector<std::vector<float>> run(Engine& e, const std::vector<int32_t>& toks, size_t prompt) {
    std::vector<std::vector<float>> out;
    out.push_back(logits(e.prefill(std::vector<int32_t>(toks.begin(), toks.begin() + prompt))));
    for (size_t i = prompt; i < toks.size(); ++i) out.push_back(logits(e.decode_step(toks[i])));
    return out;
  }
  std::unique_ptr<testing::SyntheticModel> sm;
  std::shared_ptr<Model> model;
  std::shared_ptr<Forward> fwd;
};

// 40 tokens: far past the sliding window (4) and every hot window used below.
std::vector<int32_t> sequence(size_t n = 40) {
  std::vector<int32_t> ids{2};
  uint32_t s = 7;
  while (ids.size() < n) {
    s = s * 1664525u + 1013904223u;
    ids.push_back(static_cast<int32_t>(6 + (s >> 8) % 256));
  }
  return ids;
}

double max_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t t = 0; t < a.size() && t < b.size(); ++t)
    for (size_t i = 0; i < a[t].size(); ++i) d = std::max(d, double(std::fabs(a[t][i] - b[t][i])));
  return d;
}

TEST(NoCacheEngine, EqualsStandardEveryStep) {
  Fx fx;
  const auto toks = sequence();
  StandardEngine st(fx.fwd, 0);
  NoCacheEngine nc(fx.fwd);
  const auto want = fx.run(st, toks, 3);
  const auto got = fx.run(nc, toks, 3);
  EXPECT_LE(max_diff(want, got), 1e-5);
  EXPECT_EQ(nc.n_past(), 40);
  const EngineMemory m = nc.memory();
  EXPECT_EQ(m.hot_bytes, 40u * 4u);  // 4 bytes per token id
  EXPECT_EQ(m.cold_bytes, 0u);
  EXPECT_EQ(nc.info().name, "no-cache");
}

TEST(NoCacheEngine, ErrorsAndStateFile) {
  Fx fx;
  NoCacheEngine nc(fx.fwd);
  expect_error(ErrorKind::EmptyPrompt, [&] { nc.prefill({}); });
  expect_error(ErrorKind::InvariantViolation, [&] { nc.decode_step(7); });
  expect_error(ErrorKind::ContextOverflow, [&] { nc.prefill(sequence(65)); });
  const auto toks = sequence(20);
  nc.prefill(std::vector<int32_t>(toks.begin(), toks.begin() + 10));
  const std::string path = temp_path("nc.state");
  nc.save_state(path);
  NoCacheEngine other(fx.fwd);
  other.load_state(path);
  EXPECT_EQ(other.n_past(), 10);
  for (size_t i = 10; i < 20; ++i) EXPECT_EQ(fx.logits(nc.decode_step(toks[i])), fx.logits(other.decode_step(toks[i])));
  // Another engine's file is refused, both ways.
  StandardEngine st(fx.fwd, 0);
  expect_error(ErrorKind::InvalidArgument, [&] { st.load_state(path); });
  st.prefill(toks);
  const std::string spath = temp_path("st.state");
  st.save_state(spath);
  expect_error(ErrorKind::InvalidArgument, [&] { other.load_state(spath); });
  std::filesystem::remove(path);
  std::filesystem::remove(spath);
}

// markov-rs is exact for every hot window: smaller than, equal to and larger than the sliding
// window (4), and unbounded. Cold positions (global layer 5 sees all 40) are re-derived.
TEST(MarkovRsEngine, EqualsStandardForEveryWindow) {
  Fx fx;
  const auto toks = sequence();
  StandardEngine st(fx.fwd, 0);
  const auto want = fx.run(st, toks, 1);  // want[i]: logits after token index i
  for (int64_t w : {0, 1, 2, 3, 4, 9}) {
    for (size_t prompt : {size_t(1), size_t(5), size_t(17)}) {
      MarkovRsEngine e(fx.fwd, w);
      const auto got = fx.run(e, toks, prompt);  // got[j]: after token index prompt - 1 + j
      double d = 0;
      for (size_t j = 0; j < got.size(); ++j) {
        const auto& a = want[prompt - 1 + j];
        for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - got[j][i])));
      }
      EXPECT_LE(d, 1e-5) << "window=" << w << " prompt=" << prompt;
      EXPECT_EQ(e.n_past(), 40);
    }
  }
}

// Tier accounting at n = 20, window = 2 (hidden 64 = 256 B/row f32, kv_dim 16 = 128 B K+V/row):
// sliding layers (6) keep min(2, 4-1) = 2 hot rows and 1 cold row ([17, 18)); the global layer
// keeps 2 hot rows and 18 cold rows.
TEST(MarkovRsEngine, MemoryCountsLogicalRowsPerTier) {
  Fx fx;
  const auto toks = sequence(20);
  struct Case { ColdCodec codec; size_t cold_row_bytes; };
  for (Case cs : {Case{ColdCodec::F32, 256}, Case{ColdCodec::Bf16, 128}, Case{ColdCodec::Int8, 4 + 64}}) {
    MarkovRsEngine e(fx.fwd, 2, cs.codec);
    fx.run(e, toks, 11);
    const EngineMemory m = e.memory();
    EXPECT_EQ(m.hot_bytes, 7u * 2u * (128u + 256u)) << cold_codec_name(cs.codec);
    EXPECT_EQ(m.cold_bytes, (6u * 1u + 18u) * cs.cold_row_bytes) << cold_codec_name(cs.codec);
    EXPECT_EQ(m.window_tokens, 2);
  }
  // Unbounded: no cold tier; sliding layers hold their last 3 positions, the global layer all 20.
  MarkovRsEngine u(fx.fwd, 0);
  fx.run(u, toks, 11);
  EXPECT_EQ(u.memory().hot_bytes, (6u * 3u + 20u) * (128u + 256u));
  EXPECT_EQ(u.memory().cold_bytes, 0u);
}

TEST(MarkovRsEngine, SaveLoadContinuesIdentically) {
  Fx fx;
  const auto toks = sequence();
  for (ColdCodec codec : {ColdCodec::F32, ColdCodec::Bf16, ColdCodec::Int8}) {
    for (int64_t w : {0, 2}) {
      MarkovRsEngine a(fx.fwd, w, codec);
      a.prefill(std::vector<int32_t>(toks.begin(), toks.begin() + 9));
      for (size_t i = 9; i < 21; ++i) a.decode_step(toks[i]);
      const std::string path = temp_path("mrs.state");
      a.save_state(path);
      MarkovRsEngine b(fx.fwd, w, codec);
      b.load_state(path);
      EXPECT_EQ(b.n_past(), 21);
      EXPECT_EQ(b.memory().hot_bytes, a.memory().hot_bytes);
      EXPECT_EQ(b.memory().cold_bytes, a.memory().cold_bytes);
      for (size_t i = 21; i < toks.size(); ++i)
        ASSERT_EQ(fx.logits(a.decode_step(toks[i])), fx.logits(b.decode_step(toks[i])))
            << cold_codec_name(codec) << " window=" << w << " step " << i;
      // Another config / engine / model's state is refused.
      MarkovRsEngine other_window(fx.fwd, w + 3, codec);
      expect_error(ErrorKind::InvalidArgument, [&] { other_window.load_state(path); }, "window");
      MarkovRsEngine other_codec(fx.fwd, w, codec == ColdCodec::Int8 ? ColdCodec::Bf16 : ColdCodec::Int8);
      expect_error(ErrorKind::InvalidArgument, [&] { other_codec.load_state(path); }, "codec");
      StandardEngine st(fx.fwd, 0);
      expect_error(ErrorKind::InvalidArgument, [&] { st.load_state(path); }, "standard");
      std::filesystem::remove(path);
    }
  }
  // A file from another model is refused.
  testing::SyntheticSpec spec;
  spec.seed = 99;
  auto sm2 = make_synthetic_model(spec);
  auto fwd2 = std::make_shared<Forward>(Model::load(sm2->path), 1);
  MarkovRsEngine a(fwd2, 2);
  a.prefill(toks);
  const std::string path = temp_path("mrs-other.state");
  a.save_state(path);
  MarkovRsEngine b(fx.fwd, 2);
  expect_error(ErrorKind::InvalidArgument, [&] { b.load_state(path); }, "model");
  std::filesystem::remove(path);
}

TEST(MarkovRsEngine, Errors) {
  Fx fx;
  MarkovRsEngine e(fx.fwd, 2);
  expect_error(ErrorKind::EmptyPrompt, [&] { e.prefill({}); });
  expect_error(ErrorKind::InvariantViolation, [&] { e.decode_step(7); });
  expect_error(ErrorKind::InvariantViolation, [&] { e.save_state(temp_path("x")); });
  expect_error(ErrorKind::ContextOverflow, [&] { e.prefill(sequence(65)); });
  e.prefill(sequence(63));
  expect_error(ErrorKind::InvalidArgument, [&] { e.decode_step(1 << 30); });
  EXPECT_EQ(e.n_past(), 63);  // a refused token changes nothing
  e.decode_step(7);
  expect_error(ErrorKind::ContextOverflow, [&] { e.decode_step(7); });
  EXPECT_EQ(e.n_past(), 64);
}

TEST(MarkovRsEngine, RefusesUnverifiedArchitectures) {
  Fx fx;
  std::string why;
  EXPECT_TRUE(MarkovRsEngine::residual_is_sufficient(fx.model->config(), &why)) << why;
  ModelConfig other = fx.model->config();
  other.arch = "gemma3n";  // per-layer embeddings: the residual alone is not the state
  EXPECT_FALSE(MarkovRsEngine::residual_is_sufficient(other, &why));
  EXPECT_NE(why.find("gemma3n"), std::string::npos) << why;
}

// The codec engine without a cold tier is markov-rs; with one, it is close but not identical
// (the cold tier really is encoded and really is attended).
TEST(MarkovRsCodecEngine, CloseToMarkovRs) {
  Fx fx;
  const auto toks = sequence();
  MarkovRsEngine exact(fx.fwd, 2);
  const auto want = fx.run(exact, toks, 5);
  for (ColdCodec codec : {ColdCodec::Bf16, ColdCodec::Int8}) {
    MarkovRsEngine unbounded(fx.fwd, 0, codec);
    EXPECT_LE(max_diff(want, fx.run(unbounded, toks, 5)), 1e-5) << cold_codec_name(codec);
    MarkovRsEngine e(fx.fwd, 2, codec);
    const auto got = fx.run(e, toks, 5);
    double mean = 0;
    for (size_t t = 0; t < got.size(); ++t) mean += kl_logits(want[t], got[t]) / double(got.size());
    EXPECT_GT(max_diff(want, got), 0.0) << cold_codec_name(codec);
    EXPECT_LE(mean, codec == ColdCodec::Bf16 ? 1e-3 : 2e-2) << cold_codec_name(codec);
    EXPECT_EQ(e.info().name, "markov-rs-codec");
    EXPECT_EQ(e.info().config, std::string("window=2,codec=") + cold_codec_name(codec));
  }
}

TEST(MarkovRsRegistry, NamesAliasesAndKeys) {
  for (const char* n : {"no-cache", "no_cache", "none", "off"}) EXPECT_EQ(parse_engine_spec(n).name, "no-cache") << n;
  for (const char* n : {"markov-rs", "markov_rs", "markov-residual", "markov_residual"})
    EXPECT_EQ(parse_engine_spec(n).name, "markov-rs") << n;
  for (const char* n : {"markov-rs-codec", "markov_rs_codec", "markov-residual-codec", "markov_residual_codec"})
    EXPECT_EQ(parse_engine_spec(n).name, "markov-rs-codec") << n;
  EXPECT_EQ(parse_engine_spec("markov_residual:window=128").to_string(), "markov-rs:window=128");
  EXPECT_EQ(parse_engine_spec("markov-rs-codec:window=8,codec=int8").to_string(), "markov-rs-codec:codec=int8,window=8");
  const auto list = parse_engine_list("no-cache,markov-rs:window=8,markov-rs-codec:codec=bf16,window=4");
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[2].params.at("window"), "4");
  const auto bad = testing::expect_bad_spec;
  bad("markov-rs-codec:codec=fp8", {"codec", "fp8", "bf16", "int8"});
  bad("markov-rs:codec=bf16", {"codec", "window"});
  bad("no-cache:window=4", {"window", "none"});
  bad("markov-rs:window=0", {"window"});
  bad("markov-rs:window=abc", {"window"});
}

TEST(MarkovRsRegistry, MakeEngineBuildsTheRightConfig) {
  Fx fx;
  EXPECT_EQ(make_engine(parse_engine_spec("none"), fx.fwd)->info().name, "no-cache");
  EXPECT_EQ(make_engine(parse_engine_spec("markov-rs:window=16"), fx.fwd)->info().config, "window=16");
  // Bounded by default (issue 7: unbounded, the codec never encoded anything).
  EXPECT_EQ(make_engine(parse_engine_spec("markov-rs-codec"), fx.fwd)->info().config, "window=256,codec=bf16");
  EXPECT_EQ(make_engine(parse_engine_spec("markov-rs-codec:codec=int8,window=3"), fx.fwd)->info().config,
            "window=3,codec=int8");
}

}  // namespace
}  // namespace larql
