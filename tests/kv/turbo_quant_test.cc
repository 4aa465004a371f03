// The turbo-quant engine and its codec (docs/engines.md "turbo-quant").
//
// Codec math is checked against hand-derived values (Walsh–Hadamard of small vectors, packed
// bytes) and the published Lloyd–Max optimum for a Gaussian (Max 1960, "Quantizing for minimum
// distortion"). Levels this build computes (unit Gaussian; printed by LloydMaxMatchesPublished):
//   3-bit: ±0.245094 ±0.756005 ±1.343909 ±2.151946          (distortion 0.034548)
//   4-bit: ±0.128395 ±0.388048 ±0.656759 ±0.942340 ±1.256231 ±1.618046 ±2.069017 ±2.732590
//                                                             (distortion 0.009501)
// The engine runs on a synthetic model here (transform, chunk invariance, decode reference,
// memory, errors, state files); the real-model contracts are in turbo_quant_real_model_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <utility>
#include <random>
#include <vector>

#include "kv/registry.h"
#include "kv/standard.h"
#include "kv/state_file.h"
#include "kv/turbo_codec.h"
#include "kv/turbo_quant.h"
#include "quant/cpu.h"
#include "model/model.h"
#include "testlib/paths.h"
#include "testlib/synthetic_model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "testlib/engine_testing.h"

namespace larql {
namespace {

using testing::make_synthetic_model;
using testing::SyntheticSpec;

using testing::expect_error;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("larql-tqtest-" + std::to_string(::getpid()) + "-" + name)).string();
}

using testing::cosine;

double max_diff(const std::vector<float>& a, const std::vector<float>& b) { return testing::max_abs_diff(a, b); }



// ---------------------------------------------------------------- codec math

TEST(TurboCodec, WalshHadamardByHand) {
  // H4 (Sylvester) = [[1,1,1,1],[1,-1,1,-1],[1,1,-1,-1],[1,-1,-1,1]]; H4·(1,2,3,4) = (10,-2,-4,0); /√4.
  float x[4] = {1, 2, 3, 4};
  turbo::wht(x, 4);
  const float want4[4] = {5, -1, -2, 0};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(x[i], want4[i], 1e-6) << i;
  // H8·(e0 + e7) = column 0 + column 7 = (1..1) + (1,-1,-1,1,-1,1,1,-1) = (2,0,0,2,0,2,2,0); /√8.
  float y[8] = {1, 0, 0, 0, 0, 0, 0, 1};
  turbo::wht(y, 8);
  const float s = 2 / std::sqrt(8.0f);
  const float want8[8] = {s, 0, 0, s, 0, s, s, 0};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[i], want8[i], 1e-6) << i;
  // Length 2: (a+b, a-b)/√2.
  float z[2] = {3, 1};
  turbo::wht(z, 2);
  EXPECT_NEAR(z[0], 4 / std::sqrt(2.0f), 1e-6);
  EXPECT_NEAR(z[1], 2 / std::sqrt(2.0f), 1e-6);
}

TEST(TurboCodec, RotationIsOrthonormalAndSelfInverse) {
  // The sign pattern: first 16 coordinates (1 = negated), printed for the record.
  std::string signs;
  int negated = 0;
  for (int i = 0; i < 256; ++i) {
    if (i < 16) signs += turbo::sign_negated(i) ? '1' : '0';
    negated += turbo::sign_negated(i);
  }
  std::printf("[turbo] sign pattern (first 16, 1 = negated): %s; %d of 256 negated\n", signs.c_str(), negated);
  EXPECT_GT(negated, 96);  // a fair coin: 128 ± 16 (2σ = 16)
  EXPECT_LT(negated, 160);
  // R = S·H·S/2 on length 4, by hand from the signs: R_ij = s_i s_j H_ij / 2.
  const int H4[4][4] = {{1, 1, 1, 1}, {1, -1, 1, -1}, {1, 1, -1, -1}, {1, -1, -1, 1}};
  float x[4] = {0.5f, -1, 2, 0.25f}, want[4] = {0, 0, 0, 0};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const float si = turbo::sign_negated(i) ? -1 : 1, sj = turbo::sign_negated(j) ? -1 : 1;
      want[i] += si * sj * H4[i][j] * x[j] / 2;
    }
  turbo::rotate(x, 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(x[i], want[i], 1e-6) << i;
  // D = 256: norms and dot products preserved; applying twice gives the input back.
  std::mt19937 rng(7);
  std::normal_distribution<float> n01;
  for (int rep = 0; rep < 10; ++rep) {
    std::vector<float> a(256), b(256);
    for (auto& v : a) v = n01(rng) * 3;
    for (auto& v : b) v = n01(rng);
    auto ra = a, rb = b;
    turbo::rotate(ra.data(), 256);
    turbo::rotate(rb.data(), 256);
    double dot = 0, rdot = 0, na = 0, nra = 0;
    for (int i = 0; i < 256; ++i) {
      dot += a[i] * b[i];
      rdot += ra[i] * rb[i];
      na += a[i] * a[i];
      nra += ra[i] * ra[i];
    }
    EXPECT_NEAR(nra, na, 1e-4 * na);
    EXPECT_NEAR(rdot, dot, 1e-3 * std::sqrt(na * 256));
    turbo::rotate(ra.data(), 256);
    for (int i = 0; i < 256; ++i) EXPECT_NEAR(ra[i], a[i], 1e-4) << i;
  }
}

