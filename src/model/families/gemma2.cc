// Gemma 2 (Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical Size";
// transformers modeling_gemma2.py; llama.cpp llama-model.cpp LLM_ARCH_GEMMA2):
//   - the Gemma layer with post norms (no q/k norm), GELU-tanh, embedding times sqrt(hidden);
//   - attention logits soft-capped (attn_logit_softcapping, 50) and final logits
//     (final_logit_softcapping, 30);
//   - sliding window (4096) on every other layer, starting with layer 0 (llama.cpp
//     set_swa_pattern(2); transformers layer_types);
//   - one RoPE base for all layers (10000), NeoX pairing;
//   - attention scale 1/sqrt(query_pre_attn_scalar): config.json carries it; llama.cpp does not
//     read it from GGUF but uses head_dim, or hidden / n_heads for the 27B (46 layers): so does
//     the hook below when the GGUF is silent.
#include <cmath>

#include "formats/gguf.h"
#include "model/families/families.h"

namespace larql {
namespace {

void gemma2_gguf(const GgufFile& f, ModelConfig& c) {
  if (!f.find("gemma2.attention.query_pre_attn_scalar") && c.n_layers == 46 && c.n_heads > 0)
    c.attn_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.hidden / c.n_heads)));
}

}  // namespace

const ArchRecord& gemma2_record() {
  static const ArchRecord r = [] {
    ArchRecord a;
    a.arch = "gemma2";
    a.title = "Gemma 2";
    a.hf_architectures = {"Gemma2ForCausalLM"};
    a.hf_model_types = {"gemma2"};
    a.activation = Activation::GeluTanh;
    a.rope_form = RopeForm::NeoX;
    a.post_norms = true;
    a.embed_scale_sqrt_hidden = true;
    a.attn_scale_from_query_pre_attn_scalar = true;
    a.hf_norm_plus_one = true;
    a.swa_pattern = 2;
    a.default_window = 4096;
    a.rope_base = 10000;
    a.default_context = 8192;
    a.default_norm_eps = 1e-6;
    a.hf_default_tied = true;
    a.hf_default_head_dim = 256;
    a.hf_default_vocab = 256000;
    a.hf_name = hf_gemma_name;
    a.residual_sufficient = true;
    a.gguf_hook = gemma2_gguf;
    return a;
  }();
  return r;
}

}  // namespace larql
