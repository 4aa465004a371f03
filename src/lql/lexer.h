// LQL tokens: words (keywords are matched case-insensitively by the parser), strings, numbers,
// punctuation, each with its 1-based line and column for error messages (docs/lql.md "Lexical").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace larql::lql {

/// A place in the source text: 1-based line and column (columns count bytes).
struct Pos {
  int line = 1;
  int col = 1;
  std::string str() const { return std::to_string(line) + ":" + std::to_string(col); }
};

enum class TokKind { Word, String, Integer, Float, Punct, End };

struct Token {
  TokKind kind = TokKind::End;
  std::string text;     ///< a word as written; a string's decoded value; a number or punctuation's text
  int64_t integer = 0;  ///< for Integer
  double number = 0;    ///< for Integer and Float
  Pos pos;
  /// How the token reads in an error message: "LAYR", "\"Paris\"", "end of input".
  std::string describe() const;
};

/// Split LQL source into tokens, ending with one End token. Whitespace separates; `--` starts a
/// comment to the end of the line. Strings: "..." or '...' with escapes \\ \" \' \n \t \r; any
/// other escape is an error. Numbers: digits with an optional .digits (no sign: "-" is
/// punctuation). Words: [A-Za-z_][A-Za-z0-9_]*. Punctuation: * , ; ( ) = != < <= > >= - |>.
/// Errors: Error{InvalidArgument} "... at LINE:COL" for an unterminated string, a bad escape, an
/// integer that does not fit 64 bits, a lone '|' or '!', or any other character.
std::vector<Token> lex(std::string_view src);

}  // namespace larql::lql