TEST(TurboCodec, PackUnpackByHandAndRoundTrip) {
  // 4 bits: first index in the low nibble.
  const uint8_t i4[4] = {1, 2, 15, 0};
  uint8_t p4[2];
  turbo::pack_indices(i4, 4, 4, p4);
  EXPECT_EQ(p4[0], 0x21);
  EXPECT_EQ(p4[1], 0x0F);
  // 3 bits: eight indices per 24-bit little-endian word, index j at bits 3j..3j+2:
  // 1 | 2<<3 | 3<<6 | 4<<9 | 5<<12 | 6<<15 | 7<<18 = 0x1F58D1.
  const uint8_t i3[8] = {1, 2, 3, 4, 5, 6, 7, 0};
  uint8_t p3[3];
  turbo::pack_indices(i3, 8, 3, p3);
  EXPECT_EQ(p3[0], 0xD1);
  EXPECT_EQ(p3[1], 0x58);
  EXPECT_EQ(p3[2], 0x1F);
  EXPECT_EQ(turbo::packed_bytes(256, 4), 128u);
  EXPECT_EQ(turbo::packed_bytes(256, 3), 96u);
  EXPECT_EQ(turbo::packed_bytes(13, 3), 5u);
  std::mt19937 rng(3);
  for (int bits : {3, 4})
    for (int64_t n : {1, 7, 13, 256}) {
      std::vector<uint8_t> idx(static_cast<size_t>(n)), back(idx.size());
      for (auto& v : idx) v = static_cast<uint8_t>(rng() % (1u << bits));
      std::vector<uint8_t> packed(turbo::packed_bytes(n, bits));
      turbo::pack_indices(idx.data(), n, bits, packed.data());
      turbo::unpack_indices(packed.data(), n, bits, back.data());
      EXPECT_EQ(idx, back) << bits << " bits, n " << n;
    }
}

TEST(TurboCodec, LloydMaxMatchesPublished) {
  const std::vector<double> pub3 = {0.2451, 0.7560, 1.3439, 2.1520};
  const std::vector<double> pub4 = {0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6180, 2.0690, 2.7326};
  for (int bits : {3, 4}) {
    const turbo::Codebook cb = turbo::lloyd_max_gaussian(bits);
    const auto& pub = bits == 3 ? pub3 : pub4;
    const size_t n = size_t{1} << bits;
    ASSERT_EQ(cb.levels.size(), n);
    ASSERT_EQ(cb.boundaries.size(), n - 1);
    std::printf("[turbo] %d-bit Lloyd-Max levels (N(0,1)):", bits);
    for (size_t i = n / 2; i < n; ++i) std::printf(" ±%.6f", cb.levels[i]);
    // Distortion E[(X - Q(X))²] by numerical integration (midpoint rule on [-10, 10]).
    double dist = 0;
    const double h = 1e-4;
    for (double x = -10 + h / 2; x < 10; x += h) {
      const size_t k = static_cast<size_t>(std::upper_bound(cb.boundaries.begin(), cb.boundaries.end(), x) - cb.boundaries.begin());
      dist += (x - cb.levels[k]) * (x - cb.levels[k]) * std::exp(-x * x / 2) / std::sqrt(2 * M_PI) * h;
    }
    std::printf("  (distortion %.6f)\n", dist);
    EXPECT_NEAR(dist, bits == 3 ? 0.03454 : 0.009497, 2e-5);  // Max (1960), table I
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(cb.levels[i], -cb.levels[n - 1 - i], 1e-9) << "symmetric " << i;
      if (i > 0) {
        EXPECT_LT(cb.levels[i - 1], cb.levels[i]) << "increasing " << i;
      }
      if (i + 1 < n) {
        EXPECT_DOUBLE_EQ(cb.boundaries[i], 0.5 * (cb.levels[i] + cb.levels[i + 1]));
      }
    }
    for (size_t i = 0; i < pub.size(); ++i) {
      EXPECT_NEAR(cb.levels[n / 2 + i], pub[i], 6e-4) << bits << " bits, level " << i;
    }
    // The codec's levels are these scaled to N(0, 1/D).
    const turbo::Codec codec(256, bits);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(codec.levels()[i], cb.levels[i] / 16, 1e-7);
    }
    EXPECT_EQ(codec.bytes_per_vector(), bits == 4 ? 132u : 100u);
  }
  EXPECT_THROW(turbo::Codec(256, 5), Error);
  EXPECT_THROW(turbo::Codec(100, 4), Error);
}

