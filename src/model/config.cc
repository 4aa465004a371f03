// config_from_gguf: the generic reader driven by the architecture record (model/arch.h), then the one validation of
// the result.
#include "model/config.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>

#include "formats/gguf.h"
#include "model/arch.h"
#include "util/error.h"

namespace larql {
namespace {

namespace k = config_keys;

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

class Validator {
 public:
  Validator(const ModelConfig& c, const GgufFile& f) : c_(c), f_(f), p_(c.arch + ".") {}

  std::string key(const char* suffix) const { return p_ + suffix; }

  [[noreturn]] void refuse(const std::string& what) const {
    throw Error(ErrorKind::Format, f_.path() + ": " + what);
  }

  /// The value to show for a float key: the file's own number when it holds one, else `used`.
  std::string shown(const char* suffix, double used) const {
    try {
      if (auto v = f_.get_float(key(suffix))) return num(*v);
    } catch (const Error&) {
    }
    return num(used);
  }

  void count_at_least_1(const char* suffix, int64_t v) const {
    if (v < 1) refuse(key(suffix) + " = " + std::to_string(v) + " is outside [1, " + std::to_string(kMaxCount) + "]");
  }

  /// A float that must be finite and > lo (open) or >= lo (closed), and < hi when hi is finite.
  void real_in(const char* suffix, double used, double lo, bool lo_open, double hi) const {
    const bool ok = std::isfinite(used) && (lo_open ? used > lo : used >= lo) && used < hi;
    if (!ok)
      refuse(key(suffix) + " = " + shown(suffix, used) + " is outside " + (lo_open ? "(" : "[") + num(lo) + ", " +
             (std::isfinite(hi) ? num(hi) : std::string("inf")) + ")");
  }

  /// `tensor`'s rows (dims[1]) must be `want`, which `because` explains in keys.
  void rows_are(const std::string& tensor, int64_t want, const std::string& because) const {
    const GgufTensor* t = f_.find_tensor(tensor);
    if (t == nullptr || t->dims.size() != 2) return;  // Model::load names a missing or flat tensor
    if (t->dims[1] != static_cast<uint64_t>(want))
      refuse(because + " but " + tensor + " has " + std::to_string(t->dims[1]) + " rows");
  }

