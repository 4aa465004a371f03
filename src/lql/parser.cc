#include "lql/parser.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>
#include <string>

#include "util/error.h"

namespace larql::lql {

namespace {

const std::vector<std::string_view> kKeywords = {
    "ALL",      "ALPHA",    "AND",       "APPLY",   "ASC",     "AT",        "ATTENTION", "BEGIN",
    "BETWEEN",  "BRIEF",    "BY",        "COMPARE", "COMPILE",  "CONFIDENCE", "CURRENT", "DECOMPOSE", "DELETE",
    "DESC",     "DESCRIBE", "DIFF",      "EDGES",   "ENTITIES", "EXAMPLES", "EXPLAIN",  "FEATURES",  "FOR",
    "FROM",     "IN",       "INFER",     "INSERT",  "INTO",     "KNOWLEDGE", "LAYER",  "LAYERS",    "LIKE",
    "LIMIT",    "MODEL",    "MODELS",    "NEAREST", "NOT",      "ONLY",    "OR",        "ORDER",     "OUTPUT",
    "PATCH",    "PATCHES",  "POSITIONS", "RAW",     "RELATION", "RELATIONS", "REMOVE", "SAVE",      "SELECT",
    "SET",      "SHOW",     "STATS",     "SYNTAX",  "TO",       "TOP",     "TRACE",     "UPDATE",    "USE",
    "VALUES",   "VERBOSE",  "VINDEX",    "WALK",    "WHERE",    "WITH",    "LAST",
    "MODE",     "KNN",      "COMPOSE",   "ROBUST",   "VERIFY",  "ON",       "OFF"};

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  std::vector<Pipeline> script() {
    std::vector<Pipeline> out;
    while (!at_end()) {
      if (at_punct(";")) {
        next();
        continue;
      }
      out.push_back(pipeline());
      if (!at_end() && !at_punct(";")) fail_expected("\";\" or end of input");
    }
    return out;
  }

  Pipeline one() {
    Pipeline p = pipeline();
    if (at_punct(";")) next();
    if (!at_end()) fail_expected("end of input");
    return p;
  }

 private:
  // --- tokens ---------------------------------------------------------------------------------
  const Token& peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = peek();
    if (i_ < t_.size() - 1) ++i_;
    return t;
  }
  bool at_end() const { return peek().kind == TokKind::End; }
  bool at_word(std::string_view kw, size_t k = 0) const {
    return peek(k).kind == TokKind::Word && upper(peek(k).text) == kw;
  }
  bool at_punct(std::string_view p) const { return peek().kind == TokKind::Punct && peek().text == p; }
  bool accept_word(std::string_view kw) {
    if (!at_word(kw)) return false;
    next();
    return true;
  }

  int cond_depth_ = 0;
  size_t cond_terms_ = 0;  // predicates of the WHERE being parsed (bounded: kMaxConditions)
  [[noreturn]] void fail_at(const Pos& p, const std::string& what) const {
    throw Error(ErrorKind::InvalidArgument, what + " at " + p.str());
  }
  [[noreturn]] void fail_expected(const std::string& what) const {
    throw Error(ErrorKind::InvalidArgument, "expected " + what + " at " + peek().pos.str() + ", found " + peek().describe());
  }
  void expect_word(std::string_view kw) {
    if (!accept_word(kw)) fail_expected(std::string(kw));
  }
  void expect_punct(std::string_view p) {
    if (!at_punct(p)) fail_expected("\"" + std::string(p) + "\"");
    next();
  }
  std::string expect_string(const std::string& what) {
    if (peek().kind != TokKind::String) fail_expected(what + " (a quoted string)");
    return next().text;
  }
  int64_t expect_int(const std::string& what) {
    if (at_punct("-") && peek(1).kind == TokKind::Integer) fail_at(peek().pos, what + " must not be negative");
    if (peek().kind != TokKind::Integer) fail_expected(what + " (a non-negative integer)");
    // Counts and layers are ints downstream: refuse what would wrap instead of clamping.
    if (peek().integer > INT32_MAX) fail_at(peek().pos, what + " " + std::to_string(peek().integer) + " is larger than 2147483647");
    return next().integer;
  }
  double expect_number(const std::string& what) {
    bool neg = false;
    if (at_punct("-")) {
      next();
      neg = true;
    }
    if (peek().kind != TokKind::Integer && peek().kind != TokKind::Float) fail_expected(what + " (a number)");
    const double v = next().number;
    return neg ? -v : v;
  }
  // A field name: any word (some fields are keywords: layer, relation), lower-cased.
  std::string field_name(const std::string& what = "a field name") {
    if (peek().kind != TokKind::Word) fail_expected(what);
    return lower(next().text);
  }
  // Marks a clause as seen; a second time is an error.
  void once(std::set<std::string>& seen, const std::string& clause, const Pos& p) const {
    if (!seen.insert(clause).second) fail_at(p, clause + " given twice");
  }

