// The registry of architecture records and what every family shares: llama.cpp's tensor names,
// the Llama naming of Hugging Face checkpoints, the sliding-layer patterns, Llama 3.1's RoPE
// frequency factors. model/arch.h.
#include "model/arch.h"

#include <cmath>
#include <numbers>

#include "model/families/families.h"
#include "util/error.h"

namespace larql {

const std::vector<const ArchRecord*>& arch_records() {
  static const std::vector<const ArchRecord*> kRecords = {&gemma3_record(), &llama_record(), &qwen2_record(),
                                                          &qwen3_record(),  &gemma2_record(), &phi3_record(),
                                                          &qwen2moe_record()};
  return kRecords;
}

const ArchRecord* find_arch(std::string_view arch) {
  for (const ArchRecord* r : arch_records())
    if (arch == r->arch) return r;
  return nullptr;
}

const ArchRecord& require_arch(std::string_view arch, const std::string& where) {
  if (const ArchRecord* r = find_arch(arch)) return *r;
  std::string list;
  for (const auto& a : supported_architectures()) list += (list.empty() ? "" : ", ") + a;
  throw Error(ErrorKind::Unsupported, where + ": architecture '" + std::string(arch) +
                                          "' is not supported (supported: " + list + ")");
}

const ArchRecord* find_arch_for_hf(std::string_view model_type, std::string_view architecture) {
  for (const ArchRecord* r : arch_records()) {
    for (const auto& a : r->hf_architectures)
      if (!architecture.empty() && a == architecture) return r;
    for (const auto& t : r->hf_model_types)
      if (!model_type.empty() && t == model_type) return r;
  }
  return nullptr;
}

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> kArchs = [] {
    std::vector<std::string> v;
    for (const ArchRecord* r : arch_records()) v.emplace_back(r->arch);
    return v;
  }();
  return kArchs;
}

std::string gguf_tensor_name(TensorRole role, int64_t layer) {
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
    case TensorRole::AttnQNorm: suffix = "attn_q_norm.weight"; break;
    case TensorRole::AttnKNorm: suffix = "attn_k_norm.weight"; break;
    case TensorRole::AttnOutput: suffix = "attn_output.weight"; break;
    case TensorRole::PostAttnNorm: suffix = "post_attention_norm.weight"; break;
    case TensorRole::FfnNorm: suffix = "ffn_norm.weight"; break;
    case TensorRole::FfnGate: suffix = "ffn_gate.weight"; break;
    case TensorRole::FfnUp: suffix = "ffn_up.weight"; break;
    case TensorRole::FfnDown: suffix = "ffn_down.weight"; break;
    case TensorRole::PostFfnNorm: suffix = "post_ffw_norm.weight"; break;
    case TensorRole::FfnGateInp: suffix = "ffn_gate_inp.weight"; break;
    case TensorRole::FfnGateExps: suffix = "ffn_gate_exps.weight"; break;
    case TensorRole::FfnUpExps: suffix = "ffn_up_exps.weight"; break;
    case TensorRole::FfnDownExps: suffix = "ffn_down_exps.weight"; break;
    case TensorRole::FfnGateInpShexp: suffix = "ffn_gate_inp_shexp.weight"; break;
    case TensorRole::FfnGateShexp: suffix = "ffn_gate_shexp.weight"; break;
    case TensorRole::FfnUpShexp: suffix = "ffn_up_shexp.weight"; break;
    case TensorRole::FfnDownShexp: suffix = "ffn_down_shexp.weight"; break;
  }
  return llama_cpp_tensor_name(suffix, layer);
}

std::string hf_llama_name(TensorRole role, int64_t layer) {
  const char* s = "";
  switch (role) {
    case TensorRole::TokenEmbd: return "model.embed_tokens.weight";
    case TensorRole::Output: return "lm_head.weight";
    case TensorRole::OutputNorm: return "model.norm.weight";
    case TensorRole::AttnNorm: s = "input_layernorm.weight"; break;
    case TensorRole::AttnQ: s = "self_attn.q_proj.weight"; break;
    case TensorRole::AttnK: s = "self_attn.k_proj.weight"; break;
    case TensorRole::AttnV: s = "self_attn.v_proj.weight"; break;
    case TensorRole::AttnQBias: s = "self_attn.q_proj.bias"; break;
    case TensorRole::AttnKBias: s = "self_attn.k_proj.bias"; break;
    case TensorRole::AttnVBias: s = "self_attn.v_proj.bias"; break;
    case TensorRole::AttnQNorm: s = "self_attn.q_norm.weight"; break;
    case TensorRole::AttnKNorm: s = "self_attn.k_norm.weight"; break;
    case TensorRole::AttnOutput: s = "self_attn.o_proj.weight"; break;
    case TensorRole::FfnNorm: s = "post_attention_layernorm.weight"; break;
    case TensorRole::FfnGate: s = "mlp.gate_proj.weight"; break;
    case TensorRole::FfnUp: s = "mlp.up_proj.weight"; break;
    case TensorRole::FfnDown: s = "mlp.down_proj.weight"; break;
    // Mixtral (transformers modeling_mixtral.py): the router is block_sparse_moe.gate; the experts
    // are separate tensors block_sparse_moe.experts.E.w1 (gate) / w3 (up) / w2 (down), which the
    // source stacks (hf_expert_name).
    case TensorRole::FfnGateInp: s = "block_sparse_moe.gate.weight"; break;
    case TensorRole::FfnGateExps: s = "block_sparse_moe.experts.*.w1.weight"; break;
    case TensorRole::FfnUpExps: s = "block_sparse_moe.experts.*.w3.weight"; break;
    case TensorRole::FfnDownExps: s = "block_sparse_moe.experts.*.w2.weight"; break;
    case TensorRole::PostAttnNorm:
    case TensorRole::PostFfnNorm:
    case TensorRole::FfnGateInpShexp:
    case TensorRole::FfnGateShexp:
    case TensorRole::FfnUpShexp:
    case TensorRole::FfnDownShexp: return "";  // Llama has no post norms and no shared expert
  }
  return "model.layers." + std::to_string(layer) + "." + s;
}