TEST(TurboCodec, SimdDecodeEqualsTheScalarLoop) {
  // Every code pattern (all 256 byte values, in every position) and random vectors, 4 and 3
  // bits: the vectorised decoders are table lookups like the scalar loops, so they agree bit for bit.
  std::mt19937 rng(5);
  std::normal_distribution<float> n01;
  for (const auto& [d, bits] : {std::pair<int64_t, int>{16, 4}, {64, 4}, {256, 4}, {8, 3}, {64, 3}, {256, 3}}) {
    turbo::Codec fast(d, bits), slow(d, bits);
    ASSERT_STREQ(fast.decode_variant(), quant::active_isa() >= quant::Isa::AVX2 ? "avx2" : "scalar");
    slow.set_simd(false);
    std::vector<uint8_t> enc(fast.bytes_per_vector());
    std::vector<float> a(static_cast<size_t>(d)), b(static_cast<size_t>(d)), x(static_cast<size_t>(d));
    for (int rep = 0; rep < 64; ++rep) {
      if (rep < 32) {
        const float gain = 0.5f + rep;
        std::memcpy(enc.data(), &gain, 4);
        for (size_t i = 4; i < enc.size(); ++i) enc[i] = static_cast<uint8_t>((i * 37 + rep * 11) & 255);
      } else {
        for (auto& v : x) v = n01(rng);
        fast.encode(x.data(), enc.data());
      }
      fast.decode_rotated(enc.data(), a.data());
      slow.decode_rotated(enc.data(), b.data());
      for (int64_t i = 0; i < d; ++i)
        ASSERT_EQ(a[static_cast<size_t>(i)], b[static_cast<size_t>(i)]) << d << " " << bits << " " << rep << " " << i;
    }
  }
}