  // A layer number and where it was written.
  int64_t layer_number(Pos& at) {
    at = peek().pos;
    return expect_int("a layer number");
  }
  LayerRange range() {
    const Pos p = peek().pos;
    LayerRange r;
    r.first = layer_number(r.first_pos);
    r.last = r.first;
    r.last_pos = r.first_pos;
    if (at_punct("-")) {
      next();
      r.last_pos = peek().pos;
      r.last = expect_int("the last layer of the range");
      if (r.last < r.first)
        throw Error(ErrorKind::InvalidArgument, "layer range " + std::to_string(r.first) + "-" + std::to_string(r.last) +
                                                    " at " + p.str() + " ends before it starts");
    }
    return r;
  }
  Value value() {
    Value v;
    v.pos = peek().pos;
    if (peek().kind == TokKind::String) {
      v.kind = Value::Kind::String;
      v.str = next().text;
      return v;
    }
    bool neg = false;
    if (at_punct("-")) {
      next();
      neg = true;
    }
    if (peek().kind == TokKind::Integer) {
      v.kind = Value::Kind::Integer;
      v.integer = neg ? -peek().integer : peek().integer;
      v.number = static_cast<double>(v.integer);
      next();
      return v;
    }
    if (peek().kind == TokKind::Float) {
      v.kind = Value::Kind::Float;
      v.number = neg ? -peek().number : peek().number;
      next();
      return v;
    }
    fail_expected("a value (a quoted string or a number)");
  }
  std::optional<Band> band() {
    if (accept_word("SYNTAX")) return Band::Syntax;
    if (accept_word("KNOWLEDGE")) return Band::Knowledge;
    if (accept_word("OUTPUT")) return Band::Output;
    if (at_word("ALL") && at_word("LAYERS", 1)) {
      next();
      next();
      return Band::All;
    }
    return std::nullopt;
  }

