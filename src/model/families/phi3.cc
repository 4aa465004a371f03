// Phi-3 (Abdin et al. 2024, "Phi-3 Technical Report"; transformers modeling_phi3.py; llama.cpp
// llama-model.cpp LLM_ARCH_PHI3): the Llama layer with fused projections — one Q/K/V matrix
// (rows Q, then K, then V: qkv_proj / attn_qkv) and one gate/up matrix (gate rows first:
// gate_up_proj / ffn_up with 2 x ffn rows, split by llama.cpp's LLM_FFN_SWIGLU and by
// Phi3MLP's chunk(2)) — which the weight sources split into zero-copy row ranges; NeoX RoPE
// pairing (LLAMA_ROPE_TYPE_NEOX); a sliding window on every layer when the config gives one
// (phi-3-mini-4k: 2047; llama.cpp 0.3.36 disables Phi's window, transformers applies it, so does
// larql). LongRoPE (the 128k models): per-frequency factors and an attention factor on cos/sin,
// the long set when the context exceeds the original one — llama.cpp's choice by context size;
// transformers chooses by the current sequence length, so the two agree on sequences longer than
// the original context.
#include <cmath>

#include "formats/gguf.h"
#include "model/families/families.h"
#include "util/error.h"

namespace larql {
namespace {

// LongRoPE in GGUF (llama.cpp conversion/phi.py, llama_model::get_rope_factors): the factor
// tensors rope_factors_long / rope_factors_short [head_dim / 2], phi3.rope.scaling
// .original_context_length and .attn_factor. Long factors when the model's context exceeds the
// original one (llama.cpp: the context it runs with).
void phi3_gguf(const GgufFile& f, ModelConfig& c) {
  const GgufTensor* lng = f.find_tensor("rope_factors_long.weight");
  const GgufTensor* sht = f.find_tensor("rope_factors_short.weight");
  if (lng == nullptr && sht == nullptr) return;
  const std::string orig_key = "phi3.rope.scaling.original_context_length";
  const auto original = read_count(f, orig_key);
  if (!original || *original < 1)
    throw Error(ErrorKind::Format, f.path() + ": LongRoPE factor tensors but no " + orig_key);
  const GgufTensor* t = c.context_length > *original ? lng : sht;
  const char* name = c.context_length > *original ? "rope_factors_long.weight" : "rope_factors_short.weight";
  const uint64_t n = static_cast<uint64_t>(c.head_dim / 2);
  if (t == nullptr || t->type != DType::F32 || t->dims.size() != 1 || t->dims[0] != n)
    throw Error(ErrorKind::Format, f.path() + ": tensor " + name + " must be F32 [" + std::to_string(n) + "] (head_dim / 2)");
  c.rope_freq_factors.assign(reinterpret_cast<const float*>(t->data), reinterpret_cast<const float*>(t->data) + n);
  for (float x : c.rope_freq_factors)
    if (!(std::isfinite(x) && x > 0)) throw Error(ErrorKind::Format, f.path() + ": tensor " + name + " holds a factor <= 0");
  c.rope_attn_factor = f.get_float("phi3.rope.scaling.attn_factor").value_or(1.0);
  if (!(std::isfinite(c.rope_attn_factor) && c.rope_attn_factor > 0))
    throw Error(ErrorKind::Format, f.path() + ": phi3.rope.scaling.attn_factor must be finite and > 0");
}

std::string hf_phi3_name(TensorRole role, int64_t layer) {
  switch (role) {
    case TensorRole::AttnQBias:
    case TensorRole::AttnKBias:
    case TensorRole::AttnVBias: return "";
    default: return hf_llama_name(role, layer);
  }
}

}  // namespace

const ArchRecord& phi3_record() {
  static const ArchRecord r = [] {
    ArchRecord a;
    a.arch = "phi3";
    a.title = "Phi-3";
    a.hf_architectures = {"Phi3ForCausalLM"};
    a.hf_model_types = {"phi3"};
    a.activation = Activation::Silu;
    a.rope_form = RopeForm::NeoX;
    a.swa_pattern = 1;
    a.rope_base = 10000;
    a.hf_default_norm_eps = 1e-5;
    a.gguf_fused_qkv = "attn_qkv.weight";
    a.gguf_fused_gate_up = "ffn_up.weight";
    a.hf_name = hf_phi3_name;
    a.hf_fused_qkv = "self_attn.qkv_proj.weight";
    a.hf_fused_gate_up = "mlp.gate_up_proj.weight";
    a.residual_sufficient = true;
    a.exportable = false;  // export would have to fuse Q/K/V and gate/up again
    a.gguf_hook = phi3_gguf;
    return a;
  }();
  return r;
}

}  // namespace larql
