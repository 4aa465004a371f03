// A statement's result as a typed table (docs/lql.md "Results"): named, typed columns and rows of
// cells, with a title and notes; rendered as aligned text sized to a terminal width, or as one
// JSON document.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace larql::lql {

/// A cell: null, an integer, a float, a text or a list of texts.
using Cell = std::variant<std::monostate, int64_t, double, std::string, std::vector<std::string>>;

struct Column {
  enum class Type { Int, Float, Text, List };
  std::string name;  ///< lower-case, the name WHERE / ORDER BY use
  Type type = Type::Text;
  int precision = 4;  ///< Float: digits after the point in text output (JSON keeps full precision)
  /// Text cells are token pieces exactly as the vocabulary has them (" Paris", " ", "\n"). Text
  /// output quotes one with a leading or trailing blank, or nothing but blanks (" Paris" shows as
  /// "\" Paris\"", so it is not read as the token "Paris"); JSON carries it with those blanks
  /// trimmed, as the other text columns (token_id tells tokens apart); WHERE compares it trimmed.
  bool token = false;
};

/// A token piece with its surrounding blanks (space, tab, CR, LF) removed; a piece of blanks only
/// stays as it is.
std::string trim_blanks(const std::string& s);

/// The result of one statement.
struct Table {
  std::string statement;              ///< "DESCRIBE", "SELECT", ... (upper-case)
  std::string title;                  ///< one line above the table; may be empty
  std::vector<Column> columns;
  std::vector<std::vector<Cell>> rows;  ///< each row has columns.size() cells
  std::vector<std::string> notes;     ///< lines printed after the table
  double elapsed_ms = -1;             ///< wall time of the statement, set by the caller; < 0: not shown

  /// The index of a column by name; -1 when absent.
  int column(const std::string& name) const;
};

const char* column_type_name(Column::Type t);

/// Aligned text: the title, a header, a rule and the rows, then the notes and the elapsed time
/// when set ("12.3 ms"). Numbers are right-
/// aligned. When the natural width exceeds `width` (columns), the widest text / list columns are
/// cut (ending in "…") until it fits or each is 8 cells. Control characters in texts are
/// shown escaped (\n, \t, \xNN). Widths are terminal cells (display_width): CJK and other wide
/// characters take two, combining marks none.
std::string render_text(const Table& t, int width = 100);

/// The terminal cells a code point takes: 0 for a combining mark (Unicode general category Mn,
/// Me), a format character (Cf: zero-width joiner, soft hyphen ...) and a Hangul medial or final
/// jamo (U+1160-U+11FF); 2 for East Asian Wide and Fullwidth (CJK, kana, Hangul syllables, most
/// emoji); 1 otherwise (ICU's character properties).
int display_width(char32_t c);
/// The cells of a UTF-8 text: the sum over its code points; a byte that is not valid UTF-8 is 1.
size_t display_width(std::string_view s);

/// One JSON document (no trailing newline), the schema of docs/lql.md "JSON output":
/// {"statement", "title", "columns": [{"name", "type"}], "rows": [[...]], "notes": [...]}, plus
/// "elapsed_ms" when set.
/// Texts that are not valid UTF-8 have their bad bytes replaced by U+FFFD.
std::string render_json(const Table& t);

}  // namespace larql::lql