  // --- conditions -----------------------------------------------------------------------------
  // A whole WHERE: its predicates are counted from here.
  Cond where_cond() {
    cond_terms_ = 0;
    return cond();
  }
  Cond cond() { return or_cond(); }
  // A chain of ORs (of ANDs) is one n-ary node, built in a loop: no recursion per term.
  Cond chain(Cond::Kind kind, std::string_view word, Cond (Parser::*operand)()) {
    Cond first = (this->*operand)();
    if (!at_word(word)) return first;
    Cond c;
    c.kind = kind;
    c.pos = peek().pos;
    c.args.push_back(std::move(first));
    while (at_word(word)) {
      next();
      c.args.push_back((this->*operand)());
    }
    return c;
  }
  Cond or_cond() { return chain(Cond::Kind::Or, "OR", &Parser::and_cond); }
  Cond and_cond() { return chain(Cond::Kind::And, "AND", &Parser::not_cond); }
  Cond negate(Cond inner, const Pos& p) {
    Cond c;
    c.kind = Cond::Kind::Not;
    c.pos = p;
    c.args.push_back(std::move(inner));
    return c;
  }
  Cond not_cond() {
    // Nesting (parentheses, NOT) is bounded: the parser and the tree's destructor recurse.
    struct Depth {
      int& d;
      explicit Depth(int& x) : d(++x) {}
      ~Depth() { --d; }
    } guard(cond_depth_);
    if (cond_depth_ > kMaxCondDepth)
      fail_at(peek().pos, "a condition nested more than " + std::to_string(kMaxCondDepth) + " deep");
    if (at_word("NOT")) {
      const Pos p = next().pos;
      return negate(not_cond(), p);
    }
    if (at_punct("(")) {
      next();
      Cond c = cond();
      expect_punct(")");
      return c;
    }
    return predicate();
  }
  Cond predicate() {
    Cond c;
    c.pos = peek().pos;
    // Every predicate is evaluated per row: a WHERE of thousands is a generated mistake (a list
    // of values is one IN).
    if (++cond_terms_ > kMaxConditions)
      fail_at(c.pos, "WHERE has more than " + std::to_string(kMaxConditions) +
                         " conditions (this is the next one; for many values use field IN (...))");
    c.field = field_name("a field name (layer, feature, entity, relation, target, token, score ...)");
    bool negated = false;
    Pos not_pos;
    if (at_word("NOT") && (at_word("LIKE", 1) || at_word("IN", 1) || at_word("BETWEEN", 1))) {
      not_pos = next().pos;
      negated = true;
    }
    if (accept_word("LIKE")) {
      c.kind = Cond::Kind::Like;
      Value v;
      v.pos = peek().pos;
      v.str = expect_string("a LIKE pattern");
      c.values.push_back(v);
    } else if (accept_word("IN")) {
      c.kind = Cond::Kind::In;
      expect_punct("(");
      c.values.push_back(value());
      while (at_punct(",")) {
        next();
        c.values.push_back(value());
      }
      expect_punct(")");
    } else if (accept_word("BETWEEN")) {
      c.kind = Cond::Kind::Between;
      c.values.push_back(value());
      expect_word("AND");
      c.values.push_back(value());
    } else if (peek().kind == TokKind::Punct &&
               (at_punct("=") || at_punct("!=") || at_punct("<") || at_punct("<=") || at_punct(">") || at_punct(">="))) {
      c.kind = Cond::Kind::Compare;
      c.op = next().text;
      c.values.push_back(value());
    } else {
      fail_expected("a comparison (= != < <= > >=), LIKE, IN or BETWEEN after \"" + c.field + "\"");
    }
    return negated ? negate(std::move(c), not_pos) : c;
  }

  // --- statements -----------------------------------------------------------------------------
  Pipeline pipeline() {
    Pipeline p;
    p.pos = peek().pos;
    p.stages.push_back(statement());
    while (at_punct("|>")) {
      next();
      p.stages.push_back(statement());
    }
    return p;
  }

  Statement statement() {
    Statement s;
    s.pos = peek().pos;
    if (accept_word("USE")) s.body = UseStmt{expect_string("a vindex path")};
    else if (accept_word("SHOW")) s.body = show();
    else if (accept_word("STATS")) s.body = StatsStmt{};
    else if (accept_word("DESCRIBE")) s.body = describe();
    else if (accept_word("WALK")) s.body = walk();
    else if (accept_word("EXPLAIN")) s.body = explain();
    else if (accept_word("SELECT")) s.body = select();
    else if (accept_word("INFER")) s.body = infer();
    else if (accept_word("TRACE")) s.body = trace();
    else if (accept_word("INSERT")) s.body = insert();
    else if (accept_word("UPDATE")) s.body = update();
    else if (accept_word("DELETE")) s.body = del();
    else if (at_word("BEGIN") || at_word("SAVE") || at_word("APPLY") || at_word("REMOVE")) s.body = patch();
    else if (accept_word("DIFF")) s.body = diff();
    else if (accept_word("COMPILE")) s.body = compile();
    else fail_expected("a statement (USE, SHOW, STATS, DESCRIBE, WALK, EXPLAIN, SELECT, INFER, TRACE, INSERT, UPDATE, DELETE, BEGIN PATCH, SAVE PATCH, APPLY PATCH, REMOVE PATCH, DIFF, COMPILE)");
    return s;
  }

  std::optional<int64_t> limit_clause(std::set<std::string>& seen) {
    if (!at_word("LIMIT")) return std::nullopt;
    once(seen, "LIMIT", next().pos);
    return expect_int("a LIMIT");
  }