TEST(TurboCodec, RandomVectorsHaveTheGaussianDistortion) {
  // For a random direction the rotated coordinates are ~N(0, 1/D), so the relative squared error
  // ‖x − x̂‖²/‖x‖² is about the Lloyd-Max distortion (0.0095 / 0.0345) or a little below it
  // (the encoder's scale search only ever picks a closer direction).
  std::mt19937 rng(11);
  std::normal_distribution<float> n01;
  for (int bits : {3, 4}) {
    const turbo::Codec codec(256, bits);
    std::vector<uint8_t> enc(codec.bytes_per_vector());
    double err = 0, min_cos = 1;
    const int reps = 200;
    for (int r = 0; r < reps; ++r) {
      std::vector<float> x(256), y(256), yr(256);
      for (auto& v : x) v = n01(rng) * 5;
      codec.encode(x.data(), enc.data());
      codec.decode(enc.data(), y.data());
      codec.decode_rotated(enc.data(), yr.data());
      double e = 0, nn = 0;
      for (int i = 0; i < 256; ++i) {
        e += (x[i] - y[i]) * (x[i] - y[i]);
        nn += x[i] * x[i];
      }
      err += e / nn / reps;
      min_cos = std::min(min_cos, cosine(x.data(), y.data(), 256));
      // The stored gain is the least-squares scale of the chosen levels: the error x - y is
      // orthogonal to y, and ‖y‖ is within the distortion of ‖x‖.
      double yy = 0;
      for (int i = 0; i < 256; ++i) yy += static_cast<double>(y[i]) * y[i];
      EXPECT_NEAR(std::sqrt(yy), std::sqrt(nn), 0.05 * std::sqrt(nn));
      double ortho = 0;
      for (int i = 0; i < 256; ++i) ortho += (x[i] - y[i]) * static_cast<double>(y[i]);
      EXPECT_NEAR(ortho, 0.0, 1e-4 * nn);
      turbo::rotate(yr.data(), 256);  // decode = R · decode_rotated
      for (int i = 0; i < 256; ++i) EXPECT_NEAR(yr[i], y[i], 1e-5);
    }
    std::printf("[turbo] %d-bit random vectors: relative squared error %.5f, min cosine %.5f\n", bits, err, min_cos);
    EXPECT_LE(err, bits == 3 ? 0.0345 : 0.0095);
    EXPECT_GE(err, bits == 3 ? 0.028 : 0.0078);
    EXPECT_GE(min_cos, bits == 3 ? 0.97 : 0.99);
  }
  // Zero vector: norm 0, decodes to zeros.
  const turbo::Codec codec(16, 4);
  std::vector<float> z(16, 0.0f), out(16, 1.0f);
  std::vector<uint8_t> enc(codec.bytes_per_vector());
  codec.encode(z.data(), enc.data());
  codec.decode(enc.data(), out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

// ---------------------------------------------------------------- registry

TEST(TurboQuantRegistry, AliasesBitsAndPresets) {
  for (const char* n : {"turbo-quant", "turbo_quant", "turboquant"}) {
    const EngineSpec s = parse_engine_spec(n);
    EXPECT_EQ(s.name, "turbo-quant") << n;
    EXPECT_TRUE(s.params.empty()) << n;
  }
  EXPECT_EQ(parse_engine_spec("tq3").to_string(), "turbo-quant:bits=3");
  EXPECT_EQ(parse_engine_spec("tq4").to_string(), "turbo-quant:bits=4");
  EXPECT_EQ(parse_engine_spec("tq3:bits=3").to_string(), "turbo-quant:bits=3");
  EXPECT_EQ(parse_engine_spec("turbo-quant:bits=3").get_int("bits", 4), 3);
  EXPECT_EQ(parse_engine_spec("turboquant").get_int("bits", 4), 4);
  const auto bad = testing::expect_bad_spec;
  bad("turbo-quant:bits=5", {"bits", "5", "3, 4"});
  bad("tq4:bits=2", {"bits", "3, 4"});
  bad("tq3:bits=4", {"tq3", "bits=3", "bits=4"});
  bad("turbo-quant:window=8", {"window", "bits", "recent"});
  EXPECT_EQ(parse_engine_spec("tq3:recent=0").to_string(), "turbo-quant:bits=3,recent=0");
  EXPECT_EQ(parse_engine_spec("turbo-quant:recent=32").get_int("recent", 16), 32);
  bad("turbo-quant:recent=-1", {"recent", ">= 0"});
  bad("turbo-quant:recent=x", {"recent"});
  // A list: tq3 then standard.
  const auto list = parse_engine_list("tq3,standard;tq4");
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].to_string(), "turbo-quant:bits=3");
  EXPECT_EQ(list[1].name, "standard");
  EXPECT_EQ(list[2].to_string(), "turbo-quant:bits=4");
}

// ---------------------------------------------------------------- engine on a synthetic model

const std::vector<int32_t> kSeq = {2, 270, 277, 7, 100, 271, 5, 4, 262, 200, 150, 265};

struct Fixture {
  explicit Fixture(SyntheticSpec s = {}) : sm(make_synthetic_model(s)), model(Model::load(sm->path)),
                                           fwd(std::make_shared<Forward>(model, 2)) {}
  std::vector<float> logits(const std::vector<float>& h) {
    std::vector<float> lg(static_cast<size_t>(model->config().vocab));
    fwd->logits(h.data(), 1, lg.data());
    return lg;
  }
  std::unique_ptr<testing::SyntheticModel> sm;
  std::shared_ptr<Model> model;
  std::shared_ptr<Forward> fwd;
};

