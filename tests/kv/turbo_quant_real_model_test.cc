// turbo-quant on the real model (Gemma 3 270M): per-row cosine of decoded vs original K/V, top-1
// agreement and KL against standard, memory against an f16 cache, save/load, and chunk
// invariance with the teacher-forced quality over 600 tokens of real text. The codec math and
// the engine's mechanics on a synthetic model: turbo_quant_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "kv/standard.h"
#include "kv/turbo_codec.h"
#include "kv/turbo_quant.h"
#include "model/model.h"
#include "testlib/engine_testing.h"
#include "testlib/paths.h"
#include "tokenizer/tokenizer.h"

namespace larql {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("larql-tqreal-" + std::to_string(::getpid()) + "-" + name)).string();
}

using testing::cosine;

double max_diff(const std::vector<float>& a, const std::vector<float>& b) { return testing::max_abs_diff(a, b); }

// ---------------------------------------------------------------- real model contracts

const char* kText =
    "The history of the lighthouse begins in the ancient world, when fires were lit on hilltops to guide "
    "sailors home. The most famous of these was the Pharos of Alexandria, built in the third century BC on "
    "a small island at the entrance of the harbour. It stood for more than a thousand years before a series "
    "of earthquakes brought it down. Later towers in Europe were simple stone columns with a coal fire at "
    "the top, and keepers spent their nights carrying fuel up narrow stairs. In the eighteenth century, "
    "oil lamps with reflectors replaced open fires, and in 1822 Augustin Fresnel designed a lens made of "
    "concentric rings of glass that could throw a beam of light more than twenty miles out to sea. Keepers "
    "lived with their families in small cottages beside the tower, recording the weather, trimming the wicks "
    "and polishing the brass. Storms could cut them off from the mainland for weeks. Today most lighthouses "
    "are automated, their lamps switched by sensors and their lenses turned by electric motors, but many "
    "still stand as museums where visitors climb the spiral stairs and look out over the water. When the "
    "fog rolls in, the old horns still sound along some coasts, a reminder of the people who kept the lights";

TEST(TurboQuantRealModel, PerRowCosineOfDecodedKV) {
  LARQL_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  auto fwd = std::make_shared<Forward>(model, 2);
  const auto& c = model->config();
  const auto tok = Tokenizer(model->source().vocabulary());
  const auto ids = tok.encode(kText, true, false);
  ASSERT_GE(ids.size(), 200u);
  KvCache cache(c);  // standard's K/V for this prompt
  std::vector<float> x(ids.size() * c.hidden);
  fwd->forward(ids.data(), static_cast<int64_t>(ids.size()), cache, x.data());
  for (int bits : {3, 4}) {
    const turbo::Codec codec(c.head_dim, bits);
    std::vector<uint8_t> enc(codec.bytes_per_vector());
    std::vector<float> dec(static_cast<size_t>(c.head_dim));
    for (int kind = 0; kind < 2; ++kind) {
      std::vector<double> cos;
      for (int64_t li = 0; li < c.n_layers; ++li) {
        const LayerKv& l = cache.layer(li);
        for (int64_t p = l.first_pos(); p < l.end_pos(); ++p)
          for (int64_t h = 0; h < c.n_kv_heads; ++h) {
            const float* row = (kind == 0 ? l.k_at(p) : l.v_at(p)) + h * c.head_dim;
            codec.encode(row, enc.data());
            codec.decode(enc.data(), dec.data());
            cos.push_back(cosine(row, dec.data(), c.head_dim));
          }
      }
      std::sort(cos.begin(), cos.end());
      double mean = 0;
      for (double v : cos) mean += v / cos.size();
      std::printf("[turbo] real %s, %d-bit: %zu rows (%zu tokens x %lld layers), cosine mean %.5f, p1 %.5f, min %.5f\n",
                  kind == 0 ? "K" : "V", bits, cos.size(), ids.size(), static_cast<long long>(c.n_layers), mean,
                  cos[cos.size() / 100], cos.front());
      // 4-bit: the contract holds for every row. 3-bit: it holds for the mean row; single rows
      // dip to ~0.97 — the Gaussian Lloyd-Max bound for the mean row is 0.983 (distortion
      // 0.0345), and a row's error is an average of head_dim coordinate errors that scatters
      // around that mean, so a per-row 0.98 is out of reach for any 3-bit scalar codebook.
      const char* what = kind == 0 ? "K" : "V";
      EXPECT_GE(mean, bits == 4 ? 0.99 : 0.98) << what << " " << bits << "-bit mean";
      EXPECT_GE(cos.front(), bits == 4 ? 0.99 : 0.965) << what << " " << bits << "-bit min";
    }
  }
}

