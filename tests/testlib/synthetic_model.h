// A tiny Gemma-3-shaped model written with the project's own GGUF writer, for fast unit tests.
// Header-only. The raw f32 weights are returned with the file so a test can run an independent
// reference forward pass on exactly the same numbers.
//
// Shape (defaults): 7 layers (layer 5 is global under Gemma 3's every-6th rule, the others slide),
// hidden 64, ffn 128, 4 query heads / 1 KV head, head_dim 16, sliding window 4, vocabulary of
// 6 specials + 256 byte tokens + a few words.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "quant/quant.h"
#include "util/dtype.h"

namespace larql::testing {

struct SyntheticSpec {
  int64_t n_layers = 7;
  int64_t hidden = 64;
  int64_t ffn = 128;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 1;
  int64_t head_dim = 16;
  int64_t sliding_window = 4;
  int64_t context_length = 64;
  float norm_eps = 1e-6f;
  double rope_global = 1e6;  ///< gemma3.rope.freq_base (local base is the family default 10000)
  uint64_t seed = 1;
  DType matrix_type = DType::F32;  ///< F32 / F16 / Q8_0 (hidden, ffn, q_dim multiples of 32)
  float embed_std = 0.5f;
  /// Make the tied lm_head row of <eos> dominate every logit: every embedding row gets +C in
  /// dimension 0 (so the final residual's dimension 0 is large and positive), and <eos>'s row
  /// gets +3C there.
  bool force_eos = false;
};

/// Weights as f32, row-major [out, in] for matrices (before any quantisation).
struct SyntheticLayer {
  std::vector<float> attn_norm, wq, wk, wv, q_norm, k_norm, wo, post_attn_norm, ffn_norm, w_gate, w_up,
      w_down, post_ffn_norm;
};

struct SyntheticWeights {
  std::vector<float> token_embd;  ///< [vocab, hidden]
  std::vector<float> output_norm;
  std::vector<SyntheticLayer> layers;
};

/// The vocabulary: ids 0..5 are <pad>, <eos>, <bos>, <unk>, <start_of_turn>, <end_of_turn>;
/// 6..261 are <0x00>..<0xFF>; then words.
inline std::vector<std::string> synthetic_words() {
  const std::string sp = "\xE2\x96\x81";
  return {sp, sp + "hello", sp + "world", sp + "the", "hello", "world", "ab", "cd", "a", "b", "c", "d",
          sp + "cat", sp + "dog", "!", "."};
}
inline constexpr int32_t kSynPad = 0, kSynEos = 1, kSynBos = 2, kSynUnk = 3, kSynSot = 4, kSynEot = 5;
inline constexpr int32_t kSynFirstByte = 6;

class SyntheticModel {
 public:
  SyntheticModel() = default;
  SyntheticModel(const SyntheticModel&) = delete;
  SyntheticModel& operator=(const SyntheticModel&) = delete;
  ~SyntheticModel() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove(path, ec);
  }
  std::string path;
  SyntheticSpec spec;
  SyntheticWeights w;
  int64_t vocab = 0;
  std::vector<std::string> tokens;
};

