// Gemma 3 (Gemma Team 2025, "Gemma 3 Technical Report"; transformers modeling_gemma3.py;
// llama.cpp llama-model.cpp LLM_ARCH_GEMMA3). docs/gemma3.md. Defaults the GGUF does not carry
// (checked against google/gemma-3-270m and gemma-3-4b-it config.json):
//   - rope_local_base_freq = 10000 for sliding layers (not written by the converter);
//   - sliding_window_pattern = 6: layer i is global iff (i + 1) % 6 == 0;
//   - query_pre_attn_scalar = head_dim for every size except 27B (hidden / n_heads, in its file);
//   - embedding scaled by sqrt(hidden); RMSNorm weights in GGUF already include the +1;
//   - RoPE scaling: the 4B+ models use linear x8 on global layers only.
#include "model/families/families.h"

namespace larql {

std::string hf_gemma_name(TensorRole role, int64_t layer) {
  const char* s = nullptr;
  switch (role) {
    case TensorRole::PostAttnNorm: s = "post_attention_layernorm.weight"; break;
    case TensorRole::FfnNorm: s = "pre_feedforward_layernorm.weight"; break;
    case TensorRole::PostFfnNorm: s = "post_feedforward_layernorm.weight"; break;
    case TensorRole::AttnQBias:
    case TensorRole::AttnKBias:
    case TensorRole::AttnVBias: return "";  // Gemma has no attention biases
    default: return hf_llama_name(role, layer);
  }
  return "model.layers." + std::to_string(layer) + "." + s;
}

const ArchRecord& gemma3_record() {
  static const ArchRecord r = [] {
    ArchRecord a;
    a.arch = "gemma3";
    a.title = "Gemma 3";
    a.hf_architectures = {"Gemma3ForCausalLM"};
    a.hf_model_types = {"gemma3_text"};
    a.activation = Activation::GeluTanh;
    a.rope_form = RopeForm::NeoX;  // llama.cpp: LLM_ARCH_GEMMA3 -> LLAMA_ROPE_TYPE_NEOX
    a.post_norms = true;
    a.qk_norm = true;
    a.embed_scale_sqrt_hidden = true;
    a.attn_scale_from_query_pre_attn_scalar = true;
    a.hf_norm_plus_one = true;
    a.swa_pattern = 6;
    a.default_window = 512;
    a.rope_base = 1000000;
    a.rope_base_swa = 10000;
    a.rope_scaling_global_only = true;
    a.default_context = 32768;
    a.default_norm_eps = 1e-6;
    a.hf_default_tied = true;
    a.hf_default_head_dim = 256;
    a.hf_default_vocab = 262144;
    a.hf_name = hf_gemma_name;
    a.residual_sufficient = true;
    a.bands = {{34, 0, 13, 14, 27, 28, 33}, {42, 0, 16, 17, 34, 35, 41}};
    return a;
  }();
  return r;
}

}  // namespace larql
