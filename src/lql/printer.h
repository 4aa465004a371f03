// LQL text from the syntax tree: the inverse of the parser (docs/lql.md "Grammar"), for the
// parse -> print -> parse round trip the tests and the fuzz target check.
#pragma once

#include <string>
#include <string_view>

#include "lql/ast.h"

namespace larql::lql {

/// One statement as canonical LQL text (keywords upper-case, every clause in a fixed order,
/// strings double-quoted with \\ \" \n \t \r escaped, conditions fully parenthesised). Parsing
/// the result gives a tree that prints to the same text: print(parse(print(s))) == print(s).
/// Positions are not kept. Never throws.
std::string to_lql(const Statement& st);
/// Stages joined by " |> ".
std::string to_lql(const Pipeline& p);
/// `text` as an LQL string literal: double-quoted, with \\ \" \n \t \r escaped (the lexer
/// reads it back to `text`; any other byte, UTF-8 included, stands as it is). Never throws.
std::string quote_string(std::string_view text);

}  // namespace larql::lql
