// Writes a random-weight Gemma 3 GGUF of a real model's shape and Q4_K_M type mix, for machines the
// real model cannot be copied to (the GPU host: docs/backends.md "Checking on a GPU").
//
//   larql_synth_gemma3 VOCAB.gguf {270m|1b|4b} OUT.gguf [SEED]
//   larql_synth_gemma3 MODEL.gguf vocab OUT.gguf      (MODEL's metadata alone: a few MiB to carry)
//
// VOCAB.gguf gives the metadata (the tokenizer, chat template: any Gemma 3 GGUF, or the
// metadata-only file of the second form); the shape keys are replaced by the preset's (the
// published configs of google/gemma-3-{270m,1b,4b}). Weights are normal(0, std) quantised with
// the project's own quantisers into llama.cpp's Q4_K_M choices for each shape (Q4_K where a row
// is a multiple of 256 values, else Q5_0; attn_v/ffn_down Q6_K (else Q8_0) on every other layer;
// token_embd Q6_K, or Q8_0). Norm weights are 1 + small noise, as GGUF stores Gemma's (1 + w).
// Speed measured on it stands for the real model's (every byte is read as the real one's would
// be); its text is meaningless.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "formats/gguf.h"
#include "quant/quant.h"
#include "util/dtype.h"
#include "util/error.h"

using namespace larql;

