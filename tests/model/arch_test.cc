// The architecture records (model/arch.h) through the generic config.json reader: each family's
// published config.json (the keys the forward pass reads, copied from the models' Hugging Face
// pages: meta-llama/Llama-3.1-8B, mistralai/Mistral-7B-v0.1, Qwen/Qwen2.5-0.5B, Qwen/Qwen3-0.6B,
// google/gemma-2-2b, microsoft/Phi-3-mini-4k-instruct) gives the architecture the model card and
// the transformers modeling file describe — expected values from those, not from this code.
// Llama 3.1's frequency factors are checked against transformers' own formulation
// (_compute_llama3_parameters: smoothed inverse frequencies, not factors).
#include "model/arch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>

#include <nlohmann/json.hpp>

#include "model/hf_source.h"
#include "util/error.h"

namespace larql {
namespace {

using nlohmann::json;

ModelConfig read(const json& j) { return config_from_hf_json(j.dump(), "x/config.json"); }

ErrorKind kind_of(const json& j, std::string* msg = nullptr) {
  try {
    read(j);
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "accepted: " << j.dump();
  return ErrorKind::Io;
}

json llama31_8b() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 4096},
          {"intermediate_size", 14336}, {"num_hidden_layers", 32}, {"num_attention_heads", 32},
          {"num_key_value_heads", 8}, {"rms_norm_eps", 1e-5}, {"rope_theta", 500000.0},
          {"rope_scaling", {{"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}}},
          {"max_position_embeddings", 131072}, {"vocab_size", 128256}, {"tie_word_embeddings", false},
          {"hidden_act", "silu"}, {"attention_bias", false}, {"mlp_bias", false}, {"head_dim", 128}};
}

json mistral_7b() {
  return {{"architectures", {"MistralForCausalLM"}}, {"model_type", "mistral"}, {"hidden_size", 4096},
          {"intermediate_size", 14336}, {"num_hidden_layers", 32}, {"num_attention_heads", 32},
          {"num_key_value_heads", 8}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0}, {"sliding_window", 4096},
          {"max_position_embeddings", 32768}, {"vocab_size", 32000}, {"tie_word_embeddings", false},
          {"hidden_act", "silu"}};
}

json qwen25_05b() {
  return {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"}, {"hidden_size", 896},
          {"intermediate_size", 4864}, {"num_hidden_layers", 24}, {"num_attention_heads", 14},
          {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0}, {"sliding_window", 32768},
          {"use_sliding_window", false}, {"max_window_layers", 21}, {"max_position_embeddings", 32768},
          {"vocab_size", 151936}, {"tie_word_embeddings", true}, {"hidden_act", "silu"}};
}

json qwen3_06b() {
  return {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"}, {"hidden_size", 1024},
          {"intermediate_size", 3072}, {"num_hidden_layers", 28}, {"num_attention_heads", 16},
          {"num_key_value_heads", 8}, {"head_dim", 128}, {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0},
          {"sliding_window", nullptr}, {"use_sliding_window", false}, {"max_position_embeddings", 40960},
          {"vocab_size", 151936}, {"tie_word_embeddings", true}, {"attention_bias", false}, {"hidden_act", "silu"}};
}

json gemma2_2b() {
  return {{"architectures", {"Gemma2ForCausalLM"}}, {"model_type", "gemma2"}, {"hidden_size", 2304},
          {"intermediate_size", 9216}, {"num_hidden_layers", 26}, {"num_attention_heads", 8},
          {"num_key_value_heads", 4}, {"head_dim", 256}, {"query_pre_attn_scalar", 256}, {"sliding_window", 4096},
          {"attn_logit_softcapping", 50.0}, {"final_logit_softcapping", 30.0}, {"rope_theta", 10000.0},
          {"rms_norm_eps", 1e-6}, {"max_position_embeddings", 8192}, {"vocab_size", 256000},
          {"hidden_activation", "gelu_pytorch_tanh"}, {"hidden_act", "gelu_pytorch_tanh"}};
}

json phi3_mini_4k() {
  return {{"architectures", {"Phi3ForCausalLM"}}, {"model_type", "phi3"}, {"hidden_size", 3072},
          {"intermediate_size", 8192}, {"num_hidden_layers", 32}, {"num_attention_heads", 32},
          {"num_key_value_heads", 32}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0}, {"rope_scaling", nullptr},
          {"max_position_embeddings", 4096}, {"original_max_position_embeddings", 4096}, {"sliding_window", 2047},
          {"vocab_size", 32064}, {"tie_word_embeddings", false}, {"hidden_act", "silu"}};
}

TEST(ArchRecords, EveryRecordIsFoundByItsNamesAndListed) {
  for (const ArchRecord* r : arch_records()) {
    EXPECT_EQ(find_arch(r->arch), r);
    for (const auto& a : r->hf_architectures) EXPECT_EQ(find_arch_for_hf("", a), r) << a;
    for (const auto& t : r->hf_model_types) EXPECT_EQ(find_arch_for_hf(t, ""), r) << t;
  }
  EXPECT_EQ(find_arch("mamba"), nullptr);
  EXPECT_EQ(find_arch_for_hf("mamba", "MambaForCausalLM"), nullptr);
  try {
    require_arch("mamba", "f.gguf");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("qwen2"), std::string::npos) << e.what();
  }
}

