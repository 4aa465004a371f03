#include "server/json_schema.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace larql::server {

using json = nlohmann::ordered_json;  // properties keep the schema's order
using Elem = SchemaGrammar::Elem;
using Kind = SchemaGrammar::Kind;

namespace {

constexpr size_t kMaxElems = 60000;   // positions are uint16 in the state
constexpr int kMaxSchemaDepth = 32;   // schema nesting (the compiler recurses; deeper outputs need deeper stacks)
constexpr int kMaxStackDepth = 128;   // one stack's depth while expanding (about 3 per nesting level)
constexpr int64_t kMaxItemsBound = 256;
constexpr int kIntDigits = 15, kFracDigits = 15, kExpDigits = 3;

std::string pointer_token(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string where(const std::string& ptr) { return ptr.empty() ? "/" : ptr; }

[[noreturn]] void unsupported(const std::string& keyword, const std::string& ptr, const std::string& why = "") {
  throw Error(ErrorKind::Unsupported, "json_schema: '" + keyword + "' at " + where(ptr) + " is not supported" +
                                          (why.empty() ? "" : " (" + why + ")"));
}

[[noreturn]] void malformed(const std::string& ptr, const std::string& what) {
  throw Error(ErrorKind::InvalidArgument, "json_schema: at " + where(ptr) + ": " + what);
}

const std::set<std::string>& known_keywords() {
  static const std::set<std::string> k = {
      "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
      "anyOf", "$ref", "$defs", "definitions", "title", "description", "$comment", "examples", "default",
      "$schema", "$id"};
  return k;
}

}  // namespace

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& root) : root_(root) {}

  std::shared_ptr<SchemaGrammar> run() {
    g_ = std::make_shared<SchemaGrammar>();
    const uint32_t r = compile(root_, "", 0);
    // The start position: a reference to the root rule followed by End.
    g_->root_ = static_cast<uint32_t>(g_->elems_.size());
    push({{Kind::Rule, r}});
    g_->free_.assign(g_->elems_.size(), 0);
    for (uint32_t p : free_positions_) g_->free_[p] = 1;
    return g_;
  }

 private:
  using Seq = std::vector<Elem>;

  uint32_t new_rule() {
    g_->rules_.emplace_back();
    return static_cast<uint32_t>(g_->rules_.size() - 1);
  }
  // Appends `seq` + End; returns where it starts.
  uint32_t push(const Seq& seq) {
    const auto start = static_cast<uint32_t>(g_->elems_.size());
    for (const Elem& e : seq) g_->elems_.push_back(e);
    g_->elems_.push_back({Kind::End, 0});
    if (g_->elems_.size() > kMaxElems)
      throw Error(ErrorKind::InvalidArgument, "json_schema: the schema is too large (its grammar exceeds " +
                                                  std::to_string(kMaxElems) + " elements)");
    return start;
  }
  uint32_t alt(uint32_t rule, const Seq& seq) {
    const uint32_t start = push(seq);
    g_->rules_[rule].push_back(start);
    return start;
  }
  Elem cls(std::array<uint64_t, 4> bits) {
    auto it = class_ids_.find(bits);
    if (it != class_ids_.end()) return {Kind::Bytes, it->second};
    const auto id = static_cast<uint32_t>(g_->classes_.size());
    g_->classes_.push_back(bits);
    class_ids_[bits] = id;
    return {Kind::Bytes, id};
  }
  Elem range(unsigned lo, unsigned hi) {
    std::array<uint64_t, 4> b{};
    for (unsigned c = lo; c <= hi; ++c) b[c >> 6] |= uint64_t{1} << (c & 63);
    return cls(b);
  }
  Elem byte(unsigned char c) { return range(c, c); }
  Elem chars(const std::string& set) {
    std::array<uint64_t, 4> b{};
    for (unsigned char c : set) b[c >> 6] |= uint64_t{1} << (c & 63);
    return cls(b);
  }
  static Elem ref(uint32_t rule) { return {Kind::Rule, rule}; }
  Seq lit(const std::string& s) {
    Seq out;
    for (unsigned char c : s) out.push_back(byte(c));
    return out;
  }

  // The alternatives of a set of literal byte strings, prefix-factored (a trie of rules) so a
  // byte never splits the state into one stack per literal.
  uint32_t literals(std::vector<std::string> words) {
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    return trie(words, 0, words.size(), 0);
  }
  uint32_t trie(const std::vector<std::string>& w, size_t lo, size_t hi, size_t depth) {
    const uint32_t r = new_rule();
    size_t i = lo;
    if (i < hi && w[i].size() == depth) {
      alt(r, {});
      ++i;
    }
    while (i < hi) {
      const unsigned char b = static_cast<unsigned char>(w[i][depth]);
      size_t j = i;
      while (j < hi && static_cast<unsigned char>(w[j][depth]) == b) ++j;
      if (j == i + 1 && w[i].size() == depth + 1) {
        alt(r, {byte(b)});
      } else {
        const uint32_t child = trie(w, i, j, depth + 1);
        alt(r, {byte(b), ref(child)});
      }
      i = j;
    }
    return r;
  }

  // "[0-9]{0,n}" as a chain of rules.
  uint32_t opt_digits(int n) {
    uint32_t prev = new_rule();
    alt(prev, {});
    for (int k = 1; k <= n; ++k) {
      const uint32_t r = new_rule();
      alt(r, {range('0', '9'), ref(prev)});
      alt(r, {});
      prev = r;
    }
    return prev;
  }

  uint32_t integer_rule() {
    if (integer_) return *integer_;
    const uint32_t more = opt_digits(kIntDigits - 1);
    const uint32_t mag = new_rule();
    alt(mag, {byte('0')});
    alt(mag, {range('1', '9'), ref(more)});
    const uint32_t r = new_rule();
    alt(r, {ref(mag)});
    alt(r, {byte('-'), ref(mag)});
    integer_ = r;
    return r;
  }

  uint32_t number_rule() {
    if (number_) return *number_;
    const uint32_t i = integer_rule();
    const uint32_t frac = new_rule();
    alt(frac, {byte('.'), range('0', '9'), ref(opt_digits(kFracDigits - 1))});
    const uint32_t exp = new_rule();
    const uint32_t exp_digits = opt_digits(kExpDigits - 1);
    alt(exp, {chars("eE"), range('0', '9'), ref(exp_digits)});
    alt(exp, {chars("eE"), chars("+-"), range('0', '9'), ref(exp_digits)});
    const uint32_t r = new_rule();
    alt(r, {ref(i)});
    alt(r, {ref(i), ref(frac)});
    alt(r, {ref(i), ref(exp)});
    alt(r, {ref(i), ref(frac), ref(exp)});
    number_ = r;
    return r;
  }

  // A free string: '"' char* '"' with JSON's escapes and well-formed UTF-8 (Unicode 15 table 3-7).
  uint32_t string_rule() {
    if (string_) return *string_;
    const uint32_t ch = new_rule();
    std::array<uint64_t, 4> plain{};
    for (unsigned c = 0x20; c < 0x80; ++c)
      if (c != '"' && c != '\\') plain[c >> 6] |= uint64_t{1} << (c & 63);
    const Elem h = chars("0123456789abcdefABCDEF");
    const Elem cont = range(0x80, 0xBF);
    std::vector<Seq> alts = {
        {cls(plain)},
        {byte('\\'), chars("\"\\/bfnrt")},
        {byte('\\'), byte('u'), h, h, h, h},
        {range(0xC2, 0xDF), cont},
        {byte(0xE0), range(0xA0, 0xBF), cont},
        {chars("\xE1\xE2\xE3\xE4\xE5\xE6\xE7\xE8\xE9\xEA\xEB\xEC\xEE\xEF"), cont, cont},
        {byte(0xED), range(0x80, 0x9F), cont},
        {byte(0xF0), range(0x90, 0xBF), cont, cont},
        {range(0xF1, 0xF3), cont, cont, cont},
        {byte(0xF4), range(0x80, 0x8F), cont, cont},
    };
    for (const Seq& s : alts) {
      const uint32_t at = alt(ch, s);
      if (g_->plain_pos_ < 0) g_->plain_pos_ = at;  // the first: the plain class
      free_positions_.push_back(at);
    }
    const uint32_t body = new_rule();
    alt(body, {ref(ch), ref(body)});
    alt(body, {});
    const uint32_t r = new_rule();
    free_positions_.push_back(alt(r, {byte('"'), ref(body), byte('"')}) + 2);  // the closing quote
    string_ = r;
    return r;
  }

  uint32_t object_rule(const json& s, const std::string& ptr, int depth) {
    if (s.contains("additionalProperties") && !(s["additionalProperties"].is_boolean() && !s["additionalProperties"].get<bool>()))
      unsupported("additionalProperties", ptr + "/additionalProperties", "only false is supported");
    std::vector<std::pair<std::string, const json*>> props;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) malformed(ptr + "/properties", "'properties' must be an object");
      for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) props.emplace_back(it.key(), &it.value());
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) malformed(ptr + "/required", "'required' must be a list of names");
      for (const auto& n : s["required"]) {
        if (!n.is_string()) malformed(ptr + "/required", "'required' must be a list of names");
        const std::string name = n.get<std::string>();
        if (std::none_of(props.begin(), props.end(), [&](const auto& p) { return p.first == name; }))
          malformed(ptr + "/required", "required property '" + name + "' is not in 'properties'");
        required.insert(name);
      }
    }
    // F_i: nothing written yet, from property i on; C_i: something written.
    const size_t n = props.size();
    std::vector<uint32_t> F(n + 1), C(n + 1);
    F[n] = new_rule();
    alt(F[n], {});
    C[n] = new_rule();
    alt(C[n], {});
    for (size_t k = n; k-- > 0;) {
      const std::string& name = props[k].first;
      const uint32_t value = compile(*props[k].second, ptr + "/properties/" + pointer_token(name), depth + 1);
      Seq key = lit(json(name).dump(-1, ' ', false, json::error_handler_t::replace) + ":");
      key.push_back(ref(value));
      F[k] = new_rule();
      C[k] = new_rule();
      Seq f = key;
      f.push_back(ref(C[k + 1]));
      alt(F[k], f);
      Seq c = {byte(',')};
      c.insert(c.end(), key.begin(), key.end());
      c.push_back(ref(C[k + 1]));
      alt(C[k], c);
      if (!required.count(name)) {
        alt(F[k], {ref(F[k + 1])});
        alt(C[k], {ref(C[k + 1])});
      }
    }
    const uint32_t r = new_rule();
    alt(r, {byte('{'), ref(F[0]), byte('}')});
    return r;
  }

  int64_t count_field(const json& s, const char* key, int64_t def, const std::string& ptr) {
    if (!s.contains(key)) return def;
    const json& v = s[key];
    if (!v.is_number_integer() && !v.is_number_unsigned()) malformed(ptr + "/" + key, std::string("'") + key + "' must be an integer");
    if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(kMaxItemsBound) : v.get<int64_t>() > kMaxItemsBound)
      unsupported(key, ptr + "/" + key, "at most " + std::to_string(kMaxItemsBound));
    if (v.get<int64_t>() < 0) malformed(ptr + "/" + key, std::string("'") + key + "' must be >= 0");
    return v.get<int64_t>();
  }

  uint32_t array_rule(const json& s, const std::string& ptr, int depth) {
    if (!s.contains("items")) unsupported("type: array without 'items'", ptr, "say what the items are");
    if (s["items"].is_array()) unsupported("items", ptr + "/items", "a list of item schemas (tuple form)");
    const uint32_t item = compile(s["items"], ptr + "/items", depth + 1);
    const int64_t lo = count_field(s, "minItems", 0, ptr);
    const int64_t hi = count_field(s, "maxItems", -1, ptr);
    if (hi >= 0 && hi < lo) malformed(ptr, "'maxItems' is below 'minItems'");
    const uint32_t r = new_rule();
    if (hi == 0) {
      alt(r, {byte('['), byte(']')});
      return r;
    }
    // rest(k): k items written so far.
    uint32_t tail = 0;
    const int64_t last = hi >= 0 ? hi : lo;  // from here on: the end, or the unbounded loop
    if (hi < 0) {
      tail = new_rule();
      alt(tail, {});
      alt(tail, {byte(','), ref(item), ref(tail)});
    } else {
      tail = new_rule();
      alt(tail, {});
    }
    uint32_t next = tail;
    for (int64_t k = last - 1; k >= 1; --k) {
      const uint32_t rk = new_rule();
      if (k >= lo) alt(rk, {});
      alt(rk, {byte(','), ref(item), ref(next)});
      next = rk;
    }
    if (last < 1) next = tail;  // lo == 0 and unbounded: rest(1) is the loop
    if (lo == 0) alt(r, {byte('['), byte(']')});
    alt(r, {byte('['), ref(item), ref(next), byte(']')});
    return r;
  }

  uint32_t type_rule(const std::string& type, const json& s, const std::string& ptr, int depth) {
    if (type == "string") return string_rule();
    if (type == "number") return number_rule();
    if (type == "integer") return integer_rule();
    if (type == "boolean") return literals({"true", "false"});
    if (type == "null") return literals({"null"});
    if (type == "object") return object_rule(s, ptr, depth);
    if (type == "array") return array_rule(s, ptr, depth);
    malformed(ptr + "/type", "unknown type '" + type + "'");
  }

  uint32_t compile(const json& s, const std::string& ptr, int depth) {
    if (depth >= kMaxSchemaDepth) unsupported("nesting", ptr, "deeper than " + std::to_string(kMaxSchemaDepth));
    if (s.is_boolean()) unsupported("a boolean schema", ptr);
    if (!s.is_object()) malformed(ptr, "a schema must be an object");
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!known_keywords().count(it.key())) unsupported(it.key(), ptr + "/" + pointer_token(it.key()));
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) malformed(ptr + "/$ref", "'$ref' must be a string");
      const std::string target = s["$ref"].get<std::string>();
      if (auto m = memo_.find(target); m != memo_.end()) return m->second;
      const json* def = nullptr;
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p(prefix);
        if (target.compare(0, p.size(), p) != 0) continue;
        const std::string section = p.substr(2, p.size() - 3);
        const std::string name = target.substr(p.size());
        if (root_.contains(section) && root_[section].is_object() && root_[section].contains(name))
          def = &root_[section][name];
      }
      if (target == "#") unsupported("$ref", ptr + "/$ref", "'#' refers to the whole schema: recursive");
      if (!def) unsupported("$ref", ptr + "/$ref", "'" + target + "' is not a #/$defs/NAME or #/definitions/NAME of this schema");
      if (resolving_.count(target)) unsupported("$ref", ptr + "/$ref", "'" + target + "' is recursive");
      resolving_.insert(target);
      const uint32_t r = compile(*def, target.substr(1), depth + 1);
      resolving_.erase(target);
      memo_[target] = r;
      return r;
    }
    if (s.contains("anyOf")) {
      const json& a = s["anyOf"];
      if (!a.is_array() || a.empty()) malformed(ptr + "/anyOf", "'anyOf' must be a non-empty list of schemas");
      for (const char* k : {"type", "enum", "const", "properties", "items"})
        if (s.contains(k)) unsupported(k, ptr + "/" + k, "beside 'anyOf'; put it inside each alternative");
      std::vector<uint32_t> subs;
      for (size_t i = 0; i < a.size(); ++i) subs.push_back(compile(a[i], ptr + "/anyOf/" + std::to_string(i), depth + 1));
      const uint32_t r = new_rule();
      for (uint32_t sub : subs) alt(r, {ref(sub)});
      return r;
    }
    auto dumped = [](const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); };
    if (s.contains("const")) return literals({dumped(s["const"])});
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) malformed(ptr + "/enum", "'enum' must be a non-empty list");
      std::vector<std::string> words;
      for (const auto& v : s["enum"]) words.push_back(dumped(v));
      return literals(words);
    }
    if (!s.contains("type")) malformed(ptr, "the schema has none of 'type', 'enum', 'const', 'anyOf', '$ref'");
    const json& t = s["type"];
    if (t.is_string()) return type_rule(t.get<std::string>(), s, ptr, depth);
    if (!t.is_array() || t.empty()) malformed(ptr + "/type", "'type' must be a name or a non-empty list of names");
    std::vector<uint32_t> subs;
    for (const auto& name : t) {
      if (!name.is_string()) malformed(ptr + "/type", "'type' must be a name or a non-empty list of names");
      subs.push_back(type_rule(name.get<std::string>(), s, ptr, depth));
    }
    const uint32_t r = new_rule();
    for (uint32_t sub : subs) alt(r, {ref(sub)});
    return r;
  }

  const json& root_;
  std::shared_ptr<SchemaGrammar> g_;
  std::map<std::array<uint64_t, 4>, uint32_t> class_ids_;
  std::map<std::string, uint32_t> memo_;
  std::set<std::string> resolving_;
  std::optional<uint32_t> integer_, number_, string_;
  std::vector<uint32_t> free_positions_;
};

