// WHERE, ORDER BY, LIMIT and field lists over a result table.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "lql/exec_internal.h"
#include "util/error.h"

namespace larql::lql::detail {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string field_list(const Table& t) {
  std::string out;
  for (const auto& c : t.columns) out += (out.empty() ? "" : ", ") + c.name;
  return out;
}

int need_column(const Table& t, const std::string& field, Pos pos) {
  const int c = t.column(field);
  if (c < 0)
    throw Error(ErrorKind::InvalidArgument, "unknown field " + field + " at " + pos.str() + " (fields of this table: " +
                                                field_list(t) + ")");
  return c;
}

// SQL LIKE, case-insensitive: % any run, _ one byte.
bool like(const std::string& s, const std::string& p) {
  // Iterative wildcard match, case-insensitive: on a mismatch, retry from the last '%' one
  // character further. O(|s| x |p|) at worst; the recursive form was exponential in the number
  // of '%' ("%%%%%%%%b" took seconds per row).
  const auto eq = [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
  };
  size_t i = 0, j = 0, star = std::string::npos, mark = 0;
  while (i < s.size()) {
    if (j < p.size() && p[j] == '%') {
      star = j++;
      mark = i;
    } else if (j < p.size() && (p[j] == '_' || eq(p[j], s[i]))) {
      ++i;
      ++j;
    } else if (star != std::string::npos) {
      j = star + 1;
      i = ++mark;
    } else {
      return false;
    }
  }
  while (j < p.size() && p[j] == '%') ++j;
  return j == p.size();
}

bool is_number(const Column& c) { return c.type == Column::Type::Int || c.type == Column::Type::Float; }

// -1, 0, 1 comparing a cell's scalar with a value; the types were checked before.
int compare(const Cell& cell, const std::string* text, const Value& v) {
  if (text) {
    const std::string a = lower(*text), b = lower(v.str);
    return a < b ? -1 : a > b ? 1 : 0;
  }
  const double x = std::holds_alternative<int64_t>(cell) ? static_cast<double>(std::get<int64_t>(cell))
                                                         : std::get<double>(cell);
  return x < v.number ? -1 : x > v.number ? 1 : 0;
}

bool holds_scalar(const Cond& c, const Cell& cell, const std::string* text) {
  switch (c.kind) {
    case Cond::Kind::Compare: {
      const int r = compare(cell, text, c.values[0]);
      if (c.op == "=") return r == 0;
      if (c.op == "!=") return r != 0;
      if (c.op == "<") return r < 0;
      if (c.op == "<=") return r <= 0;
      if (c.op == ">") return r > 0;
      return r >= 0;
    }
    case Cond::Kind::Like: return text && like(*text, c.values[0].str);
    case Cond::Kind::In:
      for (const auto& v : c.values)
        if (compare(cell, text, v) == 0) return true;
      return false;
    case Cond::Kind::Between: return compare(cell, text, c.values[0]) >= 0 && compare(cell, text, c.values[1]) <= 0;
    default: return false;
  }
}

void check_types(const Table& t, const Cond& c) {
  if (c.kind == Cond::Kind::And || c.kind == Cond::Kind::Or) {
    check_types(t, *c.lhs);
    check_types(t, *c.rhs);
    return;
  }
  if (c.kind == Cond::Kind::Not) {
    check_types(t, *c.lhs);
    return;
  }
  const Column& col = t.columns[static_cast<size_t>(need_column(t, c.field, c.pos))];
  for (const auto& v : c.values) {
    const bool text_value = v.kind == Value::Kind::String;
    if (is_number(col) && text_value)
      throw Error(ErrorKind::InvalidArgument, "field " + c.field + " at " + c.pos.str() + " is a number; \"" + v.str +
                                                  "\" at " + v.pos.str() + " is a text");
    if (!is_number(col) && !text_value)
      throw Error(ErrorKind::InvalidArgument, "field " + c.field + " at " + c.pos.str() + " is a text; the value at " +
                                                  v.pos.str() + " is a number (quote it)");
  }
  if (c.kind == Cond::Kind::Like && is_number(col))
    throw Error(ErrorKind::InvalidArgument, "LIKE at " + c.pos.str() + " needs a text field; " + c.field + " is a number");
}

bool holds(const Table& t, const Cond& c, const std::vector<Cell>& row) {
  switch (c.kind) {
    case Cond::Kind::And: return holds(t, *c.lhs, row) && holds(t, *c.rhs, row);
    case Cond::Kind::Or: return holds(t, *c.lhs, row) || holds(t, *c.rhs, row);
    case Cond::Kind::Not: return !holds(t, *c.lhs, row);
    default: break;
  }
  const Cell& cell = row[static_cast<size_t>(t.column(c.field))];
  if (std::holds_alternative<std::monostate>(cell)) return false;  // null: no predicate holds
  if (auto* s = std::get_if<std::string>(&cell)) {
    if (t.columns[static_cast<size_t>(t.column(c.field))].token) {  // " Paris" = "Paris"
      const std::string trimmed = trim_blanks(*s);
      return holds_scalar(c, Cell{trimmed}, &trimmed);
    }
    return holds_scalar(c, cell, s);
  }
  if (auto* l = std::get_if<std::vector<std::string>>(&cell)) {
    // A list field: the predicate holds when it holds for one of its elements.
    for (const auto& e : *l)
      if (holds_scalar(c, Cell{e}, &e)) return true;
    return false;
  }
  return holds_scalar(c, cell, nullptr);
}

// <0, 0, >0 ordering two cells of one column; nulls last (whatever the direction is handled by caller).
int order_of(const Cell& a, const Cell& b) {
  auto num = [](const Cell& c) {
    return std::holds_alternative<int64_t>(c) ? static_cast<double>(std::get<int64_t>(c)) : std::get<double>(c);
  };
  if (std::holds_alternative<int64_t>(a) || std::holds_alternative<double>(a)) {
    const double x = num(a), y = num(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  auto text = [](const Cell& c) {
    if (auto* s = std::get_if<std::string>(&c)) return lower(trim_blanks(*s));
    const auto& l = std::get<std::vector<std::string>>(c);
    return l.empty() ? std::string() : lower(l[0]);
  };
  const std::string x = text(a), y = text(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

}  // namespace

void filter_rows(Table& t, const Cond& c) {
  check_types(t, c);
  std::vector<std::vector<Cell>> kept;
  for (auto& row : t.rows)
    if (holds(t, c, row)) kept.push_back(std::move(row));
  t.rows = std::move(kept);
}

void order_rows(Table& t, const std::string& field, bool descending, Pos pos) {
  const size_t c = static_cast<size_t>(need_column(t, field, pos));
  std::stable_sort(t.rows.begin(), t.rows.end(), [&](const auto& a, const auto& b) {
    const bool na = std::holds_alternative<std::monostate>(a[c]), nb = std::holds_alternative<std::monostate>(b[c]);
    if (na || nb) return !na && nb;
    const int r = order_of(a[c], b[c]);
    return descending ? r > 0 : r < 0;
  });
}

void limit_rows(Table& t, int64_t limit) {
  if (limit < 0 || t.rows.size() <= static_cast<size_t>(limit)) return;
  t.notes.push_back("showing " + std::to_string(limit) + " of " + std::to_string(t.rows.size()) +
                    " rows (LIMIT n for more)");
  t.rows.resize(static_cast<size_t>(limit));
}

void project(Table& t, const std::vector<std::string>& fields, Pos pos) {
  if (fields.empty()) return;
  std::vector<size_t> idx;
  for (const auto& f : fields) idx.push_back(static_cast<size_t>(need_column(t, f, pos)));
  std::vector<Column> cols;
  for (size_t i : idx) cols.push_back(t.columns[i]);
  for (auto& row : t.rows) {
    std::vector<Cell> r;
    for (size_t i : idx) r.push_back(row[i]);
    row = std::move(r);
  }
  t.columns = std::move(cols);
}

}  // namespace larql::lql::detail
