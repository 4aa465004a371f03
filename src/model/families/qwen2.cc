// Qwen2 / Qwen2.5 (transformers modeling_qwen2.py; llama.cpp llama-model.cpp LLM_ARCH_QWEN2):
// the Llama layer with Q/K/V biases (o_proj has none), NeoX RoPE pairing (LLAMA_ROPE_TYPE_NEOX;
// the converter does not permute), rope_theta 1e6 by default in the published configs (10000
// in Qwen2Config), SiLU-gated FFN. use_sliding_window is off in every published model and
// refused when on (Qwen2's window applies to layers from max_window_layers on).
#include "model/families/families.h"
#include "model/hf_config.h"

namespace larql {

void refuse_qwen_sliding_window(const HfConfigReader& j, ModelConfig&) {
  if (j.flag("use_sliding_window", false))
    j.unsupported("use_sliding_window", "= true is not supported (no published Qwen model uses it)");
}

const ArchRecord& qwen2_record() {
  static const ArchRecord r = [] {
    ArchRecord a;
    a.arch = "qwen2";
    a.title = "Qwen2 / Qwen2.5";
    a.hf_architectures = {"Qwen2ForCausalLM"};
    a.hf_model_types = {"qwen2"};
    a.activation = Activation::Silu;
    a.rope_form = RopeForm::NeoX;
    a.qkv_bias_always = true;
    a.rope_base = 10000;
    a.hf_default_norm_eps = 1e-6;
    a.residual_sufficient = true;
    a.hf_hook = refuse_qwen_sliding_window;
    return a;
  }();
  return r;
}

}  // namespace larql
