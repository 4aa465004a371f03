// LQL text from the syntax tree: the inverse of the parser (docs/lql.md "Grammar"), for the
// parse -> print -> parse round trip the tests and the fuzz target check.
#pragma once

#include <string>

#include "lql/ast.h"

namespace larql::lql {

/// One statement as canonical LQL text (keywords upper-case, every clause in a fixed order,
/// strings double-quoted with \\ \" \n \t \r escaped, conditions fully parenthesised). Parsing
/// the result gives a tree that prints to the same text: print(parse(print(s))) == print(s).
/// Positions are not kept. Never throws.
std::string to_lql(const Statement& st);
/// Stages joined by " |> ".
std::string to_lql(const Pipeline& p);

}  // namespace larql::lql
