// config_from_hf_json: Gemma 3 config.json files as Hugging Face publishes them. Expected values
// are the published architecture (docs/gemma3.md: google/gemma-3-270m and gemma-3-4b-it
// config.json, Gemma3TextConfig's defaults), not this code's output. The whole source (weights,
// tokenizer, bad directories) is checked in tests/python/test_vindex_float.py.
#include "model/hf_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace larql {
namespace {

using nlohmann::json;

// google/gemma-3-270m's config.json (the keys the forward pass reads).
json gemma3_270m() {
  json lt = json::array();
  for (int i = 0; i < 18; ++i) lt.push_back((i + 1) % 6 == 0 ? "full_attention" : "sliding_attention");
  return {{"architectures", {"Gemma3ForCausalLM"}}, {"model_type", "gemma3_text"}, {"hidden_size", 640},
          {"intermediate_size", 2048}, {"num_hidden_layers", 18}, {"num_attention_heads", 4},
          {"num_key_value_heads", 1}, {"head_dim", 256}, {"rms_norm_eps", 1e-6}, {"sliding_window", 512},
          {"rope_theta", 1000000.0}, {"rope_local_base_freq", 10000.0}, {"query_pre_attn_scalar", 256},
          {"max_position_embeddings", 32768}, {"vocab_size", 262144}, {"hidden_activation", "gelu_pytorch_tanh"},
          {"layer_types", lt}, {"attn_logit_softcapping", nullptr}, {"final_logit_softcapping", nullptr},
          {"rope_scaling", nullptr}};
}

ErrorKind kind_of(const json& j, std::string* msg = nullptr) {
  try {
    config_from_hf_json(j.dump(), "x/config.json");
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "accepted: " << j.dump();
  return ErrorKind::Io;
}

TEST(HfConfig, Gemma3_270m) {
  const ModelConfig c = config_from_hf_json(gemma3_270m().dump(), "x/config.json");
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_EQ(c.n_layers, 18);
  EXPECT_EQ(c.hidden, 640);
  EXPECT_EQ(c.ffn, 2048);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.vocab, 262144);
  EXPECT_EQ(c.context_length, 32768);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.attn_scale, 1.0f / 16.0f);       // 1/sqrt(256)
  EXPECT_FLOAT_EQ(c.embed_scale, std::sqrt(640.0f));  // sqrt(hidden)
  EXPECT_EQ(c.final_logit_softcap, 0.0f);
  EXPECT_TRUE(c.post_norms && c.qk_norm && c.tied_embeddings && !c.qkv_bias);
  ASSERT_EQ(c.layers.size(), 18u);
  for (int i = 0; i < 18; ++i) {
    const LayerConfig& l = c.layers[static_cast<size_t>(i)];
    const bool global = i == 5 || i == 11 || i == 17;
    EXPECT_EQ(l.sliding, !global) << i;
    EXPECT_EQ(l.window, global ? 0 : 512) << i;
    EXPECT_EQ(l.rope_base, global ? 1e6 : 1e4) << i;
    EXPECT_EQ(l.rope_freq_scale, 1.0) << i;
    EXPECT_EQ(l.rope_form, RopeForm::NeoX) << i;
  }
}

TEST(HfConfig, FamilyDefaultsWhereTheFileIsSilent) {
  json j = gemma3_270m();
  for (const char* k : {"layer_types", "rope_local_base_freq", "query_pre_attn_scalar", "num_key_value_heads"}) j.erase(k);
  const ModelConfig c = config_from_hf_json(j.dump(), "x/config.json");
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_FLOAT_EQ(c.attn_scale, 1.0f / 16.0f);  // query_pre_attn_scalar = head_dim
  for (int i = 0; i < 18; ++i) {
    const bool global = (i + 1) % 6 == 0;  // sliding_window_pattern 6
    EXPECT_EQ(c.layers[static_cast<size_t>(i)].sliding, !global) << i;
    EXPECT_EQ(c.layers[static_cast<size_t>(i)].rope_base, global ? 1e6 : 1e4) << i;
  }
}

TEST(HfConfig, LinearRopeScalingOnGlobalLayersOnly) {
  json j = gemma3_270m();
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  const ModelConfig c = config_from_hf_json(j.dump(), "x/config.json");
  EXPECT_EQ(c.layers[5].rope_freq_scale, 1.0 / 8.0);
  EXPECT_EQ(c.layers[0].rope_freq_scale, 1.0);
}

TEST(HfConfig, BadValuesAreRefusedNamingTheKey) {
  std::string msg;
  json j = gemma3_270m();
  j.erase("hidden_size");
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Format);
  EXPECT_NE(msg.find("hidden_size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("x/config.json"), std::string::npos) << msg;

  j = gemma3_270m();
  j["num_key_value_heads"] = 3;
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Format);
  EXPECT_NE(msg.find("num_key_value_heads"), std::string::npos) << msg;

  j = gemma3_270m();
  j["rms_norm_eps"] = -1;
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Format);
  EXPECT_NE(msg.find("rms_norm_eps"), std::string::npos) << msg;

  j = gemma3_270m();
  j["layer_types"].erase(0);
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Format);
  EXPECT_NE(msg.find("layer_types"), std::string::npos) << msg;

  j = gemma3_270m();
  j["head_dim"] = 255;
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Format);

  j = gemma3_270m();
  j["num_hidden_layers"] = "18";
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Format);

  EXPECT_EQ(kind_of(json::array()), ErrorKind::Format);
  EXPECT_THROW(config_from_hf_json("{", "x"), Error);
}

TEST(HfConfig, OtherArchitecturesAreUnsupported) {
  json j = gemma3_270m();
  j["architectures"] = {"MambaForCausalLM"};
  j["model_type"] = "mamba";
  std::string msg;
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Unsupported);
  EXPECT_NE(msg.find("mamba"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Qwen2ForCausalLM"), std::string::npos) << msg;  // the supported ones are listed
  j = gemma3_270m();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0}};
  EXPECT_EQ(kind_of(j), ErrorKind::Unsupported);
}

}  // namespace
}  // namespace larql