std::string hf_tensor_name(const ArchRecord& arch, TensorRole role, int64_t layer) {
  return arch.hf_name != nullptr ? arch.hf_name(role, layer) : hf_llama_name(role, layer);
}

std::optional<FusedRows> fused_rows(const ArchRecord& a, const ModelConfig& c, TensorRole role, bool hf) {
  const char* qkv = hf ? a.hf_fused_qkv : a.gguf_fused_qkv;
  const char* qkv_bias = hf ? a.hf_fused_qkv_bias : a.gguf_fused_qkv_bias;
  const char* gate_up = hf ? a.hf_fused_gate_up : a.gguf_fused_gate_up;
  const int64_t q = c.q_dim(), kv = c.kv_dim();
  auto part = [](const char* suffix, int64_t row0, int64_t rows, int64_t total) {
    return suffix ? std::optional<FusedRows>(FusedRows{suffix, row0, rows, total}) : std::nullopt;
  };
  switch (role) {
    case TensorRole::AttnQ: return part(qkv, 0, q, q + 2 * kv);
    case TensorRole::AttnK: return part(qkv, q, kv, q + 2 * kv);
    case TensorRole::AttnV: return part(qkv, q + kv, kv, q + 2 * kv);
    case TensorRole::AttnQBias: return part(qkv_bias, 0, q, q + 2 * kv);
    case TensorRole::AttnKBias: return part(qkv_bias, q, kv, q + 2 * kv);
    case TensorRole::AttnVBias: return part(qkv_bias, q + kv, kv, q + 2 * kv);
    case TensorRole::FfnGate: return part(gate_up, 0, c.ffn, 2 * c.ffn);
    case TensorRole::FfnUp: return part(gate_up, c.ffn, c.ffn, 2 * c.ffn);
    default: return std::nullopt;
  }
}

SourceTensor slice_rows(const SourceTensor& t, const FusedRows& p, const std::string& where) {
  // A matrix [cols, total rows], or a vector [total] read as rows of one value (a fused bias).
  const uint64_t total = t.dims.size() == 2 ? t.dims[1] : t.dims.size() == 1 ? t.dims[0] : 0;
  const int64_t row0 = p.row0, rows = p.rows;
  if (total != static_cast<uint64_t>(p.total) || total == 0 || t.nbytes % total != 0)
    throw Error(ErrorKind::Format, where + ": fused tensor '" + t.name + "' has " + std::to_string(total) +
                                       " rows, expected " + std::to_string(p.total) +
                                       " (the config's Q/K/V or gate/up widths)");
  const size_t row_bytes = t.nbytes / total;
  SourceTensor s = t;
  s.name = t.name + "[rows " + std::to_string(row0) + ":" + std::to_string(row0 + rows) + "]";
  s.dims.back() = static_cast<uint64_t>(rows);
  s.data = t.data + static_cast<size_t>(row0) * row_bytes;
  s.nbytes = static_cast<size_t>(rows) * row_bytes;
  return s;
}

std::map<std::string, vindex::Band> layer_bands_of(std::string_view arch, int64_t n_layers) {
  if (const ArchRecord* r = find_arch(arch))
    for (const KnownBands& b : r->bands)
      if (b.n_layers == n_layers)
        return {{"syntax", {b.syntax_lo, b.syntax_hi}},
                {"knowledge", {b.knowledge_lo, b.knowledge_hi}},
                {"output", {b.output_lo, b.output_hi}}};
  return vindex::default_layer_bands(n_layers);
}

bool swa_layer_slides(int64_t pattern, int64_t layer) {
  if (pattern <= 0) return false;
  if (pattern == 1) return true;
  return layer % pattern != pattern - 1;
}

std::vector<float> llama3_rope_factors(int64_t head_dim, double base, double factor, double low_freq_factor,
                                       double high_freq_factor, double original_context) {
  if (!(head_dim >= 2 && base > 0 && factor > 0 && low_freq_factor > 0 && high_freq_factor > low_freq_factor &&
        original_context > 0))
    throw Error(ErrorKind::InvalidArgument,
                "llama3 RoPE scaling needs factor, low_freq_factor < high_freq_factor and "
                "original_max_position_embeddings all > 0");
  const double low_wavelen = original_context / low_freq_factor;
  const double high_wavelen = original_context / high_freq_factor;
  std::vector<float> f(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const double freq = 1.0 / std::pow(base, 2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double wavelen = 2 * std::numbers::pi / freq;
    double r;
    if (wavelen < high_wavelen) {
      r = 1.0;
    } else if (wavelen > low_wavelen) {
      r = factor;
    } else {
      const double smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      r = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    f[static_cast<size_t>(i)] = static_cast<float>(r);
  }
  return f;
}

}  // namespace larql
