// Gemma 3: config from GGUF metadata plus the family defaults the GGUF does not carry.
//
// Sources for the defaults (checked against google/gemma-3-270m and gemma-3-4b-it config.json,
// and llama.cpp's llama-model.cpp LLM_ARCH_GEMMA3 loader):
//   - rope_local_base_freq = 10000 for sliding layers (config.json; not written by the converter)
//   - sliding_window_pattern = 6: layer i is global iff (i + 1) % 6 == 0 (config.json layer_types)
//   - query_pre_attn_scalar = head_dim (256) for every size except 27B (hidden / n_heads)
//   - embedding scaled by sqrt(hidden); RMSNorm weights in GGUF already include the +1
//   - RoPE scaling: the 4B+ models use linear x8 on global layers; when the GGUF carries
//     gemma3.rope.scaling.factor we apply it to global layers only.
#include <cmath>

#include "formats/gguf.h"
#include "model/config.h"
#include "util/error.h"

namespace larql {
namespace {

int64_t require_uint(const GgufFile& f, const std::string& key) {
  const auto v = f.get_uint(key);
  if (!v) throw Error(ErrorKind::Format, f.path() + ": required metadata key " + key + " is missing");
  if (*v == 0 || *v > (1ull << 31))
    throw Error(ErrorKind::Format, f.path() + ": metadata key " + key + " has implausible value " +
                                       std::to_string(*v));
  return static_cast<int64_t>(*v);
}

}  // namespace

ModelConfig gemma3_config_from_gguf(const GgufFile& f) {
  const std::string p = "gemma3.";
  ModelConfig c;
  c.arch = "gemma3";
  c.name = f.get_string("general.name").value_or("gemma3");
  c.n_layers = require_uint(f, p + "block_count");
  c.hidden = require_uint(f, p + "embedding_length");
  c.ffn = require_uint(f, p + "feed_forward_length");
  c.n_heads = require_uint(f, p + "attention.head_count");
  c.n_kv_heads = f.get_uint(p + "attention.head_count_kv").value_or(static_cast<uint64_t>(c.n_heads));
  c.head_dim = f.get_uint(p + "attention.key_length").value_or(static_cast<uint64_t>(c.hidden / c.n_heads));
  const auto vlen = f.get_uint(p + "attention.value_length").value_or(static_cast<uint64_t>(c.head_dim));
  if (static_cast<int64_t>(vlen) != c.head_dim)
    throw Error(ErrorKind::Unsupported, f.path() + ": key_length != value_length is not supported");
  if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0)
    throw Error(ErrorKind::Format, f.path() + ": head_count " + std::to_string(c.n_heads) +
                                       " is not a multiple of head_count_kv " + std::to_string(c.n_kv_heads));
  if (c.head_dim % 2 != 0 || c.head_dim > 1024)
    throw Error(ErrorKind::Format, f.path() + ": attention.key_length " + std::to_string(c.head_dim) +
                                       " must be even and <= 1024");
  c.context_length = static_cast<int64_t>(f.get_uint(p + "context_length").value_or(32768));
  c.norm_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-6));
  const auto n_tokens = f.get_array_size("tokenizer.ggml.tokens");
  if (!n_tokens) throw Error(ErrorKind::Format, f.path() + ": tokenizer.ggml.tokens is missing");
  c.vocab = static_cast<int64_t>(*n_tokens);
  // 27B uses hidden/heads; every other size uses head_dim (llama.cpp gemma3 loader).
  const double qpas = f.get_float(p + "attention.query_pre_attn_scalar").value_or(static_cast<double>(c.head_dim));
  c.attn_scale = static_cast<float>(1.0 / std::sqrt(qpas));
  c.embed_scale = std::sqrt(static_cast<float>(c.hidden));
  c.final_logit_softcap = static_cast<float>(f.get_float(p + "final_logit_softcapping").value_or(0.0));
  c.attn_logit_softcap = static_cast<float>(f.get_float(p + "attn_logit_softcapping").value_or(0.0));
  c.activation = Activation::GeluTanh;
  c.post_norms = true;
  c.qk_norm = true;
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;

  const double global_base = f.get_float(p + "rope.freq_base").value_or(1000000.0);
  const double local_base = f.get_float(p + "rope.freq_base_swa").value_or(10000.0);
  const double scaling = f.get_float(p + "rope.scaling.factor").value_or(1.0);
  const std::string scaling_type = f.get_string(p + "rope.scaling.type").value_or(scaling != 1.0 ? "linear" : "none");
  if (scaling_type != "none" && scaling_type != "linear")
    throw Error(ErrorKind::Unsupported, f.path() + ": rope.scaling.type '" + scaling_type + "' is not supported");
  const int64_t window = static_cast<int64_t>(f.get_uint(p + "attention.sliding_window").value_or(512));
  constexpr int kPattern = 6;
  c.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    LayerConfig& l = c.layers[static_cast<size_t>(i)];
    l.sliding = (i + 1) % kPattern != 0;
    l.window = l.sliding ? window : 0;
    l.rope_base = l.sliding ? local_base : global_base;
    l.rope_freq_scale = l.sliding ? 1.0 : 1.0 / (scaling > 0 ? scaling : 1.0);
  }
  return c;
}

}  // namespace larql
