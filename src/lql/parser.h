// The LQL parser: recursive descent over lex()'s tokens into the syntax tree of ast.h, following
// the grammar in docs/lql.md. Keywords are case-insensitive. A clause given twice in one statement
// is an error (not "last wins"), and so is anything the grammar does not name.
#pragma once

#include <string_view>
#include <vector>

#include "lql/ast.h"

namespace larql::lql {

/// The most predicates one WHERE may hold (a list of values is one IN predicate).
inline constexpr size_t kMaxConditions = 4096;
/// The deepest a WHERE may nest parentheses and NOTs.
inline constexpr int kMaxCondDepth = 256;

/// Parse a script: pipelines separated by ';' (the last ';' optional). An empty script (only
/// blanks and comments) gives no pipelines. `start`: where src begins in a larger text (a
/// statement split out of a script, script.h), so that positions are the larger text's.
/// Errors: Error{InvalidArgument} with "LINE:COL" and what was expected, e.g.
///   `expected LAYER at 1:23, found "LAYR"`, `TOP given twice at 1:30`, `SET target given twice
///   at 1:30`, `layer range 9-3 at 1:14 ends before it starts`, `WHERE has more than 4096
///   conditions at 1:80000 ...`, `a condition nested more than 256 deep at 1:300`; and lex()'s.
std::vector<Pipeline> parse_script(std::string_view src, Pos start = {});

/// Parse exactly one pipeline (an optional trailing ';'). Errors: as parse_script, plus
/// "expected end of input" when more follows.
Pipeline parse_one(std::string_view src, Pos start = {});

/// The keywords of the language, upper-case (for completion and highlighting).
const std::vector<std::string_view>& keywords();

}  // namespace larql::lql
