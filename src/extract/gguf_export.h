// `larql export` and COMPILE INTO MODEL: any weight source (a GGUF file, a vindex extracted at
// level inference, a Hugging Face directory, an overlay of edits) written as a GGUF v3 file that
// llama.cpp loads. docs/cli.md ("export"), format: ggml/docs/gguf.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "formats/gguf.h"
#include "model/weight_source.h"

namespace larql::extract {

struct ExportOptions {
  bool force = false;  ///< replace an existing output file
  /// Called with bytes written and the file's total size, after the header and each tensor.
  /// May be empty.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct ExportResult {
  uint64_t bytes = 0;     ///< the file's size
  size_t tensors = 0;     ///< tensors written
  size_t metadata = 0;    ///< metadata entries written
  bool copied_metadata = false;  ///< true when the source's GGUF metadata was copied verbatim
  double seconds = 0;
};

/// The architecture metadata llama.cpp's loader reads for `c.arch` (llama-model.cpp
/// load_hparams; keys as config_keys, prefixed "<arch>."), written into `w`, plus
/// general.architecture and general.name. Inverse of config_from_gguf for every exportable
/// architecture record (model/arch.h): context_length, embedding_length, block_count,
/// feed_forward_length, attention.head_count / head_count_kv / key_length / value_length /
/// layer_norm_rms_epsilon, rope.dimension_count, rope.freq_base (global layers), and when some
/// layers slide attention.sliding_window, rope.freq_base_swa (when it differs) and
/// attention.sliding_window_pattern (when not the family's); rope.scaling.type + factor when the
/// global layers scale, query_pre_attn_scalar (families that read it) when it is not head_dim, the
/// logit softcaps when set. Errors: Unsupported for an architecture without a record or not
/// exportable, a RoPE pairing other than llama.cpp's for the family (a Hugging Face Llama
/// checkpoint), sliding layers that follow no pattern.
void config_to_gguf(const ModelConfig& c, GgufWriter& w);

/// Write `source` as a GGUF v3 file at `path`.
/// Tensors: every tensor of source.tensors(), in its order, under llama.cpp's name for its role
/// (model/arch.h gguf_tensor_name; Llama 3.1's rope_freqs.weight from the config), with the source's dims, dtype and bytes unchanged (quantised
/// blocks byte for byte; float sources F32 / F16 / BF16 as stored; norms as the source hands
/// them out, i.e. Gemma's 1 + w — a GGUF or vindex stores that, HfSource computes it in f32).
/// The bytes are fetched through source.tensor(role, layer), so an overlay's replaced tensors
/// are the ones written.
/// Metadata: a GgufSource's metadata is copied verbatim (every key, in order; its alignment
/// kept), so a GGUF exported unchanged is byte-identical to its source; any other source gets
/// config_to_gguf(source.config()) plus its vocabulary (vocab_to_gguf: tokenizer.ggml.*) and
/// general.quantization_version = 2 when a tensor is block-quantised.
/// The file is streamed (memory: the metadata plus a 1 MiB buffer; the source's pages are read
/// in place) to a temporary sibling, fsynced and renamed (util/atomic_file.h): a kill leaves no
/// file at `path`, and the next export to `path` removes the dead one's temporary.
/// Errors: InvalidArgument (an existing `path` without `force`; `path` a directory or the
/// source itself), NotFound (its directory missing), Unsupported (an architecture without a
/// record, or one not exportable (fused tensors: Phi-3); a tensor with no role, naming it), Io (the OS's reason).
ExportResult export_gguf(const WeightSource& source, const std::string& path, const ExportOptions& opt = {});

}  // namespace larql::extract