/// The key transform from its definition (turbo_quant.h), computed here from the model's weights
/// and a standard forward of BOS: a_i = ((gq_i² + gq_j²) / (gk_i² + gk_j²))^(1/4), c = K[BOS].
struct KeyTransform {
  std::vector<std::vector<float>> a, c;
};
KeyTransform expected_transform(Fixture& fx) {
  const auto& cfg = fx.model->config();
  const int64_t d = cfg.head_dim, half = d / 2;
  KeyTransform t;
  for (int64_t li = 0; li < cfg.n_layers; ++li) {
    const auto& w = fx.model->weights().layers[static_cast<size_t>(li)];
    std::vector<float> a(static_cast<size_t>(d));
    for (int64_t i = 0; i < d; ++i) {
      const int64_t j = i < half ? i + half : i - half;
      const double q2 = double(w.q_norm[i]) * w.q_norm[i] + double(w.q_norm[j]) * w.q_norm[j];
      const double k2 = double(w.k_norm[i]) * w.k_norm[i] + double(w.k_norm[j]) * w.k_norm[j];
      a[static_cast<size_t>(i)] = static_cast<float>(std::pow(q2 / k2, 0.25));
    }
    t.a.push_back(a);
  }
  KvCache cache(cfg);
  std::vector<float> x(static_cast<size_t>(cfg.hidden));
  const int32_t bos = 2;  // the synthetic vocabulary's <bos>
  fx.fwd->forward(&bos, 1, cache, x.data());
  for (int64_t li = 0; li < cfg.n_layers; ++li)
    t.c.emplace_back(cache.layer(li).k_at(0), cache.layer(li).k_at(0) + cfg.kv_dim());
  return t;
}

TEST(TurboQuantEngine, KeyTransformAndStoredRows) {
  // The transform matches its definition; a stored K row is decode(encode((k − c) ⊙ a)) / a + c
  // (built here from the public codec), a V row decode(encode(v)); layer 0's K/V (which depend
  // on the embedding alone) are standard's, so its stored rows are their round trips. The BOS
  // row's K is the centre itself and is stored exactly.
  Fixture fx;
  const auto& c = fx.model->config();
  const KeyTransform want = expected_transform(fx);
  KvCache cache(c);
  std::vector<float> x(kSeq.size() * c.hidden);
  fx.fwd->forward(kSeq.data(), static_cast<int64_t>(kSeq.size()), cache, x.data());
  for (int bits : {3, 4}) {
    TurboQuantEngine e(fx.fwd, bits, 0);
    for (int64_t li = 0; li < c.n_layers; ++li)
      for (int64_t i = 0; i < c.head_dim; ++i) {
        EXPECT_NEAR(e.key_scale(li)[i], want.a[li][i], 1e-5 * want.a[li][i]) << li << " " << i;
        EXPECT_EQ(e.key_centre(li)[i], want.c[li][i]) << li << " " << i;
      }
    e.prefill(kSeq);
    const auto& codec = e.codec();
    std::vector<uint8_t> enc(codec.bytes_per_vector());
    std::vector<float> t(static_cast<size_t>(c.head_dim)), k, v, rt(static_cast<size_t>(c.kv_dim()));
    int64_t first = -1;
    e.decoded_rows(0, k, v, first);
    const LayerConfig& lc = c.layers[0];
    ASSERT_EQ(first, lc.sliding ? 12 - lc.window : 0);
    for (int64_t p = first; p < 12; ++p) {
      const float* ks = cache.layer(0).k_at(p);
      const float* vs = cache.layer(0).v_at(p);
      for (int64_t i = 0; i < c.head_dim; ++i) t[i] = (ks[i] - want.c[0][i]) * want.a[0][i];
      codec.encode(t.data(), enc.data());
      codec.decode(enc.data(), t.data());
      const float* got = k.data() + (p - first) * c.kv_dim();
      for (int64_t i = 0; i < c.head_dim; ++i)
        ASSERT_NEAR(got[i], t[i] / want.a[0][i] + want.c[0][i], 1e-5) << "K pos " << p << " " << i;
      codec.encode(vs, enc.data());
      codec.decode(enc.data(), t.data());
      for (int64_t i = 0; i < c.head_dim; ++i)
        ASSERT_NEAR(v[(p - first) * c.kv_dim() + i], t[i], 1e-5) << "V pos " << p << " " << i;
      e.round_trip(0, true, ks, rt.data());
      for (int64_t i = 0; i < c.head_dim; ++i) ASSERT_NEAR(rt[i], got[i], 1e-6);
    }
    TurboQuantEngine b(fx.fwd, bits);  // BOS attends to itself exactly: its K is c at every layer
    b.prefill({2, 100, 101});
    for (int64_t li = 0; li < c.n_layers; ++li) {
      b.decoded_rows(li, k, v, first);
      ASSERT_EQ(first, 0);
      for (int64_t i = 0; i < c.kv_dim(); ++i) EXPECT_NEAR(k[i], want.c[li][i], 1e-4 * (1 + std::abs(want.c[li][i]))) << li;
    }
  }
}

