// Qwen3 (transformers modeling_qwen3.py; llama.cpp llama-model.cpp LLM_ARCH_QWEN3): the Llama
// layer with per-head RMSNorm on q and k before RoPE (weights used as stored: no +1), no
// biases, NeoX RoPE pairing (LLAMA_ROPE_TYPE_NEOX), an explicit head_dim (128 in the published
// models, not hidden / heads), SiLU-gated FFN. Sliding window refused as for Qwen2.
#include "model/families/families.h"

namespace larql {

const ArchRecord& qwen3_record() {
  static const ArchRecord r = [] {
    ArchRecord a;
    a.arch = "qwen3";
    a.title = "Qwen3";
    a.hf_architectures = {"Qwen3ForCausalLM"};
    a.hf_model_types = {"qwen3"};
    a.activation = Activation::Silu;
    a.rope_form = RopeForm::NeoX;
    a.qk_norm = true;
    a.rope_base = 10000;
    a.hf_default_norm_eps = 1e-6;
    a.hf_default_head_dim = 128;
    a.residual_sufficient = true;
    a.hf_hook = refuse_qwen_sliding_window;
    return a;
  }();
  return r;
}

}  // namespace larql
