// Hugging Face export (extract/hf_export.h) on the synthetic Gemma 3 model (tests/testlib/
// synthetic_model.h): the tensors under transformers' Gemma 3 names hold the synthetic weights the
// test generated (norms as w = x - 1, Hugging Face's convention), config.json holds the keys
// Gemma3TextConfig names with the values the spec implies (derived by hand), and larql reads the
// directory back as the same model; config.json refuses what transformers' keys cannot say.
#include "extract/hf_export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "model/arch.h"
#include "model/gguf_source.h"
#include "model/hf_source.h"
#include "model/model.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"

namespace larql {
namespace {

using testing::make_synthetic_model;
using testing::SyntheticSpec;

std::string temp_dir(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / ("larql-hfx-" + std::to_string(::getpid()) + "-" + name)).string();
}

std::vector<float> floats(const SafetensorsTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  to_f32(t, v.data());
  return v;
}

TEST(HfExport, SyntheticGemma3AsTransformersNamesIt) {
  SyntheticSpec spec;
  auto m = make_synthetic_model(spec);
  auto src = GgufSource::open(m->path);
  const std::string dir = temp_dir("gemma3");
  std::filesystem::remove_all(dir);
  const auto r = extract::export_hf_dir(*src, dir);
  EXPECT_EQ(r.shards, 1u);
  EXPECT_FALSE(r.unpermuted_qk);
  EXPECT_FALSE(r.tokenizer_copied);
  auto f = SafetensorsFile::open(dir + "/model.safetensors");
  const auto* q = f->find("model.layers.2.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{spec.n_heads * spec.head_dim, spec.hidden}));
  EXPECT_EQ(floats(*q), m->w.layers[2].wq);
  EXPECT_EQ(floats(*f->find("model.layers.1.mlp.down_proj.weight")), m->w.layers[1].w_down);
  EXPECT_EQ(f->find("lm_head.weight"), nullptr);  // tied
  const auto norm = floats(*f->find("model.layers.3.pre_feedforward_layernorm.weight"));
  ASSERT_EQ(norm.size(), m->w.layers[3].ffn_norm.size());
  for (size_t i = 0; i < norm.size(); ++i) EXPECT_EQ(norm[i], m->w.layers[3].ffn_norm[i] - 1.0f);
  EXPECT_EQ(floats(*f->find("model.layers.0.self_attn.k_norm.weight"))[0], m->w.layers[0].k_norm[0] - 1.0f);

  std::ifstream in(dir + "/config.json");
  const auto j = nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  EXPECT_EQ(j["architectures"], nlohmann::json({"Gemma3ForCausalLM"}));
  EXPECT_EQ(j["model_type"], "gemma3_text");
  EXPECT_EQ(j["hidden_size"], spec.hidden);
  EXPECT_EQ(j["intermediate_size"], spec.ffn);
  EXPECT_EQ(j["num_hidden_layers"], spec.n_layers);
  EXPECT_EQ(j["num_key_value_heads"], spec.n_kv_heads);
  EXPECT_EQ(j["head_dim"], spec.head_dim);
  EXPECT_EQ(j["query_pre_attn_scalar"], spec.head_dim);
  EXPECT_EQ(j["rms_norm_eps"], 1e-6);
  EXPECT_EQ(j["rope_theta"], spec.rope_global);
  EXPECT_EQ(j["rope_local_base_freq"], 10000.0);
  EXPECT_EQ(j["sliding_window"], spec.sliding_window);
  EXPECT_EQ(j["tie_word_embeddings"], true);
  EXPECT_EQ(j["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_TRUE(j["final_logit_softcapping"].is_null());
  ASSERT_EQ(j["layer_types"].size(), static_cast<size_t>(spec.n_layers));
  for (int64_t i = 0; i < spec.n_layers; ++i)
    EXPECT_EQ(j["layer_types"][static_cast<size_t>(i)], (i + 1) % 6 == 0 ? "full_attention" : "sliding_attention");
  EXPECT_EQ(j["bos_token_id"], testing::kSynBos);
  EXPECT_EQ(j["eos_token_id"], testing::kSynEos);

  // larql reads it back as the same model: the config, and every tensor the source hands out.
  auto back = HfSource::open(dir);
  const ModelConfig &a = src->config(), &b = back->config();
  EXPECT_EQ(b.n_layers, a.n_layers);
  EXPECT_EQ(b.attn_scale, a.attn_scale);
  EXPECT_EQ(b.embed_scale, a.embed_scale);
  for (size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_EQ(b.layers[i].sliding, a.layers[i].sliding);
    EXPECT_EQ(b.layers[i].rope_base, a.layers[i].rope_base);
  }
  const auto na = src->tensor(TensorRole::PostFfnNorm, 4), nb = back->tensor(TensorRole::PostFfnNorm, 4);
  ASSERT_TRUE(na && nb);
  EXPECT_EQ(0, std::memcmp(na->data, nb->data, na->nbytes));  // 1 + (x - 1) == x for these multipliers
  EXPECT_EQ(back->vocabulary().tokens, m->tokens);
  std::filesystem::remove_all(dir);
}

TEST(HfExport, ExistingOutputsAndTheSourceAreRefused) {
  auto m = make_synthetic_model(SyntheticSpec{});
  auto src = GgufSource::open(m->path);
  const std::string dir = temp_dir("exists");
  std::filesystem::create_directories(dir);
  EXPECT_THROW(extract::export_hf_dir(*src, dir), Error);
  extract::HfExportOptions o;
  o.force = true;
  o.max_shard_bytes = 20000;
  const auto r = extract::export_hf_dir(*src, dir, o);
  EXPECT_GT(r.shards, 2u);
  EXPECT_TRUE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
  EXPECT_NO_THROW(HfSource::open(dir));
  o.dtype = "f8";
  EXPECT_THROW(extract::export_hf_dir(*src, dir, o), Error);
  std::filesystem::remove_all(dir);
}

ModelConfig llama_config() {
  ModelConfig c;
  c.arch = "llama";
  c.n_layers = 2, c.hidden = 64, c.ffn = 128, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16, c.vocab = 300;
  c.context_length = 256;
  c.norm_eps = 1e-5f;
  c.attn_scale = static_cast<float>(1.0 / std::sqrt(16.0));
  c.activation = Activation::Silu;
  c.tied_embeddings = false;
  c.layers.assign(2, LayerConfig{false, 0, 10000.0, 1.0, RopeForm::NeoX});
  return c;
}

TEST(HfExport, ConfigJsonSaysWhatTransformersKeysCan) {
  const SpecialTokens sp{1, 2, -1, -1, 0, true};
  auto j = nlohmann::json::parse(extract::config_to_hf_json(llama_config(), sp, "float32"));
  EXPECT_EQ(j["architectures"], nlohmann::json({"LlamaForCausalLM"}));
  EXPECT_EQ(j["rms_norm_eps"], 1e-5);
  EXPECT_TRUE(j["sliding_window"].is_null());
  ModelConfig c = llama_config();
  for (auto& l : c.layers) l.sliding = true, l.window = 32;
  j = nlohmann::json::parse(extract::config_to_hf_json(c, sp, "float32"));
  EXPECT_EQ(j["architectures"], nlohmann::json({"MistralForCausalLM"}));
  EXPECT_EQ(j["sliding_window"], 32);
  c.n_experts = 4, c.n_experts_used = 2, c.expert_ffn = 128, c.expert_weights_norm = true;
  j = nlohmann::json::parse(extract::config_to_hf_json(c, sp, "float32"));
  EXPECT_EQ(j["architectures"], nlohmann::json({"MixtralForCausalLM"}));
  EXPECT_EQ(j["num_local_experts"], 4);
  // Linear RoPE scaling on every layer.
  c = llama_config();
  for (auto& l : c.layers) l.rope_freq_scale = 0.25;
  j = nlohmann::json::parse(extract::config_to_hf_json(c, sp, "float32"));
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "linear");
  EXPECT_EQ(j["rope_scaling"]["factor"], 4.0);
  // Llama 3.1's frequency factors come back as their llama3 parameters.
  c = llama_config();
  for (auto& l : c.layers) l.rope_base = 500000.0;
  c.rope_freq_factors = llama3_rope_factors(16, 500000.0, 8.0, 1.0, 4.0, 64.0);
  j = nlohmann::json::parse(extract::config_to_hf_json(c, sp, "float32"));
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(j["rope_scaling"]["original_max_position_embeddings"], 64);
  EXPECT_EQ(j["rope_scaling"]["factor"], 8.0);
  // What the keys cannot say is refused, naming it.
  auto refused = [&](const ModelConfig& bad, const std::string& needle) {
    try {
      extract::config_to_hf_json(bad, sp, "float32");
      ADD_FAILURE() << "accepted; expected a refusal naming " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  c = llama_config();
  c.qkv_bias = true;
  refused(c, "Q/K/V biases");
  c = llama_config();
  c.layers[0].sliding = true, c.layers[0].window = 32;
  refused(c, "some layers only");
  c = llama_config();
  c.layers[1].rope_base = 20000;
  refused(c, "rope_base");
}

}  // namespace
}  // namespace larql