TEST(TurboQuantRealModel, AgreementWithStandardMemoryAndSaveLoad) {
  LARQL_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  auto fwd = std::make_shared<Forward>(model, 2);
  const auto& c = model->config();
  const auto tok = Tokenizer(model->source().vocabulary());
  auto ids = tok.encode(kText, true, false);
  ids.resize(200);
  const int steps = 64;
  std::vector<float> lg(static_cast<size_t>(c.vocab));
  auto logits = [&](const std::vector<float>& h) {
    fwd->logits(h.data(), 1, lg.data());
    return lg;
  };
  // Standard, greedy: the reference logits and the token stream both engines are fed.
  StandardEngine st(fwd, 0);
  std::vector<std::vector<float>> ref;
  std::vector<int32_t> fed;
  ref.push_back(logits(st.prefill(ids)));
  for (int s = 0; s < steps; ++s) {
    fed.push_back(static_cast<int32_t>(testing::argmax(ref.back())));
    ref.push_back(logits(st.decode_step(fed.back())));
  }
  const std::string state = temp_path("real.state");
  for (int bits : {4, 3}) {
    TurboQuantEngine tq(fwd, bits);
    double kl_sum = 0, kl_max = 0;
    int agree = 0;
    auto score = [&](size_t i, const std::vector<float>& l) {
      const double k = testing::kl_logits(ref[i], l);
      kl_sum += k;
      kl_max = std::max(kl_max, k);
      agree += testing::argmax(l) == testing::argmax(ref[i]);
    };
    score(0, logits(tq.prefill(ids)));
    std::vector<float> saved_next;
    const int my_steps = bits == 4 ? steps : steps / 2;  // 3-bit: reported on 32 steps (time)
    for (int s = 0; s < my_steps; ++s) {
      if (s == my_steps - 4) tq.save_state(state);
      const auto l = logits(tq.decode_step(fed[static_cast<size_t>(s)]));
      if (s == my_steps - 4) saved_next = l;
      score(static_cast<size_t>(s) + 1, l);
    }
    const int n = my_steps + 1;
    const EngineMemory m = tq.memory();
    // f16 bytes of the same rows: rows × kv_dim × 2 bytes × (K and V).
    int64_t rows = 0;
    for (int64_t li = 0; li < c.n_layers; ++li) {
      std::vector<float> k, v;
      int64_t first = 0;
      tq.decoded_rows(li, k, v, first);
      rows += static_cast<int64_t>(k.size()) / c.kv_dim();
      const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
      EXPECT_EQ(static_cast<int64_t>(k.size()) / c.kv_dim(), lc.sliding ? std::min<int64_t>(lc.window, tq.n_past()) : tq.n_past());
    }
    // The codes cost a fixed share of an f16 cache of the same rows; the exact window is a fixed
    // recent × kv_dim f32 K and V per layer on top (the first codec had no window; its bar on
    // the total is now the bar on the codes).
    const double f16 = static_cast<double>(rows * c.kv_dim() * 2 * 2);
    const size_t codes = static_cast<size_t>(rows) * c.n_kv_heads * tq.codec().bytes_per_vector() * 2;
    const size_t window = static_cast<size_t>(c.n_layers * tq.recent() * c.kv_dim() * 4 * 2);
    std::printf("[turbo] real model, %d-bit, %zu-token prompt + %d greedy steps: top-1 agreement %d/%d = %.3f, "
                "mean KL %.5f nats, max KL %.5f; K/V codes %zu bytes = %.4f x f16 (%.0f bytes) + exact window %zu\n",
                bits, ids.size(), my_steps, agree, n, double(agree) / n, kl_sum / n, kl_max, codes, codes / f16, f16,
                window);
    EXPECT_EQ(m.hot_bytes, codes + window);
    if (bits == 4) {
      EXPECT_GE(double(agree) / n, 0.8);
      EXPECT_LE(kl_sum / n, 0.1);
      EXPECT_LE(codes, 0.3 * f16);
    } else {
      EXPECT_GE(double(agree) / n, 0.6);
      EXPECT_LE(codes, 0.25 * f16);
    }
    // Save/load: a fresh engine continues with the same logits as never having stopped.
    TurboQuantEngine back(fwd, bits);
    back.load_state(state);
    EXPECT_EQ(back.n_past(), static_cast<int64_t>(ids.size()) + my_steps - 4);
    EXPECT_EQ(max_diff(logits(back.decode_step(fed[static_cast<size_t>(my_steps - 4)])), saved_next), 0.0);
    std::printf("[turbo] %d-bit state file: %ju bytes\n", bits, static_cast<uintmax_t>(std::filesystem::file_size(state)));
  }
  std::filesystem::remove(state);
}

