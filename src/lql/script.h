// Splitting LQL text into statements for the REPL and scripts: each statement ends at a ';'
// outside strings and `--` comments, and is parsed on its own so that one bad statement does not
// hide the others (`--keep-going`), with line:column positions of the whole text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lql/ast.h"

namespace larql::lql {

/// One statement's text, padded with the newlines and spaces that precede it in the whole text
/// so that parsing it alone reports positions of the whole text. `text` excludes the ';'.
struct Chunk {
  std::string text;
  Pos pos;  ///< where the statement's first byte is in the whole text
};

/// The complete statements of `src` (each ended by ';'), and in `*rest` what follows the last
/// ';' (an unfinished statement; blank when none). A chunk of only blanks and comments is
/// dropped. An unterminated string keeps its text in *rest.
std::vector<Chunk> split_statements(std::string_view src, std::string* rest);

/// Whether `text` holds nothing but blanks and comments.
bool is_blank(std::string_view text);

}  // namespace larql::lql