TEST(ArchRecords, Llama31) {
  const ModelConfig c = read(llama31_8b());
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.activation, Activation::Silu);
  EXPECT_FALSE(c.post_norms || c.qk_norm || c.qkv_bias || c.tied_embeddings);
  EXPECT_FLOAT_EQ(c.attn_scale, 1.0f / std::sqrt(128.0f));
  EXPECT_EQ(c.embed_scale, 1.0f);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  for (const LayerConfig& l : c.layers) {
    EXPECT_FALSE(l.sliding);
    EXPECT_EQ(l.rope_base, 500000.0);
    EXPECT_EQ(l.rope_freq_scale, 1.0);
    EXPECT_EQ(l.rope_form, RopeForm::NeoX);  // rotate_half on unpermuted Hugging Face rows
  }
  // transformers: inv_freq_llama = where(wavelen > low_wavelen, inv_freq / factor, inv_freq), then
  // for medium wavelengths (1 - smooth) * inv_freq / factor + smooth * inv_freq; our factor is
  // inv_freq / inv_freq_llama.
  ASSERT_EQ(c.rope_freq_factors.size(), 64u);
  for (int i = 0; i < 64; ++i) {
    const double inv = 1.0 / std::pow(500000.0, 2.0 * i / 128.0);
    const double wavelen = 2 * std::numbers::pi / inv;
    double scaled = wavelen > 8192.0 ? inv / 8.0 : inv;
    const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
    if (wavelen >= 8192.0 / 4.0 && wavelen <= 8192.0) scaled = (1 - smooth) * scaled / 8.0 + smooth * scaled;
    EXPECT_NEAR(c.rope_freq_factors[static_cast<size_t>(i)], inv / scaled, 1e-5 * inv / scaled) << i;
  }
  EXPECT_EQ(c.rope_freq_factors[0], 1.0f);
  EXPECT_EQ(c.rope_freq_factors[63], 8.0f);
}

TEST(ArchRecords, MistralSlidesOnEveryLayer) {
  const ModelConfig c = read(mistral_7b());
  EXPECT_EQ(c.arch, "llama");
  for (const LayerConfig& l : c.layers) {
    EXPECT_TRUE(l.sliding);
    EXPECT_EQ(l.window, 4096);
  }
  json j = mistral_7b();
  j["sliding_window"] = nullptr;  // Mistral v0.2+: no window
  for (const LayerConfig& l : read(j).layers) EXPECT_FALSE(l.sliding);
}

TEST(ArchRecords, Qwen2HasQkvBiasesAndNoWindowUnlessAsked) {
  const ModelConfig c = read(qwen25_05b());
  EXPECT_EQ(c.arch, "qwen2");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.head_dim, 64);
  for (const LayerConfig& l : c.layers) {
    EXPECT_FALSE(l.sliding);  // use_sliding_window = false
    EXPECT_EQ(l.rope_base, 1e6);
  }
  json j = qwen25_05b();
  j["use_sliding_window"] = true;
  std::string msg;
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Unsupported);
  EXPECT_NE(msg.find("use_sliding_window"), std::string::npos) << msg;
}

TEST(ArchRecords, Qwen3HasQkNormAndItsOwnHeadDim) {
  const ModelConfig c = read(qwen3_06b());
  EXPECT_EQ(c.arch, "qwen3");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias || c.post_norms);
  EXPECT_EQ(c.head_dim, 128);  // not hidden / heads = 64
  EXPECT_EQ(c.q_dim(), 2048);
  EXPECT_FLOAT_EQ(c.attn_scale, 1.0f / std::sqrt(128.0f));
}