TEST(TurboQuantEngine, ChunkingGivesIdenticalLogits) {
  // A lossy engine quantises before it attends, in prefill as in decode: one prefill, a
  // prefill of a prefix then decode steps, and decoding every token give the same logits bit
  // for bit (bound 0), whatever the exact window. On the first codec a prefill attended to its
  // own chunk exactly and decode to its own row only, so these differed.
  SyntheticSpec s;
  s.context_length = 64;
  Fixture fx(s);
  std::vector<int32_t> seq;
  for (int i = 0; i < 40; ++i) seq.push_back(i == 0 ? 2 : 7 + (i * 37) % 250);
  for (int bits : {3, 4})
    for (int64_t recent : {int64_t{0}, int64_t{3}, int64_t{16}}) {
      const std::string what = std::to_string(bits) + "-bit recent=" + std::to_string(recent);
      TurboQuantEngine all(fx.fwd, bits, recent), part(fx.fwd, bits, recent), one(fx.fwd, bits, recent);
      const auto whole = fx.logits(all.prefill(seq));
      std::vector<std::vector<float>> stepped;
      stepped.push_back(fx.logits(one.prefill({seq[0]})));
      for (size_t t = 1; t < seq.size(); ++t) stepped.push_back(fx.logits(one.decode_step(seq[t])));
      const size_t k = 17;
      const auto first = fx.logits(part.prefill(std::vector<int32_t>(seq.begin(), seq.begin() + k)));
      EXPECT_EQ(max_diff(first, stepped[k - 1]), 0.0) << what << " prefix";
      for (size_t t = k; t < seq.size(); ++t)
        ASSERT_EQ(max_diff(fx.logits(part.decode_step(seq[t])), stepped[t]), 0.0) << what << " position " << t;
      EXPECT_EQ(max_diff(whole, stepped.back()), 0.0) << what << " whole";
      std::vector<float> ka, va, kb, vb;
      int64_t fa = 0, fb = 0;
      for (int64_t li = 0; li < fx.model->config().n_layers; ++li) {
        all.decoded_rows(li, ka, va, fa);
        one.decoded_rows(li, kb, vb, fb);
        EXPECT_EQ(fa, fb);
        EXPECT_EQ(ka, kb) << what << " layer " << li;
        EXPECT_EQ(va, vb) << what << " layer " << li;
      }
    }
}

TEST(TurboQuantEngine, DecodeStepIsAttentionOverDecodedAndRecentRows) {
  // Reference from Forward's primitives, in the original domain: each layer's new row attends
  // (Forward::attend) to the decoded rows older than the exact window, the window's exact rows
  // and its own row — exact when recent > 0, its codec round trip when recent = 0.
  Fixture fx;
  const auto& c = fx.model->config();
  for (int bits : {3, 4})
    for (int64_t recent : {int64_t{0}, int64_t{3}}) {
      TurboQuantEngine e(fx.fwd, bits, recent);
      e.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 9));
      for (int step = 0; step < 3; ++step) {
        const int64_t pos = e.n_past();
        std::vector<std::vector<float>> dk(c.n_layers), dv(c.n_layers), ek(c.n_layers), ev(c.n_layers);
        std::vector<int64_t> first(c.n_layers), efirst(c.n_layers);
        for (int64_t li = 0; li < c.n_layers; ++li) {
          e.decoded_rows(li, dk[li], dv[li], first[li]);
          e.recent_rows(li, ek[li], ev[li], efirst[li]);
        }
        const int32_t tok = kSeq[static_cast<size_t>(9 + step)];
        std::vector<float> x(c.hidden), q(c.q_dim()), k(c.kv_dim()), v(c.kv_dim()), attn(c.q_dim());
        fx.fwd->embed(&tok, 1, x.data());
        for (int64_t li = 0; li < c.n_layers; ++li) {
          fx.fwd->qkv(li, x.data(), 1, pos, q.data(), k.data(), v.data());
          const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
          const int64_t r = lc.sliding ? std::min(recent, lc.window) : recent;
          // Rows first[li] .. pos-1: decoded below pos - r + 1, exact from there.
          std::vector<float> kk, vv;
          for (int64_t p = first[li]; p < pos; ++p) {
            const bool exact = p >= pos - r + 1;
            const auto& sk = exact ? ek[li] : dk[li];
            const auto& sv = exact ? ev[li] : dv[li];
            const int64_t row = exact ? p - efirst[li] : p - first[li];
            ASSERT_GE(row, 0) << "layer " << li << " pos " << p;
            kk.insert(kk.end(), sk.begin() + row * c.kv_dim(), sk.begin() + (row + 1) * c.kv_dim());
            vv.insert(vv.end(), sv.begin() + row * c.kv_dim(), sv.begin() + (row + 1) * c.kv_dim());
          }
          std::vector<float> ko = k, vo = v;
          if (r == 0) {
            e.round_trip(li, true, k.data(), ko.data());
            e.round_trip(li, false, v.data(), vo.data());
          }
          kk.insert(kk.end(), ko.begin(), ko.end());
          vv.insert(vv.end(), vo.begin(), vo.end());
          const int64_t rows = static_cast<int64_t>(kk.size()) / c.kv_dim();
          fx.fwd->attend(li, q.data(), 1, pos, KvSpan{kk.data(), vv.data(), first[li], rows}, attn.data());
          fx.fwd->finish_layer(li, attn.data(), 1, x.data());
        }
        const auto got = e.decode_step(tok);
        EXPECT_LE(max_diff(fx.logits(x), fx.logits(got)), 1e-3) << bits << "-bit recent " << recent << " step " << step;
      }
    }
}

