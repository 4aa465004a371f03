// config_from_gguf: dispatch on the architecture to its family file, then the one validation of
// the result.
#include "model/config.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>

#include "formats/gguf.h"
#include "model/family.h"
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
    rows_are("blk.0.ffn_up.weight", c_.ffn, key(k::kFeedForwardLength) + " = " + std::to_string(c_.ffn));

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

const std::vector<const GgufFamily*>& gguf_families() {
  static const std::vector<const GgufFamily*> kFamilies = {&gemma3_family(), &llama_family()};
  return kFamilies;
}

const GgufFamily* find_gguf_family(std::string_view arch) {
  for (const GgufFamily* f : gguf_families())
    if (arch == f->arch) return f;
  return nullptr;
}

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> kArchs = [] {
    std::vector<std::string> v;
    for (const GgufFamily* f : gguf_families()) v.emplace_back(f->arch);
    return v;
  }();
  return kArchs;
}

void validate_config(const ModelConfig& config, const GgufFile& file) { Validator(config, file).run(); }

ModelConfig config_from_gguf(const GgufFile& file) {
  const auto arch = file.get_string("general.architecture");
  if (!arch) throw Error(ErrorKind::Format, file.path() + ": metadata key general.architecture is missing");
  if (const GgufFamily* fam = find_gguf_family(*arch)) {
    ModelConfig c = fam->config(file);
    validate_config(c, file);
    return c;
  }
  std::string list;
  for (const auto& a : supported_architectures()) list += (list.empty() ? "" : ", ") + a;
  throw Error(ErrorKind::Unsupported, file.path() + ": architecture '" + *arch +
                                          "' is not supported (supported: " + list + ")");
}

}  // namespace larql