  void run() const {
    const double inf = std::numeric_limits<double>::infinity();
    count_at_least_1(k::kBlockCount, c_.n_layers);
    count_at_least_1(k::kEmbeddingLength, c_.hidden);
    count_at_least_1(k::kFeedForwardLength, c_.ffn);
    count_at_least_1(k::kHeadCount, c_.n_heads);
    count_at_least_1(k::kHeadCountKv, c_.n_kv_heads);
    if (c_.n_heads % c_.n_kv_heads != 0)
      refuse(key(k::kHeadCount) + " = " + std::to_string(c_.n_heads) + " is not a multiple of " +
             key(k::kHeadCountKv) + " = " + std::to_string(c_.n_kv_heads));
    if (!f_.find(key(k::kKeyLength)) && c_.hidden % c_.n_heads != 0)
      refuse(key(k::kEmbeddingLength) + " = " + std::to_string(c_.hidden) + " is not a multiple of " +
             key(k::kHeadCount) + " = " + std::to_string(c_.n_heads) + " (head_dim is derived from them when " +
             key(k::kKeyLength) + " is absent)");
    if (c_.head_dim < 2 || c_.head_dim > kMaxHeadDim || c_.head_dim % 2 != 0)
      refuse(key(k::kKeyLength) + " = " + std::to_string(c_.head_dim) + " must be even and in [2, " +
             std::to_string(kMaxHeadDim) + "]");
    if (c_.context_length < 1 || c_.context_length > kMaxContextLength)
      refuse(key(k::kContextLength) + " = " + std::to_string(c_.context_length) + " is outside [1, " +
             std::to_string(kMaxContextLength) + "]");

    real_in(k::kRmsEpsilon, c_.norm_eps, 0, true, 1);
    if (!(std::isfinite(c_.attn_scale) && c_.attn_scale > 0))  // attn_scale = 1/sqrt(scalar)
      refuse(key(k::kQueryPreAttnScalar) + " = " + shown(k::kQueryPreAttnScalar, static_cast<double>(c_.head_dim)) +
             " must be finite and > 0 (with 1/sqrt of it finite)");
    real_in(k::kFinalLogitSoftcap, c_.final_logit_softcap, 0, false, inf);
    real_in(k::kAttnLogitSoftcap, c_.attn_logit_softcap, 0, false, inf);

    for (const LayerConfig& l : c_.layers) {
      if (l.sliding && l.window < 1)
        refuse(key(k::kSlidingWindow) + " = " + std::to_string(l.window) + " is outside [1, " +
               std::to_string(kMaxCount) + "]");
      real_in(l.sliding ? k::kRopeFreqBaseSwa : k::kRopeFreqBase, l.rope_base, 0, true, inf);
      if (!(std::isfinite(l.rope_freq_scale) && l.rope_freq_scale > 0))  // freq_scale = 1/factor
        refuse(key(k::kRopeScalingFactor) + " = " + shown(k::kRopeScalingFactor, 1.0 / l.rope_freq_scale) +
               " must be finite and > 0");
    }

    // The vocabulary and the tensors the config sizes.
    const uint64_t n_tokens = f_.get_array_size(k::kTokens).value_or(static_cast<uint64_t>(c_.vocab));
    if (n_tokens < 1 || n_tokens > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
      refuse(std::string(k::kTokens) + " has " + std::to_string(n_tokens) + " entries (must be 1 .. 2^31-1)");
    if (const GgufTensor* e = f_.find_tensor("token_embd.weight"); e != nullptr && !e->dims.empty() &&
                                                                   e->dims[0] != static_cast<uint64_t>(c_.hidden))
      refuse(key(k::kEmbeddingLength) + " = " + std::to_string(c_.hidden) + " but token_embd.weight rows hold " +
             std::to_string(e->dims[0]) + " values");
    for (const char* t : {"token_embd.weight", "output.weight"})
      rows_are(t, c_.vocab, std::string(k::kTokens) + " has " + std::to_string(n_tokens) + " entries");
    rows_are("blk.0.attn_q.weight", c_.n_heads * c_.head_dim,
             key(k::kHeadCount) + " x " + key(k::kKeyLength) + " = " + std::to_string(c_.n_heads) + " x " +
                 std::to_string(c_.head_dim));
    rows_are("blk.0.attn_k.weight", c_.n_kv_heads * c_.head_dim,
             key(k::kHeadCountKv) + " x " + key(k::kKeyLength) + " = " + std::to_string(c_.n_kv_heads) + " x " +
                 std::to_string(c_.head_dim));
    const ArchRecord* rec = find_arch(c_.arch);
    if (rec == nullptr || rec->gguf_fused_gate_up == nullptr)  // a fused gate/up has 2 x ffn rows
      rows_are("blk.0.ffn_up.weight", c_.ffn, key(k::kFeedForwardLength) + " = " + std::to_string(c_.ffn));
    rows_are("blk.0.ffn_gate_inp.weight", c_.n_experts, key("expert_count") + " = " + std::to_string(c_.n_experts));

    // No block beyond block_count: its tensors would be silently ignored.
    for (const GgufTensor& t : f_.tensors()) {
      if (t.name.rfind("blk.", 0) != 0) continue;
      char* end = nullptr;
      const unsigned long long n = std::strtoull(t.name.c_str() + 4, &end, 10);
      if (end != t.name.c_str() + 4 && *end == '.' && n >= static_cast<unsigned long long>(c_.n_layers))
        refuse(key(k::kBlockCount) + " = " + std::to_string(c_.n_layers) + " but the file has tensor '" + t.name +
               "' of block " + std::to_string(n));
    }
  }

 private:
  const ModelConfig& c_;
  const GgufFile& f_;
  std::string p_;
};

/// The generic reader: `<arch>.*` keys as llama.cpp's load_hparams reads them, the record's
/// defaults where the file is silent.
ModelConfig read_gguf_config(const GgufFile& f, const ArchRecord& rec) {
  const std::string p = std::string(rec.arch) + ".";
  auto unsupported = [&](const std::string& what) {
    throw Error(ErrorKind::Unsupported, f.path() + ": " + what);
  };
  auto missing = [&](const std::string& key) {
    throw Error(ErrorKind::Format, f.path() + ": required metadata key " + key + " is missing");
  };
  ModelConfig c;
  c.arch = rec.arch;
  c.name = f.get_string("general.name").value_or(rec.arch);
  c.n_layers = require_count(f, p + k::kBlockCount);
  c.hidden = require_count(f, p + k::kEmbeddingLength);
  c.ffn = require_count(f, p + k::kFeedForwardLength);
  c.n_heads = require_count(f, p + k::kHeadCount);
  c.n_kv_heads = read_count(f, p + k::kHeadCountKv).value_or(c.n_heads);
  c.head_dim = read_count(f, p + k::kKeyLength).value_or(c.n_heads > 0 ? c.hidden / c.n_heads : 0);
  const int64_t vlen = read_count(f, p + k::kValueLength).value_or(c.head_dim);
  if (vlen != c.head_dim)
    unsupported(p + k::kValueLength + " = " + std::to_string(vlen) + " differs from " + p + k::kKeyLength + " = " +
                std::to_string(c.head_dim) + " (key and value heads of different widths are not supported)");
  const int64_t n_rot = read_count(f, p + k::kRopeDimensionCount).value_or(c.head_dim);
  if (n_rot != c.head_dim)
    unsupported(p + k::kRopeDimensionCount + " = " + std::to_string(n_rot) + " differs from head_dim " +
                std::to_string(c.head_dim) + " (partial rotary embeddings are not supported)");
  // Mixture of experts (llama.cpp LLM_KV_EXPERT_*): the counts, each expert's width (the
  // family's FFN width unless expert_feed_forward_length says), the shared expert's.
  const auto n_exp = read_count(f, p + "expert_count");
  const bool has_router = f.find_tensor("blk.0.ffn_gate_inp.weight") != nullptr;
  if (n_exp.value_or(0) > 0 || has_router) {
    if (!rec.moe) unsupported(p + "expert_count: mixture-of-experts " + rec.title + " models are not supported");
    if (n_exp.value_or(0) < 1)
      throw Error(ErrorKind::Format, f.path() + ": " + p + "expert_count " +
                                         (n_exp ? "= " + std::to_string(*n_exp) : std::string("is missing")) +
                                         " but the file has expert tensors (blk.0.ffn_gate_inp.weight)");
    c.n_experts = *n_exp;
    c.n_experts_used = require_count(f, p + "expert_used_count");
    if (c.n_experts_used < 1 || c.n_experts_used > c.n_experts)
      throw Error(ErrorKind::Format, f.path() + ": " + p + "expert_used_count = " + std::to_string(c.n_experts_used) +
                                         " is outside [1, " + p + "expert_count = " + std::to_string(c.n_experts) + "]");
    // 0 stands for absent, as llama.cpp reads them (n_ff_exp ? n_ff_exp : ..., n_ff_shexp ? ... : n_ff).
    c.expert_ffn = read_count(f, p + "expert_feed_forward_length").value_or(0);
    if (c.expert_ffn == 0) c.expert_ffn = rec.moe_shared_expert ? c.ffn / c.n_experts_used : c.ffn;
    c.expert_weights_norm = rec.moe_weights_norm;
    if (rec.moe_shared_expert) {
      c.shared_expert_ffn = read_count(f, p + "expert_shared_feed_forward_length").value_or(0);
      if (c.shared_expert_ffn == 0) c.shared_expert_ffn = c.ffn;
    }
    if (c.expert_ffn < 1)
      throw Error(ErrorKind::Format, f.path() + ": " + p + "feed_forward_length = " + std::to_string(c.ffn) +
                                         " leaves each expert no width");
  }
  if (const auto ctx = read_count(f, p + k::kContextLength)) {
    c.context_length = *ctx;
  } else {
    if (rec.default_context == 0) missing(p + k::kContextLength);
    c.context_length = rec.default_context;
  }
  if (const auto eps = f.get_float(p + k::kRmsEpsilon)) {
    c.norm_eps = static_cast<float>(*eps);
  } else {
    if (rec.default_norm_eps == 0) missing(p + k::kRmsEpsilon);
    c.norm_eps = static_cast<float>(rec.default_norm_eps);
  }
  const auto n_tokens = f.get_array_size(k::kTokens);
  if (!n_tokens) missing(k::kTokens);
  c.vocab = static_cast<int64_t>(std::min<uint64_t>(*n_tokens, static_cast<uint64_t>(kMaxCount)));
  const double qpas = rec.attn_scale_from_query_pre_attn_scalar
                          ? f.get_float(p + k::kQueryPreAttnScalar).value_or(static_cast<double>(c.head_dim))
                          : static_cast<double>(c.head_dim);
  c.attn_scale = static_cast<float>(1.0 / std::sqrt(qpas));
  c.embed_scale = rec.embed_scale_sqrt_hidden ? std::sqrt(static_cast<float>(c.hidden)) : 1.0f;
  c.final_logit_softcap = static_cast<float>(f.get_float(p + k::kFinalLogitSoftcap).value_or(0.0));
  c.attn_logit_softcap = static_cast<float>(f.get_float(p + k::kAttnLogitSoftcap).value_or(0.0));
  c.activation = rec.activation;
  c.post_norms = rec.post_norms;
  c.qk_norm = rec.qk_norm;
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.qkv_bias = rec.qkv_bias_always || f.find_tensor("blk.0.attn_q.bias") != nullptr ||
               f.find_tensor("blk.0.attn_qkv.bias") != nullptr;

  const double base = f.get_float(p + k::kRopeFreqBase).value_or(rec.rope_base);
  const double base_swa = f.get_float(p + k::kRopeFreqBaseSwa).value_or(rec.rope_base_swa > 0 ? rec.rope_base_swa : base);
  const double scaling = f.get_float(p + k::kRopeScalingFactor).value_or(1.0);
  const std::string scaling_type =
      f.get_string(p + k::kRopeScalingType).value_or(scaling != 1.0 ? "linear" : "none");
  if (scaling_type != "none" && scaling_type != "linear")
    unsupported(p + k::kRopeScalingType + " = '" + scaling_type + "' is not supported (only none and linear)");
  const double linear = scaling_type == "linear" ? scaling : 1.0;
  if (const GgufTensor* rf = f.find_tensor("rope_freqs.weight")) {
    // Llama 3.1's frequency factors: head_dim / 2 f32 values, each dividing one frequency.
    const uint64_t n = rf->dims.empty() ? 0 : rf->dims[0];
    if (rf->type != DType::F32 || rf->dims.size() != 1 || n != static_cast<uint64_t>(c.head_dim / 2))
      throw Error(ErrorKind::Format, f.path() + ": tensor rope_freqs.weight must be F32 [" +
                                         std::to_string(c.head_dim / 2) + "] (head_dim / 2)");
    c.rope_freq_factors.resize(static_cast<size_t>(n));
    std::memcpy(c.rope_freq_factors.data(), rf->data, n * sizeof(float));
    for (float x : c.rope_freq_factors)
      if (!(std::isfinite(x) && x > 0))
        throw Error(ErrorKind::Format, f.path() + ": tensor rope_freqs.weight holds " + num(x) + " (factors must be finite and > 0)");
  }
  const int64_t window = rec.swa_pattern > 0 ? read_count(f, p + k::kSlidingWindow).value_or(rec.default_window) : 0;
  // llama.cpp load_swa_pattern: the key overrides the family's pattern (a per-layer array form
  // exists too; no conversion larql has seen writes it).
  int64_t pattern = rec.swa_pattern;
  const std::string pattern_key = p + "attention.sliding_window_pattern";
  if (f.find(pattern_key)) {
    const auto v = f.get_uint(pattern_key);
    if (!v) unsupported(pattern_key + " is not an unsigned integer (a per-layer array is not supported)");
    if (*v < 1 || *v > static_cast<uint64_t>(kMaxCount))
      throw Error(ErrorKind::Format, f.path() + ": " + pattern_key + " = " + std::to_string(*v) + " is outside [1, 2^31]");
    pattern = static_cast<int64_t>(*v);
  }
  // Every block has at least one tensor: a larger count cannot be right, and would size the
  // per-layer table by a number the file does not back (validate_config checks the rest).
  if (c.n_layers > static_cast<int64_t>(f.tensors().size()))
    throw Error(ErrorKind::Format, f.path() + ": " + p + k::kBlockCount + " = " + std::to_string(c.n_layers) +
                                       " is more than the file's " + std::to_string(f.tensors().size()) + " tensors");
  c.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    LayerConfig& l = c.layers[static_cast<size_t>(i)];
    // A family that always slides (Gemma) keeps a window of 0 to be refused by validation; for
    // the others 0 means none (llama.cpp's Phi-3 converter writes 0 for no window).
    l.sliding = (window > 0 || rec.default_window > 0) && swa_layer_slides(pattern, i);
    l.window = l.sliding ? window : 0;
    l.rope_form = rec.rope_form;
    l.rope_base = l.sliding ? base_swa : base;
    l.rope_freq_scale = l.sliding && rec.rope_scaling_global_only ? 1.0 : 1.0 / linear;
  }
  return c;
}

}  // namespace

std::optional<int64_t> read_count(const GgufFile& f, const std::string& key) {
  const auto v = f.get_uint(key);
  if (!v) return std::nullopt;
  if (*v > static_cast<uint64_t>(kMaxCount))
    throw Error(ErrorKind::Format, f.path() + ": " + key + " = " + std::to_string(*v) + " is outside [1, " +
                                       std::to_string(kMaxCount) + "]");
  return static_cast<int64_t>(*v);
}

int64_t require_count(const GgufFile& f, const std::string& key) {
  const auto v = read_count(f, key);
  if (!v) throw Error(ErrorKind::Format, f.path() + ": required metadata key " + key + " is missing");
  return *v;
}

std::string llama_cpp_tensor_name(const char* suffix, int64_t layer) {
  return layer >= 0 ? "blk." + std::to_string(layer) + "." + suffix : std::string(suffix);
}

void validate_config(const ModelConfig& config, const GgufFile& file) { Validator(config, file).run(); }

ModelConfig config_from_gguf(const GgufFile& file) {
  const auto arch = file.get_string("general.architecture");
  if (!arch) throw Error(ErrorKind::Format, file.path() + ": metadata key general.architecture is missing");
  const ArchRecord& rec = require_arch(*arch, file.path());
  ModelConfig c = read_gguf_config(file, rec);
  if (rec.gguf_hook != nullptr) rec.gguf_hook(file, c);
  validate_config(c, file);
  return c;
}

}  // namespace larql
