// `larql extract`: a model into a vindex directory (docs/vindex-format.md), streamed tensor by
// tensor so memory stays near one tensor plus one layer's down_meta scores.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"
#include "vindex/index.h"

namespace larql::extract {

struct ExtractOptions {
  vindex::ExtractLevel level = vindex::ExtractLevel::Browse;
  std::string dtype = "f16";  ///< side-channel floats: f32, f16 or bf16
  /// Model weights at level inference and above: "keep" (the source's own blocks, byte for byte);
  /// "none" (floats) and "q4k" are not built yet. Ignored at browse level.
  std::string quant = "keep";
  int down_top_k = 10;        ///< tokens per feature in down_meta.bin, [1, 4096]
  int threads = 0;            ///< <= 0: all cores
  bool force = false;         ///< replace an existing output directory
  /// Continue an interrupted extract to the same `out_dir` with the same options: the staging
  /// directory of a dead extract (`<out_dir>.partial-<pid>`) is taken over, files its progress
  /// record lists are kept when their SHA-256 still matches, the rest are redone. Without a
  /// usable staging directory the extract starts afresh.
  bool resume = false;
  std::string larql_version = "0.1.0";
  /// Called as work advances: phase ("gate vectors", "embeddings", "down_meta", "checksums"),
  /// units done and the phase's total. May be empty.
  std::function<void(const std::string& phase, int64_t done, int64_t total)> progress;
};

struct ExtractResult {
  vindex::VindexIndex index;
  uint64_t bytes = 0;   ///< the directory's total size
  double seconds = 0;
  /// With `resume`: the staging directory taken over ("" when none was usable) and the files
  /// kept from it (their digest re-checked).
  std::string resumed_from;
  std::vector<std::string> kept_files;
};

/// The name of the progress record in a staging directory: a JSON object
/// `{"options": {...}, "files": {name: sha256}}`, rewritten (fsynced) after each finished file.
inline constexpr const char* kProgressFile = ".extract-progress.json";

/// Write `model` as a vindex at `out_dir`. Everything is written into a sibling staging
/// directory (`<out_dir>.partial-<pid>`), every file fsynced, index.json (with the SHA-256 of
/// every other file) last, then the staging directory is renamed into place: an interrupted
/// extract never leaves a directory that verify() or a loader accepts at `out_dir`, and the next
/// extract to the same place removes the staging directories of extracts whose process is gone.
/// Browse level writes gate_vectors.bin, embeddings.bin, down_meta.bin (per feature the top-K
/// tokens of token_embd · W_down[:, f], exact scores; tokens that decode to nothing skipped),
/// tokenizer.json, tokenizer_config.json and index.json.
/// Level attention adds the attention weights and every norm in their source blocks
/// (attn_weights.bin, norms.bin) and weight_manifest.json naming them; such a vindex does not
/// run (no FFN, no embedding blocks).
/// Level inference (and all, the same here) adds every tensor of the model in its source blocks
/// (`quant = keep`): attn_weights.bin, ffn_weights.bin, norms.bin, embed_weights.bin, each
/// tensor 64-byte aligned, named by weight_manifest.json (role, layer, dtype, shape, file,
/// offset, length); such a vindex runs (Model::load of the directory) with logits bit-identical
/// to the source's.
/// Each finished file's SHA-256 goes into the staging directory's progress record
/// (kProgressFile) so `resume` can keep it; the record is removed before the rename.
/// Errors: Unsupported for quant other than keep (not built yet); InvalidArgument for a bad
/// dtype or top-k, or an existing `out_dir` without `force`; NotFound for a missing parent
/// directory; Io from the writes (the staging directory is removed).
ExtractResult extract_vindex(const Model& model, const std::string& out_dir, const ExtractOptions& opt);

}  // namespace larql::extract