TEST(TurboQuantRealModel, ChunkingIsExactAndTeacherForcedQuality) {
  // 600 tokens of real text (past the sliding window of 512 and the default chunk of 512): one prefill
  // (two chunks), a 300-token prefill then decode steps, and a decode of every token from BOS
  // leave bit-identical residuals. The token-by-token run is the honest quality measurement:
  // every position sees the quantised rows of all positions older than the exact window,
  // errors carried through the residual stream; KL and top-1 against standard's logits.
  LARQL_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  auto fwd = std::make_shared<Forward>(model, 2);
  const auto& c = model->config();
  const auto tok = Tokenizer(model->source().vocabulary());
  std::ifstream in(testing::source_dir() + "/tests/python/data/long_text_gpl3.txt");
  ASSERT_TRUE(in) << "tests/python/data/long_text_gpl3.txt";
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto ids = tok.encode(text, true, false);
  ASSERT_GE(ids.size(), 600u);
  ids.resize(600);
  const int64_t n = 600, half = 300;
  KvCache cache(c);
  std::vector<float> ref(static_cast<size_t>(n * c.hidden));
  fwd->forward(ids.data(), n, cache, ref.data());
  TurboQuantEngine every(fwd, 3), part(fwd, 3), whole(fwd, 3);
  std::vector<std::vector<float>> steps;
  std::vector<float> lr(static_cast<size_t>(c.vocab)), le(lr.size());
  double kl = 0;
  int agree = 0;
  for (int64_t p = 0; p < n; ++p) {
    steps.push_back(p == 0 ? every.prefill({ids[0]}) : every.decode_step(ids[static_cast<size_t>(p)]));
    fwd->logits(ref.data() + p * c.hidden, 1, lr.data());
    fwd->logits(steps.back().data(), 1, le.data());
    kl += testing::kl_logits(lr, le) / n;
    agree += testing::argmax(lr) == testing::argmax(le);
  }
  EXPECT_EQ(max_diff(whole.prefill(ids), steps.back()), 0.0) << "one prefill of 600 tokens";
  EXPECT_EQ(max_diff(part.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + half)), steps[half - 1]), 0.0);
  for (int64_t p = half; p < n; ++p)
    ASSERT_EQ(max_diff(part.decode_step(ids[static_cast<size_t>(p)]), steps[static_cast<size_t>(p)]), 0.0) << p;
  std::printf("[turbo] 3-bit, teacher-forced from BOS over 600 tokens of GPL-3: mean KL %.4f nats, top-1 %d/600\n",
              kl, agree);
  // Measured 0.050 nats, 528/600 (llama.cpp's own q4_0 cache, at 1.44x these bytes per token,
  // scores 0.139 nats at 1,024 tokens of the same text: docs/BENCHMARKS.md). The first codec:
  // 0.5-0.69 nats per 128-token bucket.
  EXPECT_LE(kl, 0.1);
  EXPECT_GE(agree, 480);
}


