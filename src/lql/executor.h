// The LQL executor (docs/lql.md "What runs"): runs parsed statements against a Session and
// returns each result as a typed Table. Every statement and clause the parser accepts is either
// honoured or rejected with Error{Unsupported} naming it and its position ("COMPILE INTO VINDEX is
// not built yet (1:1)") — never silently ignored.
#pragma once

#include <vector>

#include "lql/ast.h"
#include "lql/session.h"
#include "lql/table.h"

namespace larql::lql {

class Executor {
 public:
  explicit Executor(Session& session) : s_(session) {}

  /// Run one statement. Errors: Unsupported for what is not built yet (naming the statement or
  /// clause and its line:column); InvalidArgument for a statement that needs a vindex when none
  /// is in use, a layer out of range, an unknown field in a field list / WHERE / ORDER BY, a
  /// comparison of a number field with a text (naming the position); the Session's errors.
  Table run(const Statement& st);
  /// Run each stage of a pipeline in order; the results in order. Stops at the first error.
  std::vector<Table> run(const Pipeline& p);

 private:
  Session& s_;
};

}  // namespace larql::lql