inline std::unique_ptr<SyntheticModel> make_synthetic_model(const SyntheticSpec& spec = {}) {
  auto m = std::make_unique<SyntheticModel>();
  m->spec = spec;
  const int64_t H = spec.hidden, F = spec.ffn, hd = spec.head_dim;
  const int64_t qd = spec.n_heads * hd, kvd = spec.n_kv_heads * hd;

  // Vocabulary.
  std::vector<std::string>& tok = m->tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (const char* s : {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"}) {
    tok.push_back(s);
    scores.push_back(0);
    types.push_back(std::string(s) == "<unk>" ? 2 : 3);  // UNKNOWN / CONTROL
  }
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tok.push_back(buf);
    scores.push_back(0);
    types.push_back(6);  // BYTE
  }
  float score = -1;
  for (const auto& wd : synthetic_words()) {
    tok.push_back(wd);
    scores.push_back(score);
    score -= 0.5f;
    types.push_back(1);  // NORMAL
  }
  m->vocab = static_cast<int64_t>(tok.size());
  const int64_t V = m->vocab;

  // Weights.
  std::mt19937_64 rng(spec.seed);
  auto normal = [&](size_t n, double std) {
    std::normal_distribution<double> d(0.0, std);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(d(rng));
    return v;
  };
  auto norm_w = [&](size_t n) {
    std::uniform_real_distribution<double> d(0.8, 1.2);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(d(rng));
    return v;
  };
  SyntheticWeights& w = m->w;
  w.token_embd = normal(static_cast<size_t>(V * H), spec.embed_std);
  if (spec.force_eos) {
    const float C = 50.0f;
    for (int64_t t = 0; t < V; ++t) w.token_embd[static_cast<size_t>(t * H)] += C;
    w.token_embd[static_cast<size_t>(kSynEos * H)] += 3 * C;
  }
  w.output_norm = norm_w(static_cast<size_t>(H));
  for (int64_t l = 0; l < spec.n_layers; ++l) {
    SyntheticLayer L;
    L.attn_norm = norm_w(H);
    L.wq = normal(static_cast<size_t>(qd * H), 1.0 / std::sqrt(double(H)));
    L.wk = normal(static_cast<size_t>(kvd * H), 1.0 / std::sqrt(double(H)));
    L.wv = normal(static_cast<size_t>(kvd * H), 1.0 / std::sqrt(double(H)));
    L.q_norm = norm_w(hd);
    L.k_norm = norm_w(hd);
    L.wo = normal(static_cast<size_t>(H * qd), 1.0 / std::sqrt(double(qd)));
    L.post_attn_norm = norm_w(H);
    L.ffn_norm = norm_w(H);
    L.w_gate = normal(static_cast<size_t>(F * H), 1.0 / std::sqrt(double(H)));
    L.w_up = normal(static_cast<size_t>(F * H), 1.0 / std::sqrt(double(H)));
    L.w_down = normal(static_cast<size_t>(H * F), 1.0 / std::sqrt(double(F)));
    L.post_ffn_norm = norm_w(H);
    w.layers.push_back(std::move(L));
  }

  // GGUF.
  GgufWriter g;
  const std::string a = "gemma3.";
  g.set("general.architecture", GgufValue::str("gemma3"));
  g.set("general.name", GgufValue::str("synthetic-gemma3-seed" + std::to_string(spec.seed)));
  g.set(a + "block_count", GgufValue::u32(static_cast<uint32_t>(spec.n_layers)));
  g.set(a + "embedding_length", GgufValue::u32(static_cast<uint32_t>(H)));
  g.set(a + "feed_forward_length", GgufValue::u32(static_cast<uint32_t>(F)));
  g.set(a + "attention.head_count", GgufValue::u32(static_cast<uint32_t>(spec.n_heads)));
  g.set(a + "attention.head_count_kv", GgufValue::u32(static_cast<uint32_t>(spec.n_kv_heads)));
  g.set(a + "attention.key_length", GgufValue::u32(static_cast<uint32_t>(hd)));
  g.set(a + "attention.value_length", GgufValue::u32(static_cast<uint32_t>(hd)));
  g.set(a + "context_length", GgufValue::u32(static_cast<uint32_t>(spec.context_length)));
  g.set(a + "attention.layer_norm_rms_epsilon", GgufValue::f32(spec.norm_eps));
  g.set(a + "attention.sliding_window", GgufValue::u32(static_cast<uint32_t>(spec.sliding_window)));
  g.set(a + "rope.freq_base", GgufValue::f32(static_cast<float>(spec.rope_global)));
  g.set("tokenizer.ggml.model", GgufValue::str("llama"));
  g.set("tokenizer.ggml.tokens", GgufValue::string_array(tok));
  g.set("tokenizer.ggml.scores", GgufValue::f32_array(scores));
  g.set("tokenizer.ggml.token_type", GgufValue::i32_array(types));
  g.set("tokenizer.ggml.bos_token_id", GgufValue::u32(kSynBos));
  g.set("tokenizer.ggml.eos_token_id", GgufValue::u32(kSynEos));
  g.set("tokenizer.ggml.unknown_token_id", GgufValue::u32(kSynUnk));
  g.set("tokenizer.ggml.padding_token_id", GgufValue::u32(kSynPad));
  g.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
  g.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(false));

  auto add_f32 = [&](const std::string& name, const std::vector<float>& v, std::vector<uint64_t> dims) {
    g.add_tensor(name, DType::F32, std::move(dims), v.data(), v.size() * sizeof(float));
  };
  auto add_matrix = [&](const std::string& name, const std::vector<float>& v, int64_t rows, int64_t cols) {
    const DType t = spec.matrix_type;
    if (t == DType::F32) return add_f32(name, v, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)});
    const size_t rb = *row_bytes(t, static_cast<uint64_t>(cols));
    std::vector<uint8_t> bytes(rb * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) quant::quantize_row(t, v.data() + r * cols, bytes.data() + r * rb, cols);
    g.add_tensor(name, t, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)}, bytes.data(), bytes.size());
  };
  add_f32("token_embd.weight", w.token_embd, {static_cast<uint64_t>(H), static_cast<uint64_t>(V)});
  add_f32("output_norm.weight", w.output_norm, {static_cast<uint64_t>(H)});
  for (int64_t l = 0; l < spec.n_layers; ++l) {
    const SyntheticLayer& L = w.layers[static_cast<size_t>(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    add_f32(b + "attn_norm.weight", L.attn_norm, {static_cast<uint64_t>(H)});
    add_matrix(b + "attn_q.weight", L.wq, qd, H);
    add_matrix(b + "attn_k.weight", L.wk, kvd, H);
    add_matrix(b + "attn_v.weight", L.wv, kvd, H);
    add_f32(b + "attn_q_norm.weight", L.q_norm, {static_cast<uint64_t>(hd)});
    add_f32(b + "attn_k_norm.weight", L.k_norm, {static_cast<uint64_t>(hd)});
    add_matrix(b + "attn_output.weight", L.wo, H, qd);
    add_f32(b + "post_attention_norm.weight", L.post_attn_norm, {static_cast<uint64_t>(H)});
    add_f32(b + "ffn_norm.weight", L.ffn_norm, {static_cast<uint64_t>(H)});
    add_matrix(b + "ffn_gate.weight", L.w_gate, F, H);
    add_matrix(b + "ffn_up.weight", L.w_up, F, H);
    add_matrix(b + "ffn_down.weight", L.w_down, H, F);
    add_f32(b + "post_ffw_norm.weight", L.post_ffn_norm, {static_cast<uint64_t>(H)});
  }

  static std::atomic<int> counter{0};
  m->path = (std::filesystem::temp_directory_path() /
             ("larql-synth-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-seed" +
              std::to_string(spec.seed) + ".gguf"))
                .string();
  g.write(m->path);
  return m;
}

}  // namespace larql::testing