TEST(ArchRecords, Gemma2SoftcapsAndAlternatingWindows) {
  const ModelConfig c = read(gemma2_2b());
  EXPECT_EQ(c.arch, "gemma2");
  EXPECT_FLOAT_EQ(c.attn_logit_softcap, 50.0f);
  EXPECT_FLOAT_EQ(c.final_logit_softcap, 30.0f);
  EXPECT_TRUE(c.post_norms);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.activation, Activation::GeluTanh);
  EXPECT_FLOAT_EQ(c.embed_scale, std::sqrt(2304.0f));
  EXPECT_FLOAT_EQ(c.attn_scale, 1.0f / 16.0f);
  for (int i = 0; i < 26; ++i) {
    const LayerConfig& l = c.layers[static_cast<size_t>(i)];
    EXPECT_EQ(l.sliding, i % 2 == 0) << i;  // transformers: sliding iff (i + 1) % 2
    EXPECT_EQ(l.window, i % 2 == 0 ? 4096 : 0) << i;
    EXPECT_EQ(l.rope_base, 10000.0) << i;
  }
}

TEST(ArchRecords, Phi3) {
  const ModelConfig c = read(phi3_mini_4k());
  EXPECT_EQ(c.arch, "phi3");
  EXPECT_EQ(c.head_dim, 96);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  for (const LayerConfig& l : c.layers) {
    EXPECT_TRUE(l.sliding);
    EXPECT_EQ(l.window, 2047);
  }
  EXPECT_TRUE(c.rope_freq_factors.empty());
  EXPECT_EQ(c.rope_attn_factor, 1.0);
}

TEST(ArchRecords, Phi3LongRope) {
  // Phi-3-mini-128k's shape: 131072 positions over an original 4096, LongRoPE factors.
  json j = phi3_mini_4k();
  j["max_position_embeddings"] = 131072;
  std::vector<double> lng(48), sht(48);
  for (int i = 0; i < 48; ++i) {
    lng[static_cast<size_t>(i)] = 1.0 + i;
    sht[static_cast<size_t>(i)] = 1.0 + 0.01 * i;
  }
  j["rope_scaling"] = {{"type", "longrope"}, {"short_factor", sht}, {"long_factor", lng}};
  ModelConfig c = read(j);
  ASSERT_EQ(c.rope_freq_factors.size(), 48u);
  EXPECT_EQ(c.rope_freq_factors[47], 48.0f);  // the long set: the context exceeds the original
  // transformers: sqrt(1 + ln(131072 / 4096) / ln(4096)) = sqrt(1 + ln 32 / ln 4096) = sqrt(17/12).
  EXPECT_NEAR(c.rope_attn_factor, std::sqrt(17.0 / 12.0), 1e-12);
  j["max_position_embeddings"] = 4096;  // not beyond the original: the short set, no attention factor
  c = read(j);
  EXPECT_FLOAT_EQ(c.rope_freq_factors[47], 1.47f);
  EXPECT_EQ(c.rope_attn_factor, 1.0);
  j["rope_scaling"]["short_factor"] = {1.0};  // not head_dim / 2 factors
  std::string msg;
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Format);
  EXPECT_NE(msg.find("short_factor"), std::string::npos) << msg;
}

TEST(ArchRecords, Mixtral) {
  json j = mistral_7b();
  j["architectures"] = {"MixtralForCausalLM"};
  j["model_type"] = "mixtral";
  j["num_local_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["sliding_window"] = nullptr;
  const ModelConfig c = read(j);
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.n_experts, 8);
  EXPECT_EQ(c.n_experts_used, 2);
  EXPECT_EQ(c.expert_ffn, 14336);  // intermediate_size is each expert's width
  EXPECT_TRUE(c.expert_weights_norm);
  EXPECT_EQ(c.shared_expert_ffn, 0);
  std::string msg;
  j["num_experts_per_tok"] = 9;
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Format);
  EXPECT_NE(msg.find("num_experts_per_tok"), std::string::npos) << msg;
  j.erase("num_experts_per_tok");
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Format);
  EXPECT_NE(msg.find("num_experts_per_tok"), std::string::npos) << msg;
  j = qwen3_06b();
  j["num_experts"] = 8;  // Qwen3-MoE has a record of its own, not qwen3's
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Unsupported);
  EXPECT_NE(msg.find("num_experts"), std::string::npos) << msg;
}

TEST(ArchRecords, WhatIsNotSupportedIsNamed) {
  std::string msg;
  json j = llama31_8b();
  j["attention_bias"] = true;
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Unsupported);
  EXPECT_NE(msg.find("attention_bias"), std::string::npos) << msg;
  j = llama31_8b();
  j["n_routed_experts"] = 64;  // DeepSeek-style experts
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Unsupported);
  EXPECT_NE(msg.find("n_routed_experts"), std::string::npos) << msg;
  j = llama31_8b();
  j["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Unsupported);
  j = llama31_8b();
  j["rope_scaling"]["rope_type"] = "yarn";
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Unsupported);
  EXPECT_NE(msg.find("yarn"), std::string::npos) << msg;
  j = llama31_8b();
  j["rope_scaling"]["high_freq_factor"] = 0.5;  // <= low_freq_factor
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Format);
  j = llama31_8b();
  j["hidden_act"] = "relu";
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Unsupported);
  EXPECT_NE(msg.find("relu"), std::string::npos) << msg;
  j = llama31_8b();
  j.erase("vocab_size");  // LlamaConfig has a default, larql wants the file's
  EXPECT_EQ(kind_of(j, &msg), ErrorKind::Format);
  EXPECT_NE(msg.find("vocab_size"), std::string::npos) << msg;
}