  ShowStmt show() {
    ShowStmt s;
    std::set<std::string> seen;
    if (accept_word("MODELS")) {
      s.what = ShowStmt::What::Models;
    } else if (accept_word("PATCHES")) {
      s.what = ShowStmt::What::Patches;
    } else if (accept_word("LAYERS")) {
      s.what = ShowStmt::What::Layers;
      if (peek().kind == TokKind::Integer) s.range = range();
    } else if (accept_word("RELATIONS")) {
      s.what = ShowStmt::What::Relations;
      for (;;) {
        const Pos p = peek().pos;
        if (at_word("AT")) {
          once(seen, "AT LAYER", p);
          next();
          expect_word("LAYER");
          s.layer = layer_number(s.layer_pos);
        } else if (at_word("WITH")) {
          once(seen, "WITH EXAMPLES", p);
          next();
          expect_word("EXAMPLES");
          s.with_examples = true;
        } else if (at_word("BRIEF") || at_word("VERBOSE") || at_word("RAW")) {
          once(seen, "BRIEF/VERBOSE/RAW", p);
          s.detail = detail_word();
        } else {
          break;
        }
      }
    } else if (accept_word("FEATURES")) {
      s.what = ShowStmt::What::Features;
      s.layer = layer_number(s.layer_pos);
      if (accept_word("WHERE")) s.where = where_cond();
      s.limit = limit_clause(seen);
    } else if (accept_word("ENTITIES")) {
      s.what = ShowStmt::What::Entities;
      if (accept_word("AT")) {
        expect_word("LAYER");
        s.layer = layer_number(s.layer_pos);
      }
      s.limit = limit_clause(seen);
    } else {
      fail_expected("MODELS, LAYERS, RELATIONS, FEATURES, ENTITIES or PATCHES");
    }
    return s;
  }

  Detail detail_word() {
    if (accept_word("BRIEF")) return Detail::Brief;
    if (accept_word("VERBOSE")) return Detail::Verbose;
    expect_word("RAW");
    return Detail::Raw;
  }

  DescribeStmt describe() {
    DescribeStmt d;
    d.entity = expect_string("an entity");
    std::set<std::string> seen;
    for (;;) {
      const Pos p = peek().pos;
      if (at_word("AT")) {
        once(seen, "AT LAYER / band", p);
        next();
        expect_word("LAYER");
        d.layer = layer_number(d.layer_pos);
      } else if (auto b = band()) {
        once(seen, "AT LAYER / band", p);
        d.band = b;
      } else if (at_word("BRIEF") || at_word("VERBOSE") || at_word("RAW")) {
        once(seen, "BRIEF/VERBOSE/RAW", p);
        d.detail = detail_word();
      } else if (at_word("RELATIONS")) {
        once(seen, "RELATIONS ONLY", p);
        next();
        expect_word("ONLY");
        d.relations_only = true;
      } else {
        break;
      }
    }
    return d;
  }

  WalkStmt walk() {
    WalkStmt w;
    w.prompt = expect_string("a prompt");
    std::set<std::string> seen;
    for (;;) {
      const Pos p = peek().pos;
      if (accept_word("TOP")) {
        once(seen, "TOP", p);
        w.top = expect_int("TOP's count");
      } else if (accept_word("LAYERS")) {
        once(seen, "LAYERS", p);
        if (!accept_word("ALL")) w.layers = range();
      } else if (accept_word("COMPARE")) {
        once(seen, "COMPARE", p);
        w.compare = true;
      } else {
        break;
      }
    }
    return w;
  }

  ExplainStmt explain() {
    ExplainStmt e;
    if (accept_word("INFER")) e.infer = true;
    else if (!accept_word("WALK")) fail_expected("WALK or INFER");
    e.prompt = expect_string("a prompt");
    std::set<std::string> seen;
    for (;;) {
      const Pos p = peek().pos;
      if (accept_word("TOP")) {
        once(seen, "TOP", p);
        e.top = expect_int("TOP's count");
      } else if (accept_word("LAYERS")) {
        once(seen, "LAYERS / band", p);
        e.layers = range();
      } else if (auto b = band()) {
        once(seen, "LAYERS / band", p);
        e.band = b;
      } else if (accept_word("VERBOSE")) {
        once(seen, "VERBOSE", p);
        e.verbose = true;
      } else if (accept_word("RELATIONS")) {
        once(seen, "RELATIONS ONLY", p);
        expect_word("ONLY");
        e.relations_only = true;
      } else if (e.infer && accept_word("WITH")) {
        once(seen, "WITH ATTENTION", p);
        expect_word("ATTENTION");
        e.with_attention = true;
      } else {
        break;
      }
    }
    return e;
  }