std::shared_ptr<SchemaGrammar> SchemaGrammar::compile(const std::string& schema_json) {
  json root;
  try {
    root = json::parse(schema_json);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::InvalidArgument, std::string("json_schema: the schema is not valid JSON: ") + e.what());
  }
  return SchemaCompiler(root).run();
}

// ---- the automaton ----

SchemaState::SchemaState(const SchemaGrammar& g) : g_(&g) {
  uint16_t stack[kMaxStackDepth];
  stack[0] = static_cast<uint16_t>(g.root());
  SchemaState out;
  out.g_ = &g;
  if (!expand(stack, 1, out))
    throw Error(ErrorKind::Unsupported, "json_schema: the schema keeps more than " + std::to_string(kMaxStacks) +
                                            " alternatives open at its start (anyOf or type lists too wide)");
  *this = out;
}

bool SchemaState::add(const uint16_t* stack, int depth) {
  size_t i = 0;
  for (int s = 0; s < n_stacks_; ++s) {
    const int d = buf_[i];
    if (d == depth && std::equal(stack, stack + depth, buf_.begin() + static_cast<std::ptrdiff_t>(i + 1))) return true;
    i += static_cast<size_t>(d) + 1;
  }
  if (n_stacks_ >= kMaxStacks || len_ + depth + 1 > kCapacity) return false;
  buf_[len_] = static_cast<uint16_t>(depth);
  std::copy(stack, stack + depth, buf_.begin() + len_ + 1);
  len_ = static_cast<uint16_t>(len_ + depth + 1);
  ++n_stacks_;
  return true;
}

