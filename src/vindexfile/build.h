// `larql build`: a vindex from a Vindexfile (docs/vindexfile.md), in up to three cached steps —
// extract (the FROM model through extract/, or the FROM vindex as it is), edits (the PATCH files
// and statements run in file order on one LQL session, then COMPILE CURRENT INTO VINDEX) and
// labels — each written into the cache under a key that is the SHA-256 of its inputs' content and
// the step, then the last step's vindex put at the output through a staging directory and one
// rename. The same inputs give the same bytes: no wall-clock time, path or thread count enters a
// file.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "vindexfile/vindexfile.h"

namespace larql::vindexfile {

struct BuildOptions {
  /// The directory relative paths of the Vindexfile (FROM, PATCH, LABELS) are resolved against.
  std::string dir = ".";
  /// Where the vindex goes (replaced whole when it is a vindex; anything else there is refused).
  /// Its parent directory must exist (Error{NotFound} naming it otherwise).
  std::string output;
  /// The cache's directory (docs/vindexfile.md "The cache"); "" : <dir>/.larql-cache.
  std::string cache_dir;
  /// false: read nothing from the cache and keep nothing in it (the steps run in a scratch
  /// directory beside the output, removed at the end).
  bool use_cache = true;
  int threads = 0;  ///< compute threads; <= 0: all cores. No file depends on it
  /// index.json's source.extracted_at for an extract step (ISO 8601 UTC): a fixed value, so that
  /// the output does not depend on the clock.
  std::string extracted_at = "1970-01-01T00:00:00Z";
  /// What identifies the build tool (the larql binary's SHA-256): part of every key, so a
  /// different larql never reuses another's steps.
  std::string tool_id;
  /// FROM that is not a path relative to `dir`: a model name to look up (the CLI's models/ cache);
  /// empty: FROM takes paths only.
  std::function<std::string(const std::string&)> resolve_name;
  /// The relation set LABELS DEFAULT runs (data/relations.json's text).
  std::string builtin_relations;
  /// Lines of progress (each step as it starts, ends or is found in the cache; each edit's result).
  std::function<void(const std::string&)> log;
  /// Extract's progress (extract/extract.h ExtractOptions::progress); may be empty.
  std::function<void(const std::string& phase, int64_t done, int64_t total)> progress;
};

struct StepReport {
  std::string step;     ///< "extract", "edits", "labels"
  std::string key;      ///< SHA-256 hex of the step's inputs
  bool cached = false;  ///< found in the cache (or contained in a later step that was)
  double seconds = 0;   ///< time spent running it (0 when cached)
  std::string entry;    ///< the cache directory holding its vindex
};

struct BuildResult {
  std::string output;
  std::vector<StepReport> steps;
  std::map<std::string, std::string> files;  ///< every file of the output but index.json -> SHA-256
  std::string index_sha256;                   ///< of the output's index.json
  uint64_t bytes = 0;
  double seconds = 0;
};

/// Build `vf`. Errors name the Vindexfile's line:column where they come from one directive:
/// Error{NotFound} for a FROM, PATCH or LABELS file that is not there; the extract's, LQL's (with
/// the statement's position) and the labeller's errors prefixed with the directive; Error{InvalidArgument}
/// for an output that exists and is not a vindex, is the FROM itself or lies inside it or the
/// cache; Error{Io} when another build holds the cache (its lock) or a write fails. A failed or
/// killed build leaves the output as it was (the old vindex or nothing), and the cache holds only
/// complete steps.
BuildResult build(const Vindexfile& vf, const BuildOptions& opt);

/// SHA-256 of a file, or of a directory tree: of the list "relative path NUL sha256 LF" of its
/// regular files (symbolic links followed) in byte order of their paths. Error{NotFound} / Io.
std::string content_digest(const std::string& path);

}  // namespace larql::vindexfile
