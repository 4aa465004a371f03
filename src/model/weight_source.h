// Where a model's weights come from: the config, tensors by role and layer, the vocabulary,
// metadata and a fingerprint of the whole content. GgufSource (model/gguf_source.h) reads a GGUF
// file; a vindex directory can be another source. docs/architecture.md ("Weight sources").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "tokenizer/tokenizer.h"
#include "util/dtype.h"

namespace larql {

/// What a tensor is for, independent of any file's naming. Per-layer roles take a layer index;
/// the others take -1.
enum class TensorRole {
  TokenEmbd,     ///< [vocab, hidden]
  Output,        ///< lm_head [vocab, hidden]; absent when tied to TokenEmbd
  OutputNorm,    ///< [hidden]
  AttnNorm,      ///< per layer [hidden]
  AttnQ,         ///< [q_dim, hidden]
  AttnK,         ///< [kv_dim, hidden]
  AttnV,         ///< [kv_dim, hidden]
  AttnQBias,     ///< [q_dim], optional
  AttnKBias,     ///< [kv_dim], optional
  AttnVBias,     ///< [kv_dim], optional
  AttnQNorm,     ///< [head_dim] (qk_norm)
  AttnKNorm,     ///< [head_dim] (qk_norm)
  AttnOutput,    ///< [hidden, q_dim]
  PostAttnNorm,  ///< [hidden] (post_norms)
  FfnNorm,       ///< [hidden]
  FfnGate,       ///< [ffn, hidden]
  FfnUp,         ///< [ffn, hidden]
  FfnDown,       ///< [hidden, ffn]
  PostFfnNorm,   ///< [hidden] (post_norms)
  // Mixture of experts (ModelConfig::n_experts > 0): the layer's FFN is these instead of
  // FfnGate/Up/Down. Expert tensors stack the experts: GGUF dims [cols, rows, n_experts].
  FfnGateInp,       ///< router [n_experts, hidden]
  FfnGateExps,      ///< [n_experts][expert_ffn, hidden]
  FfnUpExps,        ///< [n_experts][expert_ffn, hidden]
  FfnDownExps,      ///< [n_experts][hidden, expert_ffn]
  FfnGateInpShexp,  ///< the shared expert's gate [hidden] (shared_expert_ffn > 0)
  FfnGateShexp,     ///< [shared_expert_ffn, hidden]
  FfnUpShexp,       ///< [shared_expert_ffn, hidden]
  FfnDownShexp,     ///< [hidden, shared_expert_ffn]
};

/// Whether a role is an RMSNorm weight (output, attention, q/k, post-attention, FFN, post-FFN
/// norms): the tensors a family may store as w or as 1 + w (ArchRecord::hf_norm_plus_one).
inline bool is_norm_role(TensorRole r) {
  switch (r) {
    case TensorRole::OutputNorm:
    case TensorRole::AttnNorm:
    case TensorRole::AttnQNorm:
    case TensorRole::AttnKNorm:
    case TensorRole::PostAttnNorm:
    case TensorRole::FfnNorm:
    case TensorRole::PostFfnNorm: return true;
    default: return false;
  }
}

/// True for roles stored once per layer.
bool is_layer_role(TensorRole role);

/// One stored tensor: a zero-copy view into the source's bytes, valid while the source lives.
struct SourceTensor {
  std::string name;            ///< the source's own name (e.g. "blk.3.attn_q.weight"), for messages
  DType type = DType::F32;
  std::vector<uint64_t> dims;  ///< fastest-varying first (GGUF order): a matrix is [cols, rows]
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
};

/// One metadata entry, rendered for display (`larql show`).
struct MetadataEntry {
  std::string key;
  std::string type;   ///< e.g. "u32", "f32", "str", "arr[str,262144]"
  std::string value;  ///< the value as text; an array longer than 8 shows its first 8 and "..."
};

/// The special token ids and flags, cheap to read (Model keeps them; no vocabulary decode).
struct SpecialTokens {
  int32_t bos = -1, eos = -1, eot = -1, pad = -1, unk = -1;  ///< -1 when absent
  bool add_bos = true;
};

/// A read-only source of one model. Implementations are immutable after construction and safe
/// for concurrent const use.
class WeightSource {
 public:
  virtual ~WeightSource() = default;

  /// Where the weights live (a file path, a directory), for messages.
  virtual const std::string& path() const = 0;
  /// The format in words, e.g. "GGUF v3".
  virtual std::string format() const = 0;
  /// The validated architecture (model/config.h).
  virtual const ModelConfig& config() const = 0;
  /// The tensor of `role` (layer: its index for per-layer roles, -1 otherwise); nullopt if the
  /// source has none. Errors: InvalidArgument for a layer outside [0, n_layers) or a layer given
  /// for a global role.
  virtual std::optional<SourceTensor> tensor(TensorRole role, int64_t layer = -1) const = 0;
  /// The source's name for that tensor (present or not), for error messages.
  virtual std::string tensor_name(TensorRole role, int64_t layer = -1) const = 0;
  /// Every stored tensor, in storage order.
  virtual std::vector<SourceTensor> tensors() const = 0;
  /// The vocabulary, decoded on each call: O(vocab) time and memory (~30 MB for 262k tokens).
  /// Errors: as vocab_from_gguf (NotFound / Format).
  virtual VocabData vocabulary() const = 0;
  /// The special ids (read at open).
  virtual const SpecialTokens& special_tokens() const = 0;
  /// Every metadata entry, in key order, rendered as text.
  virtual std::vector<MetadataEntry> metadata() const = 0;
  /// Bytes of the whole source (the file size for GGUF).
  virtual uint64_t byte_size() const = 0;
  /// A digest of the whole content — every byte, so any change to a weight, the vocabulary or
  /// the metadata changes it. State files store it to refuse another model's state.
  virtual const std::string& fingerprint() const = 0;
};

}  // namespace larql