// Expands `stack` (depth entries, top last) until every resulting stack's top is a byte class or
// the stack is empty, adding each to `out`. `stack` has room for kMaxStackDepth entries and is
// the caller's scratch.
bool SchemaState::expand(uint16_t* stack, int depth, SchemaState& out) const {
  const auto& el = g_->elems();
  for (;;) {
    if (depth == 0) return out.add(stack, 0);
    const Elem& e = el[stack[depth - 1]];
    if (e.kind == Kind::Bytes) return out.add(stack, depth);
    if (e.kind == Kind::End) {
      --depth;
      continue;
    }
    // A rule: its continuation stays (or, at the end of an alternative, goes: a tail call), one
    // stack per alternative.
    const uint16_t next = static_cast<uint16_t>(stack[depth - 1] + 1);
    int base = depth;
    if (el[next].kind == Kind::End) --base;
    else stack[depth - 1] = next;
    if (base + 1 > kMaxStackDepth) return false;
    const auto& alts = g_->alts(e.arg);
    for (size_t a = 0; a < alts.size(); ++a) {
      uint16_t copy[kMaxStackDepth];
      std::copy(stack, stack + base, copy);
      copy[base] = static_cast<uint16_t>(alts[a]);
      if (!expand(copy, base + 1, out)) return false;
    }
    return true;
  }
}

