// WHERE, ORDER BY, LIMIT and field lists over a result table.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <unordered_set>

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

double number_of(const Cell& cell) {
  return std::holds_alternative<int64_t>(cell) ? static_cast<double>(std::get<int64_t>(cell)) : std::get<double>(cell);
}

int sign_of(double x, double v) { return x < v ? -1 : x > v ? 1 : 0; }

// A WHERE condition checked against a table and prepared for its rows: the column resolved, text
// values lower-cased once, an IN list as a sorted set (a row costs O(log n), not O(n): a list of
// 200,000 values took 22 s over the default model's features). Mirrors the Cond tree, which the
// parser keeps shallow (chains are n-ary, nesting is bounded), so building and evaluating it may
// recurse.
struct Plan {
  Cond::Kind kind = Cond::Kind::Compare;
  std::vector<Plan> args;
  size_t col = 0;
  bool text = false;                   // the column holds texts (else numbers)
  bool token = false;                  // a token column: cells compared with their blanks trimmed
  enum class Op { Eq, Ne, Lt, Le, Gt, Ge } op = Op::Eq;
  std::vector<std::string> texts;      // lower-cased values (Like: the pattern as written)
  std::vector<double> numbers;         // In: sorted
  std::unordered_set<std::string> text_set;
};

Plan plan_of(const Table& t, const Cond& c) {
  Plan p;
  p.kind = c.kind;
  if (c.kind == Cond::Kind::And || c.kind == Cond::Kind::Or || c.kind == Cond::Kind::Not) {
    p.args.reserve(c.args.size());
    for (const Cond& a : c.args) p.args.push_back(plan_of(t, a));
    return p;
  }
  p.col = static_cast<size_t>(need_column(t, c.field, c.pos));
  const Column& col = t.columns[p.col];
  p.text = !is_number(col);
  p.token = col.token;
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
  using Op = Plan::Op;
  p.op = c.op == "=" ? Op::Eq : c.op == "!=" ? Op::Ne : c.op == "<" ? Op::Lt : c.op == "<=" ? Op::Le : c.op == ">" ? Op::Gt : Op::Ge;
  for (const auto& v : c.values) {
    if (p.text) p.texts.push_back(c.kind == Cond::Kind::Like ? v.str : lower(v.str));
    else p.numbers.push_back(v.number);
  }
  if (c.kind == Cond::Kind::In) {
    if (p.text) p.text_set.insert(p.texts.begin(), p.texts.end());
    std::sort(p.numbers.begin(), p.numbers.end());
  }
  return p;
}

// A predicate on one scalar: `text` (lower-cased) for a text cell, else the number x.
bool holds_scalar(const Plan& p, const std::string* text, double x) {
  auto cmp = [&](size_t i) {
    if (text) return *text < p.texts[i] ? -1 : *text > p.texts[i] ? 1 : 0;
    return sign_of(x, p.numbers[i]);
  };
  switch (p.kind) {
    case Cond::Kind::Compare: {
      const int r = cmp(0);
      switch (p.op) {
        case Plan::Op::Eq: return r == 0;
        case Plan::Op::Ne: return r != 0;
        case Plan::Op::Lt: return r < 0;
        case Plan::Op::Le: return r <= 0;
        case Plan::Op::Gt: return r > 0;
        case Plan::Op::Ge: return r >= 0;
      }
      return false;
    }
    case Cond::Kind::Like: return text && like(*text, p.texts[0]);
    case Cond::Kind::In:
      if (text) return p.text_set.count(*text) != 0;
      if (std::isnan(x)) return !p.numbers.empty();  // as the comparisons: NaN is neither < nor >
      return std::binary_search(p.numbers.begin(), p.numbers.end(), x);
    case Cond::Kind::Between: return cmp(0) >= 0 && cmp(1) <= 0;
    default: return false;
  }
}

bool holds(const Plan& p, const std::vector<Cell>& row) {
  switch (p.kind) {
    case Cond::Kind::And:
      for (const Plan& a : p.args)
        if (!holds(a, row)) return false;
      return true;
    case Cond::Kind::Or:
      for (const Plan& a : p.args)
        if (holds(a, row)) return true;
      return false;
    case Cond::Kind::Not: return !holds(p.args[0], row);
    default: break;
  }
  const Cell& cell = row[p.col];
  if (std::holds_alternative<std::monostate>(cell)) return false;  // null: no predicate holds
  if (auto* s = std::get_if<std::string>(&cell)) {
    const std::string l = lower(p.token ? trim_blanks(*s) : *s);  // a token column: " Paris" = "Paris"
    return holds_scalar(p, &l, 0);
  }
  if (auto* l = std::get_if<std::vector<std::string>>(&cell)) {
    // A list field: the predicate holds when it holds for one of its elements.
    for (const auto& e : *l) {
      const std::string le = lower(e);
      if (holds_scalar(p, &le, 0)) return true;
    }
    return false;
  }
  return holds_scalar(p, nullptr, number_of(cell));
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
  const Plan plan = plan_of(t, c);
  std::vector<std::vector<Cell>> kept;
  for (auto& row : t.rows)
    if (holds(plan, row)) kept.push_back(std::move(row));
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

void project(Table& t, const std::vector<std::string>& fields, const std::vector<Pos>& pos) {
  if (fields.empty()) return;
  std::vector<size_t> idx;
  for (size_t i = 0; i < fields.size(); ++i)
    idx.push_back(static_cast<size_t>(need_column(t, fields[i], i < pos.size() ? pos[i] : Pos{})));
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
