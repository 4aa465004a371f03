// Llama 2 / 3 / 3.1+ and Mistral (transformers modeling_llama.py, modeling_mistral.py; llama.cpp
// llama-model.cpp LLM_ARCH_LLAMA — convert_hf_to_gguf.py writes Mistral as "llama"):
//   - RMSNorm before attention and FFN, no post norms, no q/k norm; SiLU-gated FFN;
//   - RoPE "normal" (LLAMA_ROPE_TYPE_NORM): adjacent pairs (2i, 2i+1) — in GGUF: the converter
//     permutes Wq/Wk rows so that llama.cpp's adjacent pairing reproduces Hugging Face's
//     rotate_half, so a Hugging Face checkpoint itself is read with the NeoX pairing (hf_config.cc);
//   - optional Q/K/V biases; attention scale 1/sqrt(head_dim); no embedding scale;
//   - Llama 3.1 RoPE frequency factors (rope_freqs.weight / rope_scaling type llama3);
//   - Mistral's sliding window on every layer when the config gives one;
//   - Mixtral (transformers modeling_mixtral.py; llama.cpp "llama" with expert_count): a
//     mixture-of-experts FFN, softmax router, the top-k probabilities renormalised to sum 1,
//     experts feed_forward_length (intermediate_size) wide.
#include "model/families/families.h"

namespace larql {

const ArchRecord& llama_record() {
  static const ArchRecord r = [] {
    ArchRecord a;
    a.arch = "llama";
    a.title = "Llama 2 / 3 / 3.1+, Mistral";
    a.hf_architectures = {"LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM"};
    a.hf_model_types = {"llama", "mistral", "mixtral"};
    a.activation = Activation::Silu;
    a.rope_form = RopeForm::Adjacent;
    a.swa_pattern = 1;
    a.moe = true;  // Mixtral: llama.cpp's "llama" with experts, the top-k weights renormalised
    a.moe_weights_norm = true;
    a.rope_base = 10000;
    a.hf_default_norm_eps = 1e-6;
    a.residual_sufficient = true;
    a.bands = {{32, 0, 12, 13, 25, 26, 31}, {40, 0, 15, 16, 32, 33, 39}, {80, 0, 31, 32, 63, 64, 79}};
    return a;
  }();
  return r;
}

}  // namespace larql
