// The statement summary the REPL's \help prints: one list of every statement form with its
// syntax and an example that parses (tests/lql/help_test.cc parses each example and checks that
// every statement kind, SHOW form and patch statement is listed, so the help cannot fall behind the
// grammar). The full grammar is docs/lql.md.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace larql::lql {

struct StatementHelp {
  std::string_view syntax;   ///< the form, as docs/lql.md's grammar writes it (abridged)
  std::string_view example;  ///< one statement that parses
};

/// Every statement form, in docs/lql.md's order.
const std::vector<StatementHelp>& statement_help();

/// What the grammar accepts but the executor refuses (each with its message when run).
const std::vector<std::string_view>& not_built_yet();

/// The \help text: the statement forms, what is not built yet, the REPL's backslash commands.
std::string help_text();

}  // namespace larql::lql