namespace {

struct Shape {
  const char* name;
  int64_t layers, hidden, ffn, heads, kv, hd, window, ctx;
  double rope_scale;  ///< linear scaling factor of the global layers (1 = none)
};

constexpr Shape kShapes[] = {
    {"270m", 18, 640, 2048, 4, 1, 256, 512, 32768, 1.0},
    {"1b", 26, 1152, 6912, 4, 1, 256, 512, 32768, 1.0},
    {"4b", 34, 2560, 10240, 8, 4, 256, 1024, 131072, 8.0},
};

std::vector<uint8_t> random_tensor(DType t, int64_t rows, int64_t cols, float stdev, uint64_t seed) {
  const size_t rb = *row_bytes(t, static_cast<uint64_t>(cols));
  std::vector<uint8_t> out(rb * static_cast<size_t>(rows));
  const unsigned nt = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < nt; ++w)
    pool.emplace_back([&, w] {
      std::mt19937_64 rng(seed * 7919 + w);
      std::normal_distribution<float> nd(0.f, stdev);
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = w; r < rows; r += nt) {
        for (auto& v : row) v = nd(rng);
        quant::quantize_row(t, row.data(), out.data() + static_cast<size_t>(r) * rb, cols);
      }
    });
  for (auto& th : pool) th.join();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s VOCAB.gguf {270m|1b|4b} OUT.gguf [SEED]\n", argv[0]);
    return 2;
  }
  try {
    if (std::string(argv[2]) == "vocab") {
      auto src = GgufFile::open(argv[1]);
      GgufWriter g;
      for (size_t i = 0; i < src->metadata_count(); ++i) g.set(std::string(src->metadata_key(i)), src->metadata_value(i));
      g.write(argv[3]);
      return 0;
    }
    const Shape* sh = nullptr;
    for (const Shape& s : kShapes)
      if (std::string(argv[2]) == s.name) sh = &s;
    if (sh == nullptr) throw Error(ErrorKind::InvalidArgument, std::string("unknown shape ") + argv[2]);
    const uint64_t seed = argc > 4 ? std::stoull(argv[4]) : 1;
    auto vocab = GgufFile::open(argv[1]);
    GgufWriter g;
    for (size_t i = 0; i < vocab->metadata_count(); ++i) {
      const std::string key(vocab->metadata_key(i));
      if (key.rfind("gemma3.", 0) == 0 || key == "general.file_type" || key.rfind("quantize.", 0) == 0) continue;
      g.set(key, vocab->metadata_value(i));
    }
    const std::string a = "gemma3.";
    g.set("general.name", GgufValue::str(std::string("synthetic-gemma3-") + sh->name));
    g.set(a + "block_count", GgufValue::u32(static_cast<uint32_t>(sh->layers)));
    g.set(a + "embedding_length", GgufValue::u32(static_cast<uint32_t>(sh->hidden)));
    g.set(a + "feed_forward_length", GgufValue::u32(static_cast<uint32_t>(sh->ffn)));
    g.set(a + "attention.head_count", GgufValue::u32(static_cast<uint32_t>(sh->heads)));
    g.set(a + "attention.head_count_kv", GgufValue::u32(static_cast<uint32_t>(sh->kv)));
    g.set(a + "attention.key_length", GgufValue::u32(static_cast<uint32_t>(sh->hd)));
    g.set(a + "attention.value_length", GgufValue::u32(static_cast<uint32_t>(sh->hd)));
    g.set(a + "context_length", GgufValue::u32(static_cast<uint32_t>(sh->ctx)));
    g.set(a + "attention.layer_norm_rms_epsilon", GgufValue::f32(1e-6f));
    g.set(a + "attention.sliding_window", GgufValue::u32(static_cast<uint32_t>(sh->window)));
    g.set(a + "rope.freq_base", GgufValue::f32(1e6f));
    if (sh->rope_scale != 1.0) {
      g.set(a + "rope.scaling.type", GgufValue::str("linear"));
      g.set(a + "rope.scaling.factor", GgufValue::f32(static_cast<float>(sh->rope_scale)));
    }
    const int64_t vocab_n = static_cast<int64_t>(vocab->get_array_size("tokenizer.ggml.tokens").value_or(0));
    if (vocab_n == 0) throw Error(ErrorKind::Format, std::string(argv[1]) + " has no tokenizer.ggml.tokens");

    const int64_t H = sh->hidden, F = sh->ffn, Q = sh->heads * sh->hd, KV = sh->kv * sh->hd;
    auto k_or = [](int64_t cols, DType k, DType fallback) { return cols % 256 == 0 ? k : fallback; };
    uint64_t s = seed * 1000;
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::normal_distribution<float> nd(0.f, 0.05f);
    auto norm = [&](int64_t n) {
      std::vector<float> v(static_cast<size_t>(n));
      for (auto& x : v) x = 1.0f + nd(rng);
      return v;
    };
    auto add_norm = [&](const std::string& name, int64_t n) {
      const auto v = norm(n);
      g.add_tensor(name, DType::F32, {static_cast<uint64_t>(n)}, v.data(), v.size() * 4);
    };
    auto add_matrix = [&](const std::string& name, DType t, int64_t rows, int64_t cols, float stdev) {
      const auto bytes = random_tensor(t, rows, cols, stdev, ++s);
      g.add_tensor(name, t, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)}, bytes.data(), bytes.size());
    };
    std::fprintf(stderr, "writing %s: %s shape, vocab %lld\n", argv[3], sh->name, static_cast<long long>(vocab_n));
    add_matrix("token_embd.weight", k_or(H, DType::Q6_K, DType::Q8_0), vocab_n, H, 0.03f);
    add_norm("output_norm.weight", H);
    for (int64_t li = 0; li < sh->layers; ++li) {
      const std::string b = "blk." + std::to_string(li) + ".";
      const bool more_bits = li % 2 == 0;
      add_norm(b + "attn_norm.weight", H);
      add_matrix(b + "attn_q.weight", k_or(H, DType::Q4_K, DType::Q5_0), Q, H, 0.03f);
      add_matrix(b + "attn_k.weight", k_or(H, DType::Q4_K, DType::Q5_0), KV, H, 0.03f);
      add_matrix(b + "attn_v.weight", more_bits ? k_or(H, DType::Q6_K, DType::Q8_0) : k_or(H, DType::Q4_K, DType::Q5_0),
                 KV, H, 0.03f);
      add_norm(b + "attn_q_norm.weight", sh->hd);
      add_norm(b + "attn_k_norm.weight", sh->hd);
      add_matrix(b + "attn_output.weight", k_or(Q, DType::Q4_K, DType::Q5_0), H, Q, 0.03f);
      add_norm(b + "post_attention_norm.weight", H);
      add_norm(b + "ffn_norm.weight", H);
      add_matrix(b + "ffn_gate.weight", k_or(H, DType::Q4_K, DType::Q5_0), F, H, 0.03f);
      add_matrix(b + "ffn_up.weight", k_or(H, DType::Q4_K, DType::Q5_0), F, H, 0.03f);
      add_matrix(b + "ffn_down.weight", more_bits ? k_or(F, DType::Q6_K, DType::Q8_0) : k_or(F, DType::Q4_K, DType::Q5_0),
                 H, F, 0.02f);
      add_norm(b + "post_ffw_norm.weight", H);
      std::fprintf(stderr, "\r  layer %lld/%lld", static_cast<long long>(li + 1), static_cast<long long>(sh->layers));
    }
    std::fprintf(stderr, "\n");
    g.write(argv[3]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
