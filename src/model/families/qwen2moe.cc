// Qwen2-MoE / Qwen1.5-MoE (transformers modeling_qwen2_moe.py; llama.cpp src/models/qwen2moe.cpp):
// the Qwen2 layer (Q/K/V biases, NeoX RoPE) with a mixture-of-experts FFN: softmax router over
// num_experts, the top num_experts_per_tok experts' probabilities used as they are (llama.cpp
// hard-codes norm_w = false; transformers: norm_topk_prob, false in the published models), each
// expert moe_intermediate_size wide (GGUF expert_feed_forward_length), plus a shared expert
// (shared_expert_intermediate_size; GGUF expert_shared_feed_forward_length) whose output is
// gated by sigmoid(shared_expert_gate · x) (GGUF ffn_gate_inp_shexp).
#include "model/families/families.h"
#include "model/hf_config.h"

namespace larql {
namespace {

std::string hf_qwen2moe_name(TensorRole role, int64_t layer) {
  const char* s = nullptr;
  switch (role) {
    case TensorRole::FfnGateInp: s = "mlp.gate.weight"; break;
    case TensorRole::FfnGateExps: s = "mlp.experts.*.gate_proj.weight"; break;
    case TensorRole::FfnUpExps: s = "mlp.experts.*.up_proj.weight"; break;
    case TensorRole::FfnDownExps: s = "mlp.experts.*.down_proj.weight"; break;
    case TensorRole::FfnGateInpShexp: s = "mlp.shared_expert_gate.weight"; break;
    case TensorRole::FfnGateShexp: s = "mlp.shared_expert.gate_proj.weight"; break;
    case TensorRole::FfnUpShexp: s = "mlp.shared_expert.up_proj.weight"; break;
    case TensorRole::FfnDownShexp: s = "mlp.shared_expert.down_proj.weight"; break;
    default: return hf_llama_name(role, layer);
  }
  return "model.layers." + std::to_string(layer) + "." + s;
}

void qwen2moe_hf(const HfConfigReader& j, ModelConfig& c) {
  refuse_qwen_sliding_window(j, c);
  if (j.count("decoder_sparse_step", 1) != 1)
    j.unsupported("decoder_sparse_step", "!= 1 (dense layers between sparse ones) is not supported");
  if (j.array_size("mlp_only_layers").value_or(0) != 0)
    j.unsupported("mlp_only_layers", "(dense layers among sparse ones) is not supported");
}

}  // namespace

const ArchRecord& qwen2moe_record() {
  static const ArchRecord r = [] {
    ArchRecord a;
    a.arch = "qwen2moe";
    a.title = "Qwen2-MoE";
    a.hf_architectures = {"Qwen2MoeForCausalLM"};
    a.hf_model_types = {"qwen2_moe"};
    a.activation = Activation::Silu;
    a.rope_form = RopeForm::NeoX;
    a.qkv_bias_always = true;
    a.rope_base = 10000;
    a.hf_default_norm_eps = 1e-6;
    a.moe = true;
    a.moe_weights_norm = false;
    a.moe_shared_expert = true;
    a.hf_name = hf_qwen2moe_name;
    a.residual_sufficient = true;
    a.hf_hook = qwen2moe_hf;
    return a;
  }();
  return r;
}

}  // namespace larql