TEST(TurboQuantRealModel, GreedyContinuationsOfShortPromptsMatchStandard) {
  // Issue 8's instance: on 20 short prompts the first codec kept only 1/20 greedy continuations
  // (16 tokens) identical to standard's at 4 bits. Greedy identity is a noise-level measure on
  // this model: activations are quantised to 8 bits before every matmul, so a 1-ulp difference
  // in attention (here: the rotation and centring round differently from standard's dot
  // products) flips int8 roundings and moves logits by up to ~1 (docs/BENCHMARKS.md, parity:
  // llama.cpp with an f32 cache keeps 3/10 of its own f16-cache continuations). The floor is
  // therefore measured here: turbo-quant with every row in its exact window (recent larger than
  // the sequence: no row quantised, only the arithmetic differs). The codec may cost at most 3
  // continuations against that floor. Measured: 9/20 at 4 bits, floor 11/20.
  LARQL_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  auto fwd = std::make_shared<Forward>(model, 2);
  const auto& c = model->config();
  const auto tok = Tokenizer(model->source().vocabulary());
  const char* prompts[] = {
      "The capital of France is", "Once upon a time, in a small village by the sea,", "Water boils at",
      "The largest planet in the solar system is", "My favourite recipe for pancakes starts with",
      "In 1969, the first people to walk on the Moon were", "The quick brown fox", "To make a cup of tea, first",
      "The three primary colours are", "Photosynthesis is the process by which",
      "The train left the station at noon and", "A haiku is a short poem that", "def fibonacci(n):",
      "The French word for cat is", "Mount Everest is located in", "She opened the old wooden box and found",
      "The theory of relativity was developed by", "Bees are important because they",
      "The recipe calls for two cups of flour,", "The meeting was postponed because"};
  constexpr int kSteps = 16;
  std::vector<float> lg(static_cast<size_t>(c.vocab));
  auto greedy = [&](Engine& e, const std::vector<int32_t>& ids) {
    std::vector<int32_t> out;
    std::vector<float> h = e.prefill(ids);
    for (int s = 0; s < kSteps; ++s) {
      fwd->logits(h.data(), 1, lg.data());
      out.push_back(static_cast<int32_t>(testing::argmax(lg)));
      if (s + 1 < kSteps) h = e.decode_step(out.back());
    }
    return out;
  };
  int same = 0, floor = 0;
  for (const char* p : prompts) {
    const auto ids = tok.encode(p, true, false);
    StandardEngine st(fwd, 0);
    TurboQuantEngine tq(fwd, 4), exact(fwd, 4, 1024);
    const auto a = greedy(st, ids), b = greedy(tq, ids);
    same += a == b;
    floor += greedy(exact, ids) == a;
    if (a != b)
      std::printf("[turbo] 4-bit continuation of \"%s\" (%zu tokens) leaves standard's at step %td\n", p, ids.size(),
                  std::mismatch(a.begin(), a.end(), b.begin()).first - a.begin());
  }
  std::printf("[turbo] greedy 16-token continuations identical to standard: 4-bit %d/20, every row exact %d/20\n",
              same, floor);
  EXPECT_GE(same, floor - 3);
  EXPECT_GE(same, 5);
}

}  // namespace
}  // namespace larql
