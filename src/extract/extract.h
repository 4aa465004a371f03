// `larql extract`: a model into a vindex directory (docs/vindex-format.md), streamed tensor by
// tensor so memory stays near one tensor plus one layer's down_meta scores.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"
#include "vindex/edited_slots.h"
#include "vindex/index.h"

namespace larql::extract {

struct ExtractOptions {
  vindex::ExtractLevel level = vindex::ExtractLevel::Browse;
  /// Side-channel floats (gate vectors, embeddings): f32, f16 or bf16; also the type of the model's
  /// matrices under quant "none" and of the embedding / lm_head under "q4k".
  std::string dtype = "f16";
  /// Model weights at level inference and above: "keep" (the source's own blocks, byte for byte);
  /// "none" (every matrix at `dtype`, vectors f32); "q4k" (re-quantised: Q, K, O, gate, up Q4_K,
  /// V and down Q6_K; Q5_0 / Q8_0 for rows not a multiple of 256; embedding at `dtype`, vectors
  /// f32). Ignored at browse level.
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
  /// index.json's source.extracted_at (ISO 8601 UTC); empty: the time of the extract. A build
  /// that must not depend on the clock (`larql build`) sets it.
  std::string extracted_at;
  /// The source vindex's edits.json record (vindex/edited_slots.h), written to the output as
  /// edits.json when not empty, so a vindex compiled from edits keeps its record through extract.
  std::vector<vindex::EditedSlot> edited_slots;
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
/// tokens of lm_head · W_down[:, f] (the embedding when tied), exact scores; tokens that decode to nothing skipped),
/// tokenizer.json, tokenizer_config.json and index.json.
/// Level attention adds the attention weights and every norm, stored as `quant` says
/// (attn_weights.bin, norms.bin) and weight_manifest.json naming them; such a vindex does not
/// run (no FFN, no embedding blocks).
/// Level inference (and all, the same here) adds every tensor of the model, stored as `quant`
/// says (`keep`: the source's blocks): attn_weights.bin, ffn_weights.bin, norms.bin,
/// embed_weights.bin, each tensor 64-byte aligned, named by weight_manifest.json (role, layer,
/// dtype, shape, file, offset, length); such a vindex runs (Model::load of the directory), with
/// `keep` with logits bit-identical to the source's.
/// Each finished file's SHA-256 goes into the staging directory's progress record
/// (kProgressFile) so `resume` can keep it; the record is removed before the rename.
/// Errors: InvalidArgument for a quant other than keep, none, q4k, a bad
/// dtype or top-k, or an existing `out_dir` without `force`; NotFound for a missing parent
/// directory; Io from the writes (the staging directory is removed).
ExtractResult extract_vindex(const Model& model, const std::string& out_dir, const ExtractOptions& opt);

}  // namespace larql::extract