  SelectStmt select() {
    SelectStmt s;
    if (at_punct("*")) {
      next();
    } else {
      s.field_pos.push_back(peek().pos);
      s.fields.push_back(field_name("\"*\" or a field name"));
      while (at_punct(",")) {
        next();
        s.field_pos.push_back(peek().pos);
        s.fields.push_back(field_name());
      }
    }
    expect_word("FROM");
    if (accept_word("EDGES")) s.from = SelectStmt::From::Edges;
    else if (accept_word("FEATURES")) s.from = SelectStmt::From::Features;
    else if (accept_word("ENTITIES")) s.from = SelectStmt::From::Entities;
    else fail_expected("EDGES, FEATURES or ENTITIES");
    if (accept_word("NEAREST")) {
      expect_word("TO");
      s.nearest = expect_string("an entity");
      // EDGES need the layer whose gates are scanned; ENTITIES take it as a filter.
      if (s.from != SelectStmt::From::Entities || at_word("AT")) {
        expect_word("AT");
        expect_word("LAYER");
        s.nearest_layer = layer_number(s.nearest_layer_pos);
      }
    }
    if (accept_word("WHERE")) s.where = where_cond();
    if (accept_word("ORDER")) {
      expect_word("BY");
      s.order_by_pos = peek().pos;
      s.order_by = field_name();
      if (accept_word("DESC")) s.descending = true;
      else accept_word("ASC");
    }
    std::set<std::string> seen;
    s.limit = limit_clause(seen);
    return s;
  }

  InferStmt infer() {
    InferStmt s;
    s.prompt = expect_string("a prompt");
    std::set<std::string> seen;
    for (;;) {
      const Pos p = peek().pos;
      if (accept_word("TOP")) {
        once(seen, "TOP", p);
        s.top = expect_int("TOP's count");
      } else if (accept_word("COMPARE")) {
        once(seen, "COMPARE", p);
        s.compare = true;
      } else if (accept_word("VERIFY")) {
        once(seen, "VERIFY", p);
        s.verify_given = true;
        if (accept_word("ON")) s.verify = true;
        else if (accept_word("OFF")) s.verify = false;
        else fail_expected("ON or OFF");
      } else {
        break;
      }
    }
    return s;
  }

  TraceStmt trace() {
    TraceStmt s;
    s.prompt = expect_string("a prompt");
    std::set<std::string> seen;
    for (;;) {
      const Pos p = peek().pos;
      if (accept_word("FOR")) {
        once(seen, "FOR", p);
        s.target = expect_string("a target token");
      } else if (accept_word("LAYERS")) {
        once(seen, "LAYERS", p);
        s.layers = range();
      } else if (accept_word("POSITIONS")) {
        once(seen, "POSITIONS", p);
        if (accept_word("ALL")) s.all_positions = true;
        else if (!accept_word("LAST")) fail_expected("ALL or LAST");
      } else if (accept_word("DECOMPOSE")) {
        once(seen, "DECOMPOSE", p);
        s.decompose = true;
      } else {
        break;
      }
    }
    return s;
  }

