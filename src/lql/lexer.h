// LQL tokens: words (keywords are matched case-insensitively by the parser), strings, numbers,
// punctuation, each with its 1-based line and column for error messages (docs/lql.md "Lexical").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace larql::lql {

/// A place in the source text: 1-based line and column. COL = 1 + the number of Unicode code
/// points before the place on its line (a byte that is not part of valid UTF-8 counts as one);
/// LINE = 1 + the number of '\n' before it (docs/lql.md "Lexical").
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
/// `start`: where src begins in a larger text (positions are then the larger text's).
/// Errors: Error{InvalidArgument} "... at LINE:COL" for an unterminated string, a bad escape, an
/// integer above 9223372036854775807 (a signed 64-bit integer), a lone '|' or '!', or any other
/// character.
std::vector<Token> lex(std::string_view src, Pos start = {});

/// The bytes of the code point that starts at s[i]: 2-4 for a valid multi-byte UTF-8 sequence
/// (no overlong form, surrogate or value above U+10FFFF), else 1 (ASCII, or a byte that is not
/// valid UTF-8 there). i < s.size().
size_t utf8_sequence_length(std::string_view s, size_t i);

/// Advances a Pos over text byte by byte, counting code points (Pos's rule).
class PosCounter {
 public:
  explicit PosCounter(Pos start = {}) : p_(start) {}
  /// Account for byte s[i], the next one after those already counted.
  void step(std::string_view s, size_t i) {
    if (cont_ > 0) {
      --cont_;
    } else if (s[i] == '\n') {
      ++p_.line;
      p_.col = 1;
    } else {
      ++p_.col;
      cont_ = utf8_sequence_length(s, i) - 1;
    }
  }
  const Pos& pos() const { return p_; }

 private:
  Pos p_;
  size_t cont_ = 0;  // continuation bytes left of the current code point
};

}  // namespace larql::lql
