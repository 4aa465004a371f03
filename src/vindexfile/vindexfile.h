// The Vindexfile: a declarative recipe for a vindex (docs/vindexfile.md) — where it comes from
// (FROM a model or a vindex), how it is extracted (LEVEL, DTYPE, QUANT, DOWN_TOP_K), the knowledge
// edits baked into it (PATCH files and LQL INSERT / UPDATE / DELETE statements, in file order) and
// its relation labels (LABELS). This header is the parsed form and its hand-written parser; the
// build that runs it is vindexfile/build.h.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lql/ast.h"
#include "lql/lexer.h"

namespace larql::vindexfile {

using lql::Pos;

/// A setting's value and where it was given (for "given twice" and for errors found later).
template <class T>
struct Setting {
  std::optional<T> value;
  Pos pos;
  bool given() const { return value.has_value(); }
};

/// One knowledge edit, run in file order on one LQL session.
struct Edit {
  enum class Kind { Patch, Statement } kind = Kind::Statement;
  Pos pos;                ///< of the directive's keyword
  std::string keyword;    ///< "PATCH", "INSERT", "UPDATE", "DELETE"
  std::string path;       ///< Patch: the .vlp file as written (relative to the Vindexfile's directory)
  lql::Pipeline pipeline; ///< Statement: one statement, positions in the Vindexfile
};

struct Labels {
  bool builtin = false;   ///< LABELS DEFAULT: the built-in probe set (data/relations.json)
  std::string path;       ///< else a relation set or a feature_labels.json, as written
  Pos pos;
};

struct Vindexfile {
  std::string name = "Vindexfile";  ///< what errors call it
  Setting<std::string> from;        ///< FROM: a path (relative to the Vindexfile's directory) or a model name
  Setting<std::string> level;       ///< browse | attention | inference | all
  Setting<std::string> dtype;       ///< f32 | f16 | bf16
  Setting<std::string> quant;       ///< keep | none | q4k
  Setting<int> down_top_k;          ///< [1, 4096]
  std::vector<Edit> edits;
  std::optional<Labels> labels;
  /// Whether any extract setting (LEVEL, DTYPE, QUANT, DOWN_TOP_K) was given.
  bool extract_settings() const { return level.given() || dtype.given() || quant.given() || down_top_k.given(); }
};

/// Parse a Vindexfile's text (`name` is what errors call it). The grammar is docs/vindexfile.md:
/// one directive per line, `#` comment lines, an LQL statement continued on indented lines.
/// Errors: Error{Format} "NAME:LINE:COL: what is wrong" — LINE and COL counted as LQL counts them
/// (docs/lql.md "Lexical": COL in Unicode code points) — for an unknown directive (listing the
/// known ones), a missing or repeated FROM or setting (naming the first), a value outside its set
/// or range, an unterminated string, text after a directive's argument, a continuation line with
/// nothing to continue, a NUL byte or invalid UTF-8; an LQL statement's own parse errors keep
/// their message ("expected VALUES at 4:28, found ...") after the same prefix.
Vindexfile parse(std::string_view text, const std::string& name = "Vindexfile");

/// The canonical text of an edit (the LQL printer's form of its statement, or "PATCH <path>"):
/// what the build cache keys on, so spacing and comments do not change a key.
std::string canonical(const Edit& e);

}  // namespace larql::vindexfile
