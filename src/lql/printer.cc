#include "lql/printer.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace larql::lql {

namespace {

std::string quote(const std::string& s) { return quote_string(s); }

// A float the lexer reads back to the same double: the shortest round-trip digits in fixed
// notation, always with a '.'; an infinity (strtod's answer to a too-long literal) as a literal
// that overflows the same way.
std::string number(double v) {
  std::string sign = std::signbit(v) ? "-" : "";
  v = std::fabs(v);
  if (std::isinf(v)) return sign + "1" + std::string(400, '0') + ".0";
  char buf[400];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  std::string digits(buf, r.ptr);
  if (digits.find('.') == std::string::npos) digits += ".0";
  return sign + digits;
}

std::string value(const Value& v) {
  switch (v.kind) {
    case Value::Kind::String: return quote(v.str);
    // A negative integer is "-" and its magnitude (the grammar's "-" num); unsigned so that the
    // magnitude of INT64_MIN does not overflow.
    case Value::Kind::Integer:
      return v.integer < 0 ? "-" + std::to_string(0 - static_cast<uint64_t>(v.integer)) : std::to_string(v.integer);
    case Value::Kind::Float: return number(v.number);
  }
  return "";
}

bool is_chain(const Cond& c) { return c.kind == Cond::Kind::And || c.kind == Cond::Kind::Or; }

// Appends the condition to `out`, with only the parentheses the tree needs (an AND chain inside
// an OR needs none; a chain inside a chain of its own kind, an OR inside an AND and a chain under
// NOT do): so the printed text never nests deeper than the source did (the parser bounds the
// depth) and a long chain prints in one pass. A negated LIKE / IN / BETWEEN prints as
// `field NOT LIKE ...`, the form that costs no nesting.
void cond_into(std::string& out, const Cond& c) {
  switch (c.kind) {
    case Cond::Kind::And:
    case Cond::Kind::Or:
      for (size_t i = 0; i < c.args.size(); ++i) {
        const Cond& a = c.args[i];
        if (i) out += c.kind == Cond::Kind::And ? " AND " : " OR ";
        const bool paren = is_chain(a) && (a.kind == c.kind || c.kind == Cond::Kind::And);
        if (paren) out += "(";
        cond_into(out, a);
        if (paren) out += ")";
      }
      return;
    case Cond::Kind::Not: {
      const Cond& a = c.args.at(0);
      if (a.kind == Cond::Kind::Like || a.kind == Cond::Kind::In || a.kind == Cond::Kind::Between) {
        std::string inner;
        cond_into(inner, a);
        out += inner.insert(a.field.size(), " NOT");
        return;
      }
      out += "NOT ";
      if (is_chain(a)) out += "(";
      cond_into(out, a);
      if (is_chain(a)) out += ")";
      return;
    }
    case Cond::Kind::Compare: out += c.field + " " + c.op + " " + value(c.values.at(0)); return;
    case Cond::Kind::Like: out += c.field + " LIKE " + quote(c.values.at(0).str); return;
    case Cond::Kind::In:
      out += c.field + " IN (";
      for (size_t i = 0; i < c.values.size(); ++i) out += (i ? ", " : "") + value(c.values[i]);
      out += ")";
      return;
    case Cond::Kind::Between:
      out += c.field + " BETWEEN " + value(c.values.at(0)) + " AND " + value(c.values.at(1));
      return;
  }
}

std::string cond(const Cond& c) {
  std::string out;
  cond_into(out, c);
  return out;
}

std::string range(const LayerRange& r) { return std::to_string(r.first) + "-" + std::to_string(r.last); }

const char* band(Band b) {
  switch (b) {
    case Band::Syntax: return " SYNTAX";
    case Band::Knowledge: return " KNOWLEDGE";
    case Band::Output: return " OUTPUT";
    case Band::All: return " ALL LAYERS";
  }
  return "";
}

const char* detail_text(Detail d) {
  switch (d) {
    case Detail::Brief: return " BRIEF";
    case Detail::Verbose: return " VERBOSE";
    case Detail::Raw: return " RAW";
    case Detail::Default: return "";
  }
  return "";
}

std::string vref(const VindexRef& v) { return v.current ? "CURRENT" : quote(v.path); }

std::string top(const std::optional<int64_t>& t) { return t ? " TOP " + std::to_string(*t) : ""; }
std::string limit(const std::optional<int64_t>& l) { return l ? " LIMIT " + std::to_string(*l) : ""; }

}  // namespace