  InsertStmt insert() {
    InsertStmt s;
    expect_word("INTO");
    expect_word("EDGES");
    expect_punct("(");
    const char* cols[] = {"entity", "relation", "target"};
    for (int k = 0; k < 3; ++k) {
      if (k > 0) expect_punct(",");
      const Pos p = peek().pos;
      const std::string f = field_name(std::string("the column ") + cols[k]);
      if (f != cols[k]) fail_at(p, std::string("the columns are (entity, relation, target); found \"") + f + "\"");
    }
    expect_punct(")");
    expect_word("VALUES");
    expect_punct("(");
    s.entity = expect_string("the entity");
    expect_punct(",");
    s.relation = expect_string("the relation");
    expect_punct(",");
    s.target = expect_string("the target");
    expect_punct(")");
    std::set<std::string> seen;
    for (;;) {
      const Pos p = peek().pos;
      if (at_word("AT")) {
        once(seen, "AT LAYER", p);
        next();
        expect_word("LAYER");
        s.layer = layer_number(s.layer_pos);
      } else if (accept_word("CONFIDENCE")) {
        once(seen, "CONFIDENCE", p);
        s.confidence_pos = peek().pos;
        s.confidence = expect_number("CONFIDENCE");
      } else if (accept_word("ALPHA")) {
        once(seen, "ALPHA", p);
        s.alpha_pos = peek().pos;
        s.alpha = expect_number("ALPHA");
      } else if (accept_word("MODE")) {
        once(seen, "MODE", p);
        if (accept_word("KNN")) s.mode = InsertMode::Knn;
        else if (accept_word("COMPOSE")) s.mode = InsertMode::Compose;
        else if (accept_word("ROBUST")) s.mode = InsertMode::Robust;
        else if (accept_word("SUBJECT")) s.mode = InsertMode::Subject;
        else fail_expected("KNN, COMPOSE, ROBUST or SUBJECT");
      } else {
        break;
      }
    }
    return s;
  }

  UpdateStmt update() {
    UpdateStmt s;
    expect_word("EDGES");
    expect_word("SET");
    std::set<std::string> seen;
    do {
      if (!s.set.empty()) next();  // the ','
      Assignment a;
      a.pos = peek().pos;
      a.field = field_name();
      once(seen, "SET " + a.field, a.pos);  // a field set twice: which value would win?
      expect_punct("=");
      a.value = value();
      s.set.push_back(std::move(a));
    } while (at_punct(","));
    expect_word("WHERE");
    s.where = where_cond();
    return s;
  }

  DeleteStmt del() {
    expect_word("FROM");
    expect_word("EDGES");
    expect_word("WHERE");
    return DeleteStmt{where_cond()};
  }

  PatchStmt patch() {
    PatchStmt s;
    if (accept_word("BEGIN")) s.op = PatchStmt::Op::Begin;
    else if (accept_word("SAVE")) s.op = PatchStmt::Op::Save;
    else if (accept_word("APPLY")) s.op = PatchStmt::Op::Apply;
    else {
      expect_word("REMOVE");
      s.op = PatchStmt::Op::Remove;
    }
    expect_word("PATCH");
    if (s.op != PatchStmt::Op::Save) s.name = expect_string("a patch name or path");
    return s;
  }

  VindexRef vref() {
    const Pos p = peek().pos;
    if (accept_word("CURRENT")) return VindexRef{true, "", p};
    return VindexRef{false, expect_string("CURRENT or a vindex path"), p};
  }

  DiffStmt diff() {
    DiffStmt s;
    s.a = vref();
    s.b = vref();
    std::set<std::string> seen;
    for (;;) {
      const Pos p = peek().pos;
      if (accept_word("LAYER")) {
        once(seen, "LAYER", p);
        s.layer = layer_number(s.layer_pos);
      } else if (accept_word("RELATION")) {
        once(seen, "RELATION", p);
        s.relation = expect_string("a relation");
      } else if (accept_word("LIMIT")) {
        once(seen, "LIMIT", p);
        s.limit = expect_int("a LIMIT");
      } else if (accept_word("INTO")) {
        once(seen, "INTO PATCH", p);
        expect_word("PATCH");
        s.into_patch = expect_string("a patch path");
      } else {
        break;
      }
    }
    return s;
  }

  CompileStmt compile() {
    CompileStmt s;
    s.source = vref();
    expect_word("INTO");
    if (accept_word("MODEL")) s.into_model = true;
    else if (!accept_word("VINDEX")) fail_expected("VINDEX or MODEL");
    s.path = expect_string(s.into_model ? "an output .gguf path" : "an output vindex path");
    return s;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
};

}  // namespace

std::vector<Pipeline> parse_script(std::string_view src, Pos start) { return Parser(lex(src, start)).script(); }

Pipeline parse_one(std::string_view src, Pos start) { return Parser(lex(src, start)).one(); }

const std::vector<std::string_view>& keywords() { return kKeywords; }

}  // namespace larql::lql
