// `larql compile MODEL -o DIR/`: a weight source (a vindex at level inference — its own files
// with the edits compiled into them —, a GGUF, a Hugging Face directory) written as a Hugging Face
// model directory that transformers and larql load: config.json, model.safetensors (or shards and
// model.safetensors.index.json), tokenizer.json, tokenizer_config.json, generation_config.json.
// docs/cli.md ("compile"). The inverse of model/hf_source.h and model/hf_config.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "model/weight_source.h"

namespace larql::extract {

/// The config.json of `c` for its family (model/arch.h record): architectures / model_type (a
/// llama record with experts is Mixtral, one whose every layer slides Mistral), the transformers
/// keys config_from_hf_json reads (sizes, heads, head_dim, epsilon, activation, tied embeddings,
/// softcaps, query_pre_attn_scalar, sliding_window with layer_types, rope_theta,
/// rope_local_base_freq, rope_scaling, experts), the special ids and `torch_dtype`.
/// RoPE frequency factors are written as the llama3 rope_scaling that reproduces them (to 1e-6
/// relative: llama.cpp's converter computes them in float32, larql in double) when one of the
/// usual parameter sets does (low_freq_factor 1..4, high_freq_factor 2..8, original context a
/// power of two), else as "longrope" with long_factor = short_factor = the
/// factors, original_max_position_embeddings = the context and the attention factor explicit
/// (the same frequencies in transformers and larql).
/// The text is then read back by config_from_hf_json, and the result must equal `c` in every
/// field the forward pass reads (the RoPE pairing aside: Hugging Face checkpoints pair NeoX
/// halves, and export_hf_dir un-permutes Q/K for a family that pairs adjacent dimensions).
/// Errors: Unsupported for an architecture without a record, or a config transformers' keys
/// cannot express (naming the field that did not survive the round trip: e.g. Q/K/V biases on a
/// Llama, a window on some layers of a family whose every layer slides, different windows).
std::string config_to_hf_json(const ModelConfig& c, const SpecialTokens& specials, const std::string& torch_dtype);

struct HfExportOptions {
  bool force = false;  ///< replace an existing output directory
  /// Tensor dtype: "auto" (float tensors F32 / F16 / BF16 as stored, block-quantised ones
  /// dequantised to F32), or "f32", "f16", "bf16" for every tensor.
  std::string dtype = "auto";
  /// A shard's data at most this many bytes (a tensor larger than it gets a shard of its own);
  /// one model.safetensors when everything fits. Transformers' default is 5 GB.
  uint64_t max_shard_bytes = 5'000'000'000ull;
  /// A directory whose tokenizer.json / tokenizer_config.json / chat_template.jinja are copied
  /// (the vindex's own); "" or absent files: written from source.vocabulary() (tokenizer/hf_json.h).
  std::string tokenizer_dir;
  /// Re-open the finished staging directory as a Hugging Face source (model/hf_source.h) and
  /// load it (every tensor shape-checked) before it is renamed into place.
  bool verify = true;
  /// Bytes written and the total, after each tensor. May be empty.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct HfExportResult {
  std::string config_json;
  size_t tensors = 0;          ///< safetensors entries written (experts one each, fused ones once)
  size_t shards = 0;
  uint64_t bytes = 0;          ///< every file of the directory
  size_t dequantised = 0;      ///< source tensors that were block-quantised (now floats)
  size_t converted = 0;        ///< float tensors written in another float type (--dtype)
  bool unpermuted_qk = false;  ///< Q/K rows reordered from adjacent-pair to NeoX RoPE pairing
  /// Gemma norms: values of the stored multiplier x = 1 + w for which fl(fl(x - 1) + 1) != x
  /// (the Hugging Face w cannot give x back bit for bit: multipliers below 0.5 with low bits).
  uint64_t norm_values_inexact = 0;
  bool tokenizer_copied = false;
  double seconds = 0;
};

/// Write `source` as a Hugging Face directory at `out_dir`.
/// Tensors: every tensor of the source under the family's Hugging Face name (model/arch.h
/// hf_tensor_name), shape [rows, cols] (a vector [n]; the shared expert's gate [1, hidden]);
/// stacked experts as one tensor per expert (…experts.E…); Phi-3's Q/K/V and gate/up fused again
/// (qkv_proj, gate_up_proj); Gemma's norms as w = x - 1 in f32 (the source holds 1 + w); Q and K
/// rows (and biases) of a family that pairs adjacent RoPE dimensions (a Llama GGUF: llama.cpp's
/// converter permuted them) put back in Hugging Face's order (the inverse of convert_hf_to_gguf.py
/// LlamaModel.permute). Float tensors keep their type and bytes (opt.dtype "auto"), so a float
/// vindex loads back with the same logits bit for bit (Gemma's norms aside where
/// norm_values_inexact > 0); block-quantised ones are dequantised exactly to F32.
/// Written into `<out_dir>.partial-<pid>` beside it, every file fsynced, verified (opt.verify)
/// and renamed into place (util/atomic_file.h replace_directory): a kill leaves the old directory
/// or the new one, never a half-written one at `out_dir`; staging directories of dead compiles
/// are removed by the next. Errors: InvalidArgument (an existing `out_dir` without `force`, one
/// that is not a directory, the source itself or inside it, a bad dtype); NotFound (the parent
/// directory); Unsupported (config_to_hf_json's; a tensor with no Hugging Face name; a layer with
/// the other RoPE pairing); Io (the OS's reason); the verification's errors (the staging
/// directory is removed).
HfExportResult export_hf_dir(const WeightSource& source, const std::string& out_dir, const HfExportOptions& opt = {});

}  // namespace larql::extract
