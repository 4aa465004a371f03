// Splitting LQL text into statements for the REPL and scripts: each statement ends at a ';'
// outside strings and `--` comments, and is parsed on its own so that one bad statement does not
// hide the others (`--keep-going`), with line:column positions of the whole text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lql/ast.h"

namespace larql::lql {

/// One statement's text (without its ';') and where it starts in the whole text: parse it with
/// parse_one(text, pos) so that errors name positions of the whole text.
struct Chunk {
  std::string text;
  Pos pos;  ///< where text's first byte is in the whole text
};

/// The complete statements of `src` (each ended by ';'), and in `*rest` what follows the last
/// ';' (an unfinished statement; blank when none). A chunk of only blanks and comments is
/// dropped. An unterminated string keeps its text in *rest.
std::vector<Chunk> split_statements(std::string_view src, std::string* rest);

/// Every statement of a script whose last ';' is optional (`larql lql -e/-f`, POST /v1/lql): the
/// chunks of split_statements, then what follows the last ';' as one more chunk at its own
/// position when it is not blank — so an unfinished statement's error (`expected LAYER at 1:21,
/// found end of input`, `unterminated string at 2:10`) names a place in the text as written.
std::vector<Chunk> script_statements(std::string_view src);

/// Whether `text` holds nothing but blanks and comments.
bool is_blank(std::string_view text);

/// The quote character of a string left open at the end of `text`, or 0: quotes, escapes and
/// `--` comments read as split_statements reads them.
char open_quote(std::string_view text);

/// `text` (statements typed over several lines) as one line that means the same: outside strings
/// a `--` comment is dropped and a line break with the blanks around it becomes one blank;
/// inside a string a line break is written as the escape \n (a carriage return as \r). The
/// REPL's history keeps a statement as one such entry.
std::string one_line(std::string_view text);

}  // namespace larql::lql
