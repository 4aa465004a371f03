// `larql slice`: a vindex cut down to the files one role needs (docs/vindex-format.md,
// "Slices"), e.g. the attention side of a split deployment or a browse-only copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vindex/index.h"

namespace larql::vindex {

/// The presets' names, in the order `--help` lists them: client, server, attn, embed, browse.
const std::vector<std::string>& slice_preset_names();

/// The files (besides index.json, always written) preset `name` keeps, whichever of them the
/// source holds. Error{InvalidArgument} for an unknown preset, listing the known ones.
std::vector<std::string> slice_preset_files(const std::string& name);

struct SliceFile {
  std::string name;
  uint64_t bytes = 0;
};

struct SliceResult {
  std::vector<SliceFile> files;  ///< copied (or, dry run, to be copied), index.json not counted
  uint64_t bytes = 0;            ///< their total
  VindexIndex index;             ///< the slice's index.json (not written on a dry run)
};

/// Copy the files preset `preset` keeps from the vindex `src` into a new vindex `out`, with a
/// rewritten index.json: only the files present and their SHA-256; `extract_level` = the
/// smaller of the source's and what the files support (inference when attention, norms, FFN
/// and embedding blocks are all there, attention with attention and norms, else browse);
/// `has_model_weights` = attention or FFN weights present; `layers` emptied without
/// gate_vectors.bin; weight_manifest.json rewritten to the entries whose file is kept. Written
/// into `<out>.partial-<pid>`, each file fsynced, then renamed into place. Every copied file is
/// re-hashed and must match the source's recorded digest. With `dry_run` nothing is written.
/// Errors: InvalidArgument (unknown preset, `out` exists without `force`, `out` inside `src`),
/// NotFound (no source index.json, missing parent of `out`), Format (a source file whose digest
/// differs from index.json, a malformed manifest), Io.
SliceResult slice_vindex(const std::string& src, const std::string& preset, const std::string& out, bool dry_run,
                         bool force = false);

}  // namespace larql::vindex