TEST(ArchRecords, SwaPatterns) {
  // llama.cpp set_swa_pattern(n): layer il slides iff il % n < n - 1; pattern 1 = every layer.
  for (int64_t n : {2, 3, 6})
    for (int64_t il = 0; il < 24; ++il) EXPECT_EQ(swa_layer_slides(n, il), il % n < n - 1) << n << " " << il;
  for (int64_t il = 0; il < 4; ++il) {
    EXPECT_TRUE(swa_layer_slides(1, il));
    EXPECT_FALSE(swa_layer_slides(0, il));
  }
}

TEST(ArchRecords, GgufTensorNamesAreLlamaCpps) {
  // llama-arch.cpp LLM_TENSOR_NAMES.
  EXPECT_EQ(gguf_tensor_name(TensorRole::TokenEmbd, -1), "token_embd.weight");
  EXPECT_EQ(gguf_tensor_name(TensorRole::AttnQBias, 3), "blk.3.attn_q.bias");
  EXPECT_EQ(gguf_tensor_name(TensorRole::PostAttnNorm, 0), "blk.0.post_attention_norm.weight");
  EXPECT_EQ(gguf_tensor_name(TensorRole::PostFfnNorm, 1), "blk.1.post_ffw_norm.weight");
  EXPECT_EQ(gguf_tensor_name(TensorRole::AttnKNorm, 2), "blk.2.attn_k_norm.weight");
}

TEST(ArchRecords, FusedRowsSplitPhi3sMatrices) {
  const ModelConfig c = read(phi3_mini_4k());
  const ArchRecord& phi3 = *find_arch("phi3");
  const auto k = fused_rows(phi3, c, TensorRole::AttnK, false);
  ASSERT_TRUE(k.has_value());
  EXPECT_STREQ(k->suffix, "attn_qkv.weight");
  EXPECT_EQ(k->row0, 3072);
  EXPECT_EQ(k->rows, 3072);
  const auto up = fused_rows(phi3, c, TensorRole::FfnUp, true);
  ASSERT_TRUE(up.has_value());
  EXPECT_STREQ(up->suffix, "mlp.gate_up_proj.weight");
  EXPECT_EQ(up->row0, 8192);  // gate first (Phi3MLP: gate, up = chunk(2))
  // A Hugging Face Llama never fuses; llama.cpp accepts a fused attn_qkv for every family.
  EXPECT_FALSE(fused_rows(*find_arch("llama"), read(llama31_8b()), TensorRole::AttnK, true).has_value());
  EXPECT_TRUE(fused_rows(*find_arch("llama"), read(llama31_8b()), TensorRole::AttnVBias, false).has_value());

  // slice_rows: rows 1..2 of a 4 x 3 f32 matrix.
  std::vector<float> m(12);
  for (int i = 0; i < 12; ++i) m[static_cast<size_t>(i)] = static_cast<float>(i);
  SourceTensor t{"w", DType::F32, {3, 4}, reinterpret_cast<const uint8_t*>(m.data()), m.size() * 4};
  const SourceTensor s = slice_rows(t, FusedRows{"w", 1, 2, 4}, "f");
  EXPECT_EQ(s.dims, (std::vector<uint64_t>{3, 2}));
  EXPECT_EQ(reinterpret_cast<const float*>(s.data)[0], 3.0f);
  EXPECT_EQ(s.nbytes, 24u);
  EXPECT_THROW(slice_rows(t, FusedRows{"w", 1, 2, 5}, "f"), Error);  // 4 rows where 5 are expected
  EXPECT_THROW(slice_rows(t, FusedRows{"w", 1, 2, 3}, "f"), Error);  // and where 3 are
}

TEST(ArchRecords, LayerBands) {
  const auto b = layer_bands_of("llama", 32);  // the original's table: 0-12, 13-25, 26-31
  EXPECT_EQ(b.at("knowledge").first, 13);
  EXPECT_EQ(b.at("output").last, 31);
  const auto d = layer_bands_of("qwen2", 24);  // no table row: 2/5, 4/5
  EXPECT_EQ(d.at("knowledge").first, 9);
  EXPECT_EQ(d.at("output").first, 19);
}

}  // namespace
}  // namespace larql