TEST(TurboQuantEngine, DecodeAttendsToTheQuantisedRows) {
  // Decoding is deterministic (two engines agree exactly), differs from standard (the quantised
  // history is really in the loop: an exact window of 2 rows on a 12-token sequence), and memory
  // after prefill + decode equals one prefill's.
  Fixture fx;
  StandardEngine st(fx.fwd, 0);
  TurboQuantEngine a(fx.fwd, 4, 2), b(fx.fwd, 4, 2), one(fx.fwd, 4, 2);
  st.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 3));
  a.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 3));
  b.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 3));
  double worst = 0;
  for (size_t t = 3; t < kSeq.size(); ++t) {
    const auto la = fx.logits(a.decode_step(kSeq[t]));
    EXPECT_EQ(max_diff(la, fx.logits(b.decode_step(kSeq[t]))), 0.0) << t;
    worst = std::max(worst, max_diff(la, fx.logits(st.decode_step(kSeq[t]))));
  }
  EXPECT_GT(worst, 1e-4);
  one.prefill(kSeq);
  EXPECT_EQ(a.n_past(), 12);
  EXPECT_EQ(a.memory().hot_bytes, one.memory().hot_bytes);
}

TEST(TurboQuantEngine, MemoryCountsLogicalRows) {
  Fixture fx;
  const auto& c = fx.model->config();  // 7 layers, 6 sliding (window 4), kv_dim 16, one kv head
  ASSERT_EQ(c.n_layers, 7);
  for (int bits : {3, 4})
    for (int64_t recent : {int64_t{0}, int64_t{3}, int64_t{16}}) {
      TurboQuantEngine e(fx.fwd, bits, recent);
      EXPECT_EQ(e.memory().hot_bytes, 0u);
      e.prefill(kSeq);
      const size_t per_vec = 4 + static_cast<size_t>(16 * bits / 8);  // 12 or 10 bytes
      // Codes: 6 sliding layers × 4 rows + 12 rows; exact f32 rows: min(recent, 4) per sliding
      // layer and min(recent, 12) on the global one, 16 floats each.
      const size_t exact = static_cast<size_t>(6 * std::min<int64_t>(recent, 4) + std::min<int64_t>(recent, 12));
      EXPECT_EQ(e.memory().hot_bytes, (6 * 4 + 12) * per_vec * 2 + exact * 16 * 4 * 2) << bits << " " << recent;
      EXPECT_EQ(e.memory().cold_bytes, 0u);
      e.prefill({2, 100});
      EXPECT_EQ(e.memory().hot_bytes, 7 * 2 * per_vec * 2 + 7 * static_cast<size_t>(std::min<int64_t>(recent, 2)) * 16 * 4 * 2);
    }
}