std::string to_lql(const Statement& st) {
  return std::visit(
      [](const auto& b) -> std::string {
        using T = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<T, UseStmt>) {
          return "USE " + quote(b.path);
        } else if constexpr (std::is_same_v<T, ShowStmt>) {
          switch (b.what) {
            case ShowStmt::What::Models: return "SHOW MODELS";
            case ShowStmt::What::Patches: return "SHOW PATCHES";
            case ShowStmt::What::Layers: return "SHOW LAYERS" + (b.range ? " " + range(*b.range) : std::string());
            case ShowStmt::What::Relations:
              return "SHOW RELATIONS" + (b.layer ? " AT LAYER " + std::to_string(*b.layer) : std::string()) +
                     (b.with_examples ? " WITH EXAMPLES" : "") + detail_text(b.detail);
            case ShowStmt::What::Features:
              return "SHOW FEATURES " + std::to_string(b.layer.value_or(0)) + (b.where ? " WHERE " + cond(*b.where) : "") +
                     limit(b.limit);
            case ShowStmt::What::Entities:
              return "SHOW ENTITIES" + (b.layer ? " AT LAYER " + std::to_string(*b.layer) : std::string()) + limit(b.limit);
          }
          return "SHOW";
        } else if constexpr (std::is_same_v<T, StatsStmt>) {
          return "STATS";
        } else if constexpr (std::is_same_v<T, DescribeStmt>) {
          return "DESCRIBE " + quote(b.entity) + (b.layer ? " AT LAYER " + std::to_string(*b.layer) : std::string()) +
                 (b.band ? band(*b.band) : "") + detail_text(b.detail) + (b.relations_only ? " RELATIONS ONLY" : "");
        } else if constexpr (std::is_same_v<T, WalkStmt>) {
          return "WALK " + quote(b.prompt) + top(b.top) + (b.layers ? " LAYERS " + range(*b.layers) : std::string()) +
                 (b.compare ? " COMPARE" : "");
        } else if constexpr (std::is_same_v<T, ExplainStmt>) {
          return std::string("EXPLAIN ") + (b.infer ? "INFER " : "WALK ") + quote(b.prompt) + top(b.top) +
                 (b.layers ? " LAYERS " + range(*b.layers) : std::string()) + (b.band ? band(*b.band) : "") +
                 (b.verbose ? " VERBOSE" : "") + (b.relations_only ? " RELATIONS ONLY" : "") +
                 (b.with_attention ? " WITH ATTENTION" : "");
        } else if constexpr (std::is_same_v<T, SelectStmt>) {
          std::string out = "SELECT ";
          if (b.fields.empty()) out += "*";
          for (size_t i = 0; i < b.fields.size(); ++i) out += (i ? ", " : "") + b.fields[i];
          out += b.from == SelectStmt::From::Edges      ? " FROM EDGES"
                 : b.from == SelectStmt::From::Features ? " FROM FEATURES"
                                                        : " FROM ENTITIES";
          if (b.nearest)
            out += " NEAREST TO " + quote(*b.nearest) +
                   (b.nearest_layer ? " AT LAYER " + std::to_string(*b.nearest_layer) : std::string());
          if (b.where) out += " WHERE " + cond(*b.where);
          if (b.order_by) out += " ORDER BY " + *b.order_by + (b.descending ? " DESC" : " ASC");
          return out + limit(b.limit);
        } else if constexpr (std::is_same_v<T, InferStmt>) {
          return "INFER " + quote(b.prompt) + top(b.top) + (b.compare ? " COMPARE" : "") +
                 (b.verify_given ? (b.verify ? " VERIFY ON" : " VERIFY OFF") : "");
        } else if constexpr (std::is_same_v<T, TraceStmt>) {
          return "TRACE " + quote(b.prompt) + (b.target ? " FOR " + quote(*b.target) : std::string()) +
                 (b.layers ? " LAYERS " + range(*b.layers) : std::string()) +
                 (b.all_positions ? " POSITIONS ALL" : "") + (b.decompose ? " DECOMPOSE" : "");
        } else if constexpr (std::is_same_v<T, InsertStmt>) {
          return "INSERT INTO EDGES (entity, relation, target) VALUES (" + quote(b.entity) + ", " + quote(b.relation) +
                 ", " + quote(b.target) + ")" + (b.layer ? " AT LAYER " + std::to_string(*b.layer) : std::string()) +
                 (b.confidence ? " CONFIDENCE " + number(*b.confidence) : std::string()) +
                 (b.alpha ? " ALPHA " + number(*b.alpha) : std::string()) +
                 (b.mode ? (*b.mode == InsertMode::Knn      ? " MODE KNN"
                            : *b.mode == InsertMode::Robust ? " MODE ROBUST"
                            : *b.mode == InsertMode::Subject ? " MODE SUBJECT"
                                                             : " MODE COMPOSE")
                  : "");
        } else if constexpr (std::is_same_v<T, UpdateStmt>) {
          std::string out = "UPDATE EDGES SET ";
          for (size_t i = 0; i < b.set.size(); ++i) out += (i ? ", " : "") + b.set[i].field + " = " + value(b.set[i].value);
          return out + " WHERE " + cond(b.where);
        } else if constexpr (std::is_same_v<T, DeleteStmt>) {
          return "DELETE FROM EDGES WHERE " + cond(b.where);
        } else if constexpr (std::is_same_v<T, PatchStmt>) {
          switch (b.op) {
            case PatchStmt::Op::Begin: return "BEGIN PATCH " + quote(b.name);
            case PatchStmt::Op::Save: return std::string("SAVE PATCH");
            case PatchStmt::Op::Apply: return "APPLY PATCH " + quote(b.name);
            case PatchStmt::Op::Remove: return "REMOVE PATCH " + quote(b.name);
          }
          return "";
        } else if constexpr (std::is_same_v<T, DiffStmt>) {
          return "DIFF " + vref(b.a) + " " + vref(b.b) + (b.layer ? " LAYER " + std::to_string(*b.layer) : std::string()) +
                 (b.relation ? " RELATION " + quote(*b.relation) : std::string()) + limit(b.limit) +
                 (b.into_patch ? " INTO PATCH " + quote(*b.into_patch) : std::string());
        } else if constexpr (std::is_same_v<T, CompileStmt>) {
          return "COMPILE " + vref(b.source) + (b.into_model ? " INTO MODEL " : " INTO VINDEX ") + quote(b.path);
        }
      },
      st.body);
}

std::string to_lql(const Pipeline& p) {
  std::string out;
  for (size_t i = 0; i < p.stages.size(); ++i) out += (i ? " |> " : "") + to_lql(p.stages[i]);
  return out;
}

std::string quote_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

}  // namespace larql::lql