bool SchemaState::feed(uint8_t c) {
  if (!g_) return false;
  SchemaState out;
  out.g_ = g_;
  size_t i = 0;
  uint16_t stack[kMaxStackDepth];
  for (int s = 0; s < n_stacks_; ++s) {
    const int d = buf_[i];
    if (d > 0) {
      const Elem& e = g_->elems()[buf_[i + static_cast<size_t>(d)]];
      if (e.kind == Kind::Bytes && g_->in_class(e.arg, c)) {
        std::copy(buf_.begin() + static_cast<std::ptrdiff_t>(i + 1), buf_.begin() + static_cast<std::ptrdiff_t>(i + 1 + d), stack);
        ++stack[d - 1];
        if (!expand(stack, d, out)) return false;
      }
    }
    i += static_cast<size_t>(d) + 1;
  }
  if (out.n_stacks_ == 0) return false;
  g_ = out.g_;
  len_ = out.len_;
  n_stacks_ = out.n_stacks_;
  std::copy(out.buf_.begin(), out.buf_.begin() + len_, buf_.begin());
  return true;
}

bool SchemaState::accepting() const {
  size_t i = 0;
  for (int s = 0; s < n_stacks_; ++s) {
    if (buf_[i] == 0) return true;
    i += static_cast<size_t>(buf_[i]) + 1;
  }
  return false;
}

bool SchemaState::accepts_plain() const {
  const int64_t plain = g_ ? g_->plain_char_pos() : -1;
  if (plain < 0) return false;
  size_t i = 0;
  for (int s = 0; s < n_stacks_; ++s) {
    const int d = buf_[i];
    if (d > 0 && buf_[i + static_cast<size_t>(d)] == plain) return true;
    i += static_cast<size_t>(d) + 1;
  }
  return false;
}

bool SchemaState::in_free_string() const {
  if (!g_ || n_stacks_ == 0) return false;
  size_t i = 0;
  for (int s = 0; s < n_stacks_; ++s) {
    const int d = buf_[i];
    if (d == 0 || !g_->free_string_pos(buf_[i + static_cast<size_t>(d)])) return false;
    i += static_cast<size_t>(d) + 1;
  }
  return true;
}

std::string SchemaState::key() const {
  return std::string(reinterpret_cast<const char*>(buf_.data()), static_cast<size_t>(len_) * sizeof(uint16_t));
}

}  // namespace larql::server
