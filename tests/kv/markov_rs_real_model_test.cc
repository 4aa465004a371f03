// Contracts of no-cache, markov-rs and markov-rs-codec on the real model (docs/engines.md). Every
// engine runs in lockstep with `standard` on standard's greedy tokens; expected values come from
// standard (or, for the codec, from markov-rs), never from the engine under test.
//
// Sizes: the engines as `--engine` builds them (cold_kv=cache) run at the contract's sizes —
// 256 decode steps at a short prompt and on a 2,000-token context with window=128. The
// cold_kv=derive mode re-derives the cold tier every step, so its default run is 600 tokens /
// 32 steps; LARQL_KV_LONG=1 runs it at the full sizes too.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kv/markov_rs.h"
#include "kv/no_cache.h"
#include "kv/registry.h"
#include "kv/standard.h"
#include "model/model.h"
#include "testlib/engine_testing.h"
#include "testlib/paths.h"

namespace larql {
namespace {

bool long_run() {
  const char* s = std::getenv("LARQL_KV_LONG");
  return s != nullptr && std::string(s) == "1";
}

/// `<bos>` + ids in [300, 20300): ordinary vocabulary, no specials.
std::vector<int32_t> pseudo_text(int64_t n, uint32_t seed) { return testing::pseudo_text(n, 300, 20000, seed); }

struct Real {
  std::shared_ptr<Model> model;
  std::shared_ptr<Forward> fwd;
  std::vector<float> logits(const std::vector<float>& h) {
    std::vector<float> lg(static_cast<size_t>(model->config().vocab));
    fwd->logits(h.data(), 1, lg.data());
    return lg;
  }
};


double max_abs(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d;
}

/// Runs `engines` in lockstep with standard over `steps` greedy decode steps (standard's tokens;
/// the first comparison is the prefill's). Per engine: max |delta logit|, max and mean KL vs the
/// reference (standard, or engines[ref[i]] when ref[i] >= 0), and greedy agreement with standard.
struct Stats {
  double max_dlogit = 0, max_kl = 0, mean_kl = 0;
  int64_t token_mismatches = 0, steps = 0;
  double seconds = 0;
};

std::vector<Stats> lockstep(Real& r, const std::vector<int32_t>& prompt, int64_t steps, std::vector<Engine*> engines,
                            std::vector<int> ref) {
  ref.resize(engines.size(), -1);
  StandardEngine st(r.fwd, 0);
  std::vector<Stats> out(engines.size());
  std::vector<std::vector<float>> lg(engines.size());
  auto compare = [&](const std::vector<float>& want) {
    for (size_t i = 0; i < engines.size(); ++i) {
      const auto& base = ref[i] >= 0 ? lg[static_cast<size_t>(ref[i])] : want;
      Stats& s = out[i];
      const double k = testing::kl_logits(base, lg[i]);
      s.max_dlogit = std::max(s.max_dlogit, max_abs(base, lg[i]));
      s.max_kl = std::max(s.max_kl, k);
      s.mean_kl += k;
      s.token_mismatches += testing::argmax(lg[i]) != testing::argmax(want);
      s.steps += 1;
    }
  };
  using clk = std::chrono::steady_clock;
  auto want = r.logits(st.prefill(prompt));
  for (size_t i = 0; i < engines.size(); ++i) {
    const auto t0 = clk::now();
    lg[i] = r.logits(engines[i]->prefill(prompt));
    out[i].seconds += std::chrono::duration<double>(clk::now() - t0).count();
  }
  compare(want);
  for (int64_t step = 0; step < steps; ++step) {
    const int32_t tok = testing::argmax(want);
    want = r.logits(st.decode_step(tok));
    for (size_t i = 0; i < engines.size(); ++i) {
      const auto t0 = clk::now();
      lg[i] = r.logits(engines[i]->decode_step(tok));
      out[i].seconds += std::chrono::duration<double>(clk::now() - t0).count();
    }
    compare(want);
  }
  for (auto& s : out) s.mean_kl /= double(s.steps);
  return out;
}

void print(const char* what, const Stats& s) {
  std::printf("[real] %-40s steps=%lld max|dlogit|=%.3g maxKL=%.3g meanKL=%.3g mismatches=%lld time=%.1fs\n", what,
              static_cast<long long>(s.steps), s.max_dlogit, s.max_kl, s.mean_kl,
              static_cast<long long>(s.token_mismatches), s.seconds);
}

Real load(const std::string& path) {
  Real r;
  r.model = Model::load(path);
  r.fwd = std::make_shared<Forward>(r.model, 2);
  return r;
}

TEST(NoCacheRealModel, SameLogitsAsStandardFor64Steps) {
  LARQL_REQUIRE_MODEL(path);
  Real r = load(path);
  NoCacheEngine nc(r.fwd);
  const auto s = lockstep(r, pseudo_text(4, 11), 64, {&nc}, {});
  print("no-cache (prompt 4, 64 steps)", s[0]);
  EXPECT_LE(s[0].max_dlogit, 1e-3);
  EXPECT_EQ(s[0].token_mismatches, 0);
}

// (1) a short prompt, no cold tier.
TEST(MarkovRsRealModel, ExactAtAShortPrompt) {
  LARQL_REQUIRE_MODEL(path);
  Real r = load(path);
  const int64_t steps = 256;
  MarkovRsEngine e(r.fwd, 0);
  const auto s = lockstep(r, pseudo_text(16, 21), steps, {&e}, {});
  print("markov-rs (prompt 16)", s[0]);
  EXPECT_EQ(s[0].token_mismatches, 0);
  EXPECT_LE(s[0].max_kl, 1e-6);
}

// (2) a prompt longer than the sliding window, unbounded; (3) window=128 on a 2,000-token
// context, so every layer has a cold tier (sliding layers: positions n-511 .. n-129; global
// layers: all but the newest 128); the codec engines at window=128 against markov-rs:window=128.
// The engines as `--engine` builds them (cold_kv=cache, the default), at the contract's sizes.
TEST(MarkovRsRealModel, ExactPastTheSlidingWindowAndWithAColdTier_CodecsClose) {
  LARQL_REQUIRE_MODEL(path);
  Real r = load(path);
  const int64_t n = 2000, steps = 256;
  auto make = [&](const char* spec) { return make_engine(parse_engine_spec(spec), r.fwd); };
  auto unbounded = make("markov-rs"), windowed = make("markov-rs:window=128");
  auto bf16 = make("markov-rs-codec:window=128"), int8 = make("markov-rs-codec:window=128,codec=int8");
  const auto s = lockstep(r, pseudo_text(n, 33), steps, {unbounded.get(), windowed.get(), bf16.get(), int8.get()},
                          {-1, -1, 1, 1});
  const std::string ctx = " (prompt " + std::to_string(n) + ")";
  print(("markov-rs" + ctx).c_str(), s[0]);
  print(("markov-rs:window=128" + ctx).c_str(), s[1]);
  print(("markov-rs-codec bf16 vs markov-rs" + ctx).c_str(), s[2]);
  print(("markov-rs-codec int8 vs markov-rs" + ctx).c_str(), s[3]);
  for (int i : {0, 1}) {
    EXPECT_EQ(s[static_cast<size_t>(i)].token_mismatches, 0) << i;
    EXPECT_LE(s[static_cast<size_t>(i)].max_kl, 1e-6) << i;
  }
  EXPECT_GT(windowed->memory().cold_bytes, 0u);
  EXPECT_LT(bf16->memory().cold_bytes, windowed->memory().cold_bytes);
  EXPECT_LE(s[2].mean_kl, 0.01);
  EXPECT_LE(s[3].mean_kl, 0.5);
}

// The same contract in cold_kv=derive mode (cold K/V re-derived every step; memory bounded by
// the window). Its per-step cost grows with the cold tier, so the default run is 600 tokens / 32
// steps; LARQL_KV_LONG=1 runs 2,000 tokens / 256 steps.
TEST(MarkovRsRealModel, DeriveModeExactWithAColdTier_CodecsClose) {
  LARQL_REQUIRE_MODEL(path);
  Real r = load(path);
  const int64_t n = long_run() ? 2000 : 600, steps = long_run() ? 256 : 32;
  MarkovRsEngine windowed(r.fwd, 128);
  MarkovRsEngine bf16(r.fwd, 128, ColdCodec::Bf16), int8(r.fwd, 128, ColdCodec::Int8);
  const auto s = lockstep(r, pseudo_text(n, 33), steps, {&windowed, &bf16, &int8}, {-1, 0, 0});
  const std::string ctx = " (prompt " + std::to_string(n) + ", derive)";
  print(("markov-rs:window=128" + ctx).c_str(), s[0]);
  print(("markov-rs-codec bf16 vs markov-rs" + ctx).c_str(), s[1]);
  print(("markov-rs-codec int8 vs markov-rs" + ctx).c_str(), s[2]);
  EXPECT_EQ(s[0].token_mismatches, 0);
  EXPECT_LE(s[0].max_kl, 1e-6);
  EXPECT_GT(windowed.memory().cold_bytes, 0u);
  EXPECT_LE(s[1].mean_kl, 0.01);
  EXPECT_LE(s[2].mean_kl, 0.5);
}

// Both cold_kv modes hold the same canonical state: a file saved in one loads in the other.
TEST(MarkovRsRealModel, StateFilesCrossColdKvModes) {
  LARQL_REQUIRE_MODEL(path);
  Real r = load(path);
  const auto toks = pseudo_text(560, 45);
  for (const char* codec : {"", ",codec=int8"}) {
    const std::string base = std::string(*codec ? "markov-rs-codec" : "markov-rs") + ":window=64" + codec;
    auto cache = make_engine(parse_engine_spec(base), r.fwd);
    auto derive = make_engine(parse_engine_spec(base + ",cold_kv=derive"), r.fwd);
    cache->prefill(std::vector<int32_t>(toks.begin(), toks.begin() + 540));
    const std::string file = (std::filesystem::temp_directory_path() / ("larql-mrs-x-" + std::to_string(::getpid()))).string();
    cache->save_state(file);
    derive->load_state(file);
    std::filesystem::remove(file);
    for (size_t i = 540; i < toks.size(); ++i) {
      const auto a = r.logits(cache->decode_step(toks[i])), b = r.logits(derive->decode_step(toks[i]));
      ASSERT_LE(max_abs(a, b), 0.0) << base << " step " << i;
    }
  }
}

TEST(MarkovRsRealModel, SaveLoadContinuesWithIdenticalLogits) {
  LARQL_REQUIRE_MODEL(path);
  Real r = load(path);
  const auto toks = pseudo_text(560, 44);  // past the sliding window, with a cold tier
  MarkovRsEngine a(r.fwd, 64);
  a.prefill(std::vector<int32_t>(toks.begin(), toks.begin() + 540));
  for (size_t i = 540; i < 550; ++i) a.decode_step(toks[i]);
  const std::string file = (std::filesystem::temp_directory_path() / ("larql-mrs-real-" + std::to_string(::getpid()))).string();
  a.save_state(file);
  std::printf("[real] markov-rs:window=64 state file at n=550: %lld bytes (hot %zu, cold %zu)\n",
              static_cast<long long>(std::filesystem::file_size(file)), a.memory().hot_bytes, a.memory().cold_bytes);
  MarkovRsEngine b(r.fwd, 64);
  b.load_state(file);
  std::filesystem::remove(file);
  for (size_t i = 550; i < toks.size(); ++i)
    ASSERT_EQ(r.logits(a.decode_step(toks[i])), r.logits(b.decode_step(toks[i]))) << "step " << i;
}

}  // namespace
}  // namespace larql
