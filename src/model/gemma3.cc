// Gemma 3's family file: config from GGUF metadata plus the family defaults the GGUF does not
// carry, and llama.cpp's tensor names.
//
// Sources for the defaults (checked against google/gemma-3-270m and gemma-3-4b-it config.json,
// and llama.cpp's llama-model.cpp LLM_ARCH_GEMMA3 loader):
//   - rope_local_base_freq = 10000 for sliding layers (config.json; not written by the converter)
//   - sliding_window_pattern = 6: layer i is global iff (i + 1) % 6 == 0 (config.json layer_types)
//   - query_pre_attn_scalar = head_dim (256) for every size except 27B (hidden / n_heads)
//   - embedding scaled by sqrt(hidden); RMSNorm weights in GGUF already include the +1
//   - RoPE scaling: the 4B+ models use linear x8 on global layers; when the GGUF carries
//     gemma3.rope.scaling.factor we apply it to global layers only.
#include <algorithm>
#include <cmath>
#include <optional>

#include "formats/gguf.h"
#include "model/config.h"
#include "model/family.h"
#include "util/error.h"

namespace larql {
namespace {

namespace k = config_keys;

std::string gemma3_tensor_name(TensorRole role, int64_t layer) {
  const char* suffix = "";
  switch (role) {
    case TensorRole::TokenEmbd: suffix = "token_embd.weight"; break;
    case TensorRole::Output: suffix = "output.weight"; break;
    case TensorRole::OutputNorm: suffix = "output_norm.weight"; break;
    case TensorRole::AttnNorm: suffix = "attn_norm.weight"; break;
    case TensorRole::AttnQ: suffix = "attn_q.weight"; break;
    case TensorRole::AttnK: suffix = "attn_k.weight"; break;
    case TensorRole::AttnV: suffix = "attn_v.weight"; break;
    case TensorRole::AttnQNorm: suffix = "attn_q_norm.weight"; break;
    case TensorRole::AttnKNorm: suffix = "attn_k_norm.weight"; break;
    case TensorRole::AttnOutput: suffix = "attn_output.weight"; break;
    case TensorRole::PostAttnNorm: suffix = "post_attention_norm.weight"; break;
    case TensorRole::FfnNorm: suffix = "ffn_norm.weight"; break;
    case TensorRole::FfnGate: suffix = "ffn_gate.weight"; break;
    case TensorRole::FfnUp: suffix = "ffn_up.weight"; break;
    case TensorRole::FfnDown: suffix = "ffn_down.weight"; break;
    case TensorRole::PostFfnNorm: suffix = "post_ffw_norm.weight"; break;
    case TensorRole::AttnQBias:
    case TensorRole::AttnKBias:
    case TensorRole::AttnVBias: return "";  // Gemma has no attention biases
  }
  return llama_cpp_tensor_name(suffix, layer);
}

}  // namespace

ModelConfig gemma3_config_from_gguf(const GgufFile& f) {
  const std::string p = "gemma3.";
  ModelConfig c;
  c.arch = "gemma3";
  c.name = f.get_string("general.name").value_or("gemma3");
  c.n_layers = require_count(f, p + k::kBlockCount);
  c.hidden = require_count(f, p + k::kEmbeddingLength);
  c.ffn = require_count(f, p + k::kFeedForwardLength);
  c.n_heads = require_count(f, p + k::kHeadCount);
  c.n_kv_heads = read_count(f, p + k::kHeadCountKv).value_or(c.n_heads);
  c.head_dim = read_count(f, p + k::kKeyLength).value_or(c.n_heads > 0 ? c.hidden / c.n_heads : 0);
  const int64_t vlen = read_count(f, p + k::kValueLength).value_or(c.head_dim);
  if (vlen != c.head_dim)
    throw Error(ErrorKind::Unsupported, f.path() + ": " + p + k::kValueLength + " = " + std::to_string(vlen) +
                                            " differs from " + p + k::kKeyLength + " = " + std::to_string(c.head_dim) +
                                            " (key and value heads of different widths are not supported)");
  c.context_length = read_count(f, p + k::kContextLength).value_or(32768);
  c.norm_eps = static_cast<float>(f.get_float(p + k::kRmsEpsilon).value_or(1e-6));
  const auto n_tokens = f.get_array_size(k::kTokens);
  if (!n_tokens) throw Error(ErrorKind::Format, f.path() + ": required metadata key " + k::kTokens + " is missing");
  c.vocab = static_cast<int64_t>(std::min<uint64_t>(*n_tokens, static_cast<uint64_t>(kMaxCount)));
  // 27B uses hidden/heads; every other size uses head_dim (llama.cpp gemma3 loader).
  const double qpas = f.get_float(p + k::kQueryPreAttnScalar).value_or(static_cast<double>(c.head_dim));
  c.attn_scale = static_cast<float>(1.0 / std::sqrt(qpas));
  c.embed_scale = std::sqrt(static_cast<float>(c.hidden));
  c.final_logit_softcap = static_cast<float>(f.get_float(p + k::kFinalLogitSoftcap).value_or(0.0));
  c.attn_logit_softcap = static_cast<float>(f.get_float(p + k::kAttnLogitSoftcap).value_or(0.0));
  c.activation = Activation::GeluTanh;
  c.post_norms = true;
  c.qk_norm = true;
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.qkv_bias = false;

  const double global_base = f.get_float(p + k::kRopeFreqBase).value_or(1000000.0);
  const double local_base = f.get_float(p + k::kRopeFreqBaseSwa).value_or(10000.0);
  const double scaling = f.get_float(p + k::kRopeScalingFactor).value_or(1.0);
  const std::string scaling_type =
      f.get_string(p + k::kRopeScalingType).value_or(scaling != 1.0 ? "linear" : "none");
  if (scaling_type != "none" && scaling_type != "linear")
    throw Error(ErrorKind::Unsupported, f.path() + ": " + p + k::kRopeScalingType + " = '" + scaling_type +
                                            "' is not supported (only none and linear)");
  const int64_t window = read_count(f, p + k::kSlidingWindow).value_or(512);
  // Every block has at least one tensor: a larger count cannot be right, and would size the
  // per-layer table by a number the file does not back (validate_config checks the rest).
  if (c.n_layers > static_cast<int64_t>(f.tensors().size()))
    throw Error(ErrorKind::Format, f.path() + ": " + p + k::kBlockCount + " = " + std::to_string(c.n_layers) +
                                       " is more than the file's " + std::to_string(f.tensors().size()) + " tensors");
  constexpr int kPattern = 6;
  c.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    LayerConfig& l = c.layers[static_cast<size_t>(i)];
    l.sliding = (i + 1) % kPattern != 0;
    l.window = l.sliding ? window : 0;
    l.rope_form = RopeForm::NeoX;  // llama.cpp: LLM_ARCH_GEMMA3 -> LLAMA_ROPE_TYPE_NEOX
    l.rope_base = l.sliding ? local_base : global_base;
    l.rope_freq_scale = l.sliding ? 1.0 : 1.0 / scaling;
  }
  return c;
}

const GgufFamily& gemma3_family() {
  static const GgufFamily kFamily{"gemma3", gemma3_config_from_gguf, gemma3_tensor_name};
  return kFamily;
}

}  // namespace larql
