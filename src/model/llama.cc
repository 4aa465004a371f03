// Llama's family file: config from `llama.*` GGUF metadata and llama.cpp's tensor names.
//
// Source: llama.cpp llama-model.cpp, LLM_ARCH_LLAMA (hparams and tensors) and llm_build_llama
// (graph), llama-cpp-python 0.3.36:
//   - RMSNorm before attention and FFN, no post-norms, no q/k norm; SiLU-gated FFN
//     (down(silu(gate x) * up x));
//   - RoPE "normal" (LLAMA_ROPE_TYPE_NORM): adjacent pairs (2i, 2i+1), theta base
//     llama.rope.freq_base (default 10000), linear scaling by llama.rope.scaling.factor;
//   - optional Q/K/V biases attn_{q,k,v}.bias, added after the projection;
//   - attention scale 1/sqrt(head_dim); no embedding scale, no softcapping;
//   - lm_head output.weight, tied to token_embd.weight when absent.
// Not supported (Error{Unsupported}): partial rotary (rope.dimension_count != head_dim), the
// Llama 3.1 frequency table (rope_freqs.weight), YaRN / other scaling types, mixture of experts.
#include <algorithm>
#include <cmath>

#include "formats/gguf.h"
#include "model/config.h"
#include "model/family.h"
#include "util/error.h"

namespace larql {
namespace {

namespace k = config_keys;

std::string llama_tensor_name(TensorRole role, int64_t layer) {
  const char* suffix = "";
  switch (role) {
    case TensorRole::TokenEmbd: suffix = "token_embd.weight"; break;
    case TensorRole::Output: suffix = "output.weight"; break;
    case TensorRole::OutputNorm: suffix = "output_norm.weight"; break;
    case TensorRole::AttnNorm: suffix = "attn_norm.weight"; break;
    case TensorRole::AttnQ: suffix = "attn_q.weight"; break;
    case TensorRole::AttnK: suffix = "attn_k.weight"; break;
    case TensorRole::AttnV: suffix = "attn_v.weight"; break;
    case TensorRole::AttnQBias: suffix = "attn_q.bias"; break;
    case TensorRole::AttnKBias: suffix = "attn_k.bias"; break;
    case TensorRole::AttnVBias: suffix = "attn_v.bias"; break;
    case TensorRole::AttnOutput: suffix = "attn_output.weight"; break;
    case TensorRole::FfnNorm: suffix = "ffn_norm.weight"; break;
    case TensorRole::FfnGate: suffix = "ffn_gate.weight"; break;
    case TensorRole::FfnUp: suffix = "ffn_up.weight"; break;
    case TensorRole::FfnDown: suffix = "ffn_down.weight"; break;
    case TensorRole::AttnQNorm:
    case TensorRole::AttnKNorm:
    case TensorRole::PostAttnNorm:
    case TensorRole::PostFfnNorm: return "";  // Llama has none
  }
  return llama_cpp_tensor_name(suffix, layer);
}

[[noreturn]] void unsupported(const GgufFile& f, const std::string& what) {
  throw Error(ErrorKind::Unsupported, f.path() + ": " + what);
}

}  // namespace

ModelConfig llama_config_from_gguf(const GgufFile& f) {
  const std::string p = "llama.";
  ModelConfig c;
  c.arch = "llama";
  c.name = f.get_string("general.name").value_or("llama");
  c.n_layers = require_count(f, p + k::kBlockCount);
  c.hidden = require_count(f, p + k::kEmbeddingLength);
  c.ffn = require_count(f, p + k::kFeedForwardLength);
  c.n_heads = require_count(f, p + k::kHeadCount);
  c.n_kv_heads = read_count(f, p + k::kHeadCountKv).value_or(c.n_heads);
  c.head_dim = read_count(f, p + k::kKeyLength).value_or(c.n_heads > 0 ? c.hidden / c.n_heads : 0);
  const int64_t vlen = read_count(f, p + k::kValueLength).value_or(c.head_dim);
  if (vlen != c.head_dim)
    unsupported(f, p + k::kValueLength + " = " + std::to_string(vlen) + " differs from " + p + k::kKeyLength +
                       " = " + std::to_string(c.head_dim) +
                       " (key and value heads of different widths are not supported)");
  const int64_t n_rot = read_count(f, p + k::kRopeDimensionCount).value_or(c.head_dim);
  if (n_rot != c.head_dim)
    unsupported(f, p + k::kRopeDimensionCount + " = " + std::to_string(n_rot) + " differs from head_dim " +
                       std::to_string(c.head_dim) + " (partial rotary embeddings are not supported)");
  if (read_count(f, p + "expert_count").value_or(0) > 0 || f.find_tensor("blk.0.ffn_gate_inp.weight") != nullptr)
    unsupported(f, "mixture-of-experts Llama models are not supported");
  if (f.find_tensor("rope_freqs.weight") != nullptr)
    unsupported(f, "tensor rope_freqs.weight (Llama 3.1 RoPE frequency factors) is not supported");
  c.context_length = require_count(f, p + k::kContextLength);
  const auto eps = f.get_float(p + k::kRmsEpsilon);
  if (!eps) throw Error(ErrorKind::Format, f.path() + ": required metadata key " + p + k::kRmsEpsilon + " is missing");
  c.norm_eps = static_cast<float>(*eps);
  const auto n_tokens = f.get_array_size(k::kTokens);
  if (!n_tokens) throw Error(ErrorKind::Format, f.path() + ": required metadata key " + k::kTokens + " is missing");
  c.vocab = static_cast<int64_t>(std::min<uint64_t>(*n_tokens, static_cast<uint64_t>(kMaxCount)));
  c.attn_scale = c.head_dim > 0 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim))) : 0.0f;
  c.embed_scale = 1.0f;
  c.final_logit_softcap = 0;
  c.attn_logit_softcap = 0;
  c.activation = Activation::Silu;
  c.post_norms = false;
  c.qk_norm = false;
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;

  const double base = f.get_float(p + k::kRopeFreqBase).value_or(10000.0);
  const double scaling = f.get_float(p + k::kRopeScalingFactor).value_or(1.0);
  const std::string scaling_type = f.get_string(p + k::kRopeScalingType).value_or(scaling != 1.0 ? "linear" : "none");
  if (scaling_type != "none" && scaling_type != "linear")
    unsupported(f, p + k::kRopeScalingType + " = '" + scaling_type + "' is not supported (only none and linear)");
  if (c.n_layers > static_cast<int64_t>(f.tensors().size()))
    throw Error(ErrorKind::Format, f.path() + ": " + p + k::kBlockCount + " = " + std::to_string(c.n_layers) +
                                       " is more than the file's " + std::to_string(f.tensors().size()) + " tensors");
  c.layers.resize(static_cast<size_t>(c.n_layers));
  for (LayerConfig& l : c.layers) {
    l.sliding = false;
    l.window = 0;
    l.rope_form = RopeForm::Adjacent;
    l.rope_base = base;
    l.rope_freq_scale = 1.0 / scaling;
  }
  return c;
}

const GgufFamily& llama_family() {
  static const GgufFamily kFamily{"llama", llama_config_from_gguf, llama_tensor_name};
  return kFamily;
}

}  // namespace larql