TEST(TurboQuantEngine, Errors) {
  SyntheticSpec s;
  s.context_length = 8;
  Fixture fx(s);
  TurboQuantEngine e(fx.fwd, 4);
  expect_error(ErrorKind::InvariantViolation, [&] { e.decode_step(5); }, "decode before prefill");
  expect_error(ErrorKind::InvariantViolation, [&] { e.save_state(temp_path("never.state")); }, "save before prefill");
  expect_error(ErrorKind::EmptyPrompt, [&] { e.prefill({}); });
  expect_error(ErrorKind::ContextOverflow, [&] { e.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 9)); });
  expect_error(ErrorKind::InvariantViolation, [&] { e.decode_step(5); }, "after a failed prefill");
  e.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 7));
  e.decode_step(5);
  expect_error(ErrorKind::ContextOverflow, [&] { e.decode_step(5); });
  expect_error(ErrorKind::InvalidArgument, [&] { TurboQuantEngine bad(fx.fwd, 5); });
  expect_error(ErrorKind::InvalidArgument, [&] { TurboQuantEngine bad(fx.fwd, 4, -1); });
  SyntheticSpec odd;
  odd.head_dim = 12;  // not a power of two: the rotation cannot serve it
  odd.hidden = 48;
  Fixture fo(odd);
  expect_error(ErrorKind::BackendUnavailable, [&] { TurboQuantEngine bad(fo.fwd, 4); });
  // Through the registry.
  auto made = make_engine(parse_engine_spec("tq3"), fx.fwd);
  EXPECT_EQ(made->info().name, "turbo-quant");
  EXPECT_EQ(made->info().config, "bits=3");
  EXPECT_EQ(make_engine(parse_engine_spec("turbo-quant"), fx.fwd)->info().config, "bits=4");
  EXPECT_EQ(make_engine(parse_engine_spec("tq4:recent=0"), fx.fwd)->info().config, "bits=4,recent=0");
}

TEST(TurboQuantEngine, SaveLoadContinuesAndRefusesForeignState) {
  Fixture fx;
  const std::string path = temp_path("tq.state"), other = temp_path("other.state");
  for (int bits : {3, 4}) {
    TurboQuantEngine a(fx.fwd, bits);
    a.prefill(std::vector<int32_t>(kSeq.begin(), kSeq.begin() + 7));
    a.save_state(path);
    auto model2 = Model::load(fx.sm->path);
    auto fwd2 = std::make_shared<Forward>(model2, 1);
    TurboQuantEngine b(fwd2, bits);
    b.prefill({2, 100});  // replaced by the load
    b.load_state(path);
    EXPECT_EQ(b.n_past(), 7);
    EXPECT_EQ(b.memory().hot_bytes, a.memory().hot_bytes);
    std::vector<float> lb(static_cast<size_t>(fx.sm->vocab));
    for (size_t t = 7; t < kSeq.size(); ++t) {
      const auto la = fx.logits(a.decode_step(kSeq[t]));
      const auto hb = b.decode_step(kSeq[t]);
      fwd2->logits(hb.data(), 1, lb.data());
      EXPECT_EQ(max_diff(la, lb), 0.0) << "position " << t;
    }
  }
  // Refusals: the other bit width, the standard engine's file, another model's file.
  TurboQuantEngine t3(fx.fwd, 3);
  expect_error(ErrorKind::InvalidArgument, [&] { t3.load_state(path); }, "4-bit state into 3-bit");  // path has bits=4
  StandardEngine st(fx.fwd, 0);
  st.prefill({2, 100, 101});
  st.save_state(other);
  expect_error(ErrorKind::InvalidArgument, [&] { t3.load_state(other); }, "standard's file");
  expect_error(ErrorKind::InvalidArgument, [&] { st.load_state(path); }, "standard loading turbo's file");
  SyntheticSpec s2;
  s2.seed = 2;
  Fixture fy(s2);
  TurboQuantEngine y(fy.fwd, 4);
  y.prefill({2, 100, 101});
  y.save_state(other);
  TurboQuantEngine x4(fx.fwd, 4);
  expect_error(ErrorKind::InvalidArgument, [&] { x4.load_state(other); }, "another model");
  expect_error(ErrorKind::InvariantViolation, [&] { x4.decode_step(5); }, "still unstarted");
  // The first codec's payload (no version word: the bit width came first) and another exact
  // window are refused by name.
  {
    StateWriter w(other, {"turbo-quant", "bits=4", fx.model->fingerprint(), 3, {}});
    for (uint64_t v : {4, 16, 1}) w.u64(v);
    w.close();
    expect_error(ErrorKind::InvariantViolation, [&] { x4.load_state(other); }, "first codec's payload");
    TurboQuantEngine r3(fx.fwd, 4, 3);
    r3.prefill({2, 100, 101});
    r3.save_state(other);
    expect_error(ErrorKind::InvalidArgument, [&] { x4.load_state(other); }, "recent=3 into recent=16");
  }
  // Truncated files are Format errors.
  std::vector<char> bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  for (size_t keep : {size_t{30}, bytes.size() / 2, bytes.size() - 1}) {
    std::ofstream out(other, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(keep));
    out.close();
    expect_error(ErrorKind::Format, [&] { x4.load_state(other); }, "truncated to " + std::to_string(keep));
  }
  std::filesystem::remove(path);
  std::filesystem::remove(other);
}

}  // namespace
}  // namespace larql
