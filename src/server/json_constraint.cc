#include "server/json_constraint.h"

#include <algorithm>
#include <numeric>

namespace larql::server {
namespace {

using Mode = JsonState::Mode;

constexpr const char* kWords[3] = {"true", "false", "null"};

bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Number sub-states (RFC 8259 §6): 0 after '-', 1 a lone 0, 2 integer digits, 3 after '.',
// 4 fraction digits, 5 after 'e', 6 after the exponent's sign, 7 exponent digits.
bool number_complete(uint8_t n) { return n == 1 || n == 2 || n == 4 || n == 7; }

void after_value(JsonState& s) { s.mode = s.depth == 0 ? Mode::Done : Mode::CommaOrEnd; }

bool open(JsonState& s, char c) {
  if (s.depth >= JsonState::kMaxDepth) return false;
  s.stack[s.depth++] = c;
  s.mode = c == '{' ? Mode::KeyOrEnd : Mode::ValueOrEnd;
  return true;
}

bool close(JsonState& s, char c) {
  if (s.depth == 0 || s.stack[s.depth - 1] != (c == '}' ? '{' : '[')) return false;
  --s.depth;
  after_value(s);
  return true;
}

bool start_value(JsonState& s, uint8_t c) {
  switch (c) {
    case '{':
    case '[':
      return open(s, static_cast<char>(c));
    case '"':
      s.mode = Mode::Str;
      s.key = false;
      return true;
    case 't':
    case 'f':
    case 'n':
      s.mode = Mode::Literal;
      s.lit = c == 't' ? 0 : c == 'f' ? 1 : 2;
      s.lit_pos = 1;
      return true;
    case '-':
      s.mode = Mode::Number;
      s.num = 0;
      s.num_len = 1;
      return true;
    default:
      if (!is_digit(c)) return false;
      s.mode = Mode::Number;
      s.num = c == '0' ? 1 : 2;
      s.num_len = 1;
      return true;
  }
}

}  // namespace

bool JsonState::feed(uint8_t c) {
  // Whitespace between tokens of the grammar, bounded so a model cannot pad forever.
  const bool structural = mode == Mode::Top || mode == Mode::Value || mode == Mode::ValueOrEnd ||
                          mode == Mode::KeyOrEnd || mode == Mode::Key || mode == Mode::Colon ||
                          mode == Mode::CommaOrEnd;
  // Not before the object (the answer starts with '{'), never '\r' (valid, never needed: a
  // constrained model otherwise pads with it).
  if (structural && is_ws(c)) return mode != Mode::Top && c != '\r' && ++ws <= kMaxWhitespace;
  if (structural) ws = 0;
  switch (mode) {
    case Mode::Top:
      return c == '{' && open(*this, '{');
    case Mode::Value:
      return start_value(*this, c);
    case Mode::ValueOrEnd:
      return c == ']' ? close(*this, ']') : start_value(*this, c);
    case Mode::KeyOrEnd:
      if (c == '}') return close(*this, '}');
      [[fallthrough]];
    case Mode::Key:
      if (c != '"') return false;
      mode = Mode::Str;
      key = true;
      return true;
    case Mode::Colon:
      if (c != ':') return false;
      mode = Mode::Value;
      return true;
    case Mode::CommaOrEnd:
      if (c == ',') {
        mode = stack[depth - 1] == '{' ? Mode::Key : Mode::Value;
        return true;
      }
      if (c == '}' || c == ']') return close(*this, static_cast<char>(c));
      return false;
    case Mode::Str:
      if (utf8_left > 0) {
        if (c < utf8_lo || c > utf8_hi) return false;
        --utf8_left;
        utf8_lo = 0x80;
        utf8_hi = 0xBF;
        return true;
      }
      if (c == '"') {
        if (key) mode = Mode::Colon;
        else after_value(*this);
        return true;
      }
      if (c == '\\') {
        mode = Mode::StrEscape;
        return true;
      }
      if (c < 0x20) return false;
      if (c < 0x80) return true;
      // UTF-8 lead bytes and the range of the byte after them (Unicode 15, table 3-7).
      if (c >= 0xC2 && c <= 0xDF) utf8_left = 1;
      else if (c == 0xE0) utf8_left = 2, utf8_lo = 0xA0;
      else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) utf8_left = 2;
      else if (c == 0xED) utf8_left = 2, utf8_hi = 0x9F;
      else if (c == 0xF0) utf8_left = 3, utf8_lo = 0x90;
      else if (c >= 0xF1 && c <= 0xF3) utf8_left = 3;
      else if (c == 0xF4) utf8_left = 3, utf8_hi = 0x8F;
      else return false;
      return true;
    case Mode::StrEscape:
      if (c == 'u') {
        mode = Mode::StrHex;
        hex_left = 4;
        return true;
      }
      if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') return false;
      mode = Mode::Str;
      return true;
    case Mode::StrHex:
      if (!is_hex(c)) return false;
      if (--hex_left == 0) mode = Mode::Str;
      return true;
    case Mode::Number: {
      if (++num_len > 40) return false;
      const uint8_t n = num;
      if (is_digit(c)) {
        if (n == 0) num = c == '0' ? 1 : 2;
        else if (n == 1) return false;  // no leading zeros
        else if (n == 3 || n == 4) num = 4;
        else if (n == 5 || n == 6 || n == 7) num = 7;
        return true;
      }
      if (c == '.' && (n == 1 || n == 2)) return num = 3, true;
      if ((c == 'e' || c == 'E') && (n == 1 || n == 2 || n == 4)) return num = 5, true;
      if ((c == '+' || c == '-') && n == 5) return num = 6, true;
      if (!number_complete(n)) return false;
      after_value(*this);  // the number ended: this byte belongs to what follows
      return feed(c);
    }
    case Mode::Literal: {
      const char* w = kWords[lit];
      if (c != static_cast<uint8_t>(w[lit_pos])) return false;
      if (w[++lit_pos] == '\0') after_value(*this);
      return true;
    }
    case Mode::Done:
      return false;
  }
  return false;
}

JsonVocab::JsonVocab(const Tokenizer& tok) {
  const int32_t V = tok.vocab_size();
  pieces_.resize(static_cast<size_t>(V));
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < V; ++id) {
    const TokenType t = tok.token_type(id);
    if (t != TokenType::Normal && t != TokenType::Byte) continue;
    pieces_[static_cast<size_t>(id)] = tok.token_to_piece(id);
    if (pieces_[static_cast<size_t>(id)].empty()) continue;
    ids.push_back(id);
    // Plain: from inside a string (no partial character pending) the token leaves the state as
    // it found it.
    JsonState s;
    s.mode = Mode::Str;
    bool ok = true;
    for (unsigned char c : pieces_[static_cast<size_t>(id)]) ok = ok && s.feed(c);
    (ok && s.mode == Mode::Str && s.utf8_left == 0 ? plain_ : special_).push_back(id);
  }
  for (int32_t id : special_) {
    const std::string& p = pieces_[static_cast<size_t>(id)];
    if (p.find('"') != std::string::npos) {
      special_quote_.push_back(id);
      continue;
    }
    JsonState s;
    s.mode = Mode::Str;
    bool ok = true;
    for (unsigned char c : p) ok = ok && s.feed(c);
    if (ok) special_string_.push_back(id);
  }
  plain_mask_.assign(static_cast<size_t>(V), 0);
  for (int32_t id : plain_) plain_mask_[static_cast<size_t>(id)] = 1;
  // The trie, built over the tokens sorted by their bytes: each node's child edges are
  // contiguous, written before its children are built.
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return pieces_[static_cast<size_t>(a)] < pieces_[static_cast<size_t>(b)];
  });
  nodes_.push_back({});
  same_.emplace_back();
  struct Work {
    uint32_t node;
    size_t lo, hi, depth;
  };
  std::vector<Work> work{{0, 0, ids.size(), 0}};
  while (!work.empty()) {
    const Work w = work.back();
    work.pop_back();
    size_t i = w.lo;
    // Tokens whose bytes end at this node come first in sorted order.
    while (i < w.hi && pieces_[static_cast<size_t>(ids[i])].size() == w.depth) {
      Node& n = nodes_[w.node];
      if (n.token < 0) n.token = ids[i];
      else same_[w.node].push_back(ids[i]);
      ++i;
    }
    std::vector<Work> children;
    const uint32_t first = static_cast<uint32_t>(edges_.size());
    while (i < w.hi) {
      const uint8_t b = static_cast<uint8_t>(pieces_[static_cast<size_t>(ids[i])][w.depth]);
      size_t j = i;
      while (j < w.hi && static_cast<uint8_t>(pieces_[static_cast<size_t>(ids[j])][w.depth]) == b) ++j;
      const uint32_t child = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back({});
      same_.emplace_back();
      edges_.push_back({b, child});
      children.push_back({child, i, j, w.depth + 1});
      i = j;
    }
    nodes_[w.node].first = first;
    nodes_[w.node].count = static_cast<uint32_t>(edges_.size()) - first;
    for (auto& c : children) work.push_back(c);
  }
}

bool JsonVocab::advance(JsonState& s, int32_t id) const {
  if (id < 0 || id >= vocab()) return false;
  const std::string& p = pieces_[static_cast<size_t>(id)];
  if (p.empty()) return false;
  for (unsigned char c : p)
    if (!s.feed(c)) return false;
  return true;
}

template <class S, class F>
void JsonVocab::walk(const S& s, F&& allow) const {
  struct Item {
    uint32_t node;
    S state;
  };
  std::vector<Item> stack{{0, s}};
  while (!stack.empty()) {
    Item it = std::move(stack.back());
    stack.pop_back();
    const Node& n = nodes_[it.node];
    for (uint32_t e = n.first; e < n.first + n.count; ++e) {
      S t = it.state;
      if (!t.feed(edges_[e].byte)) continue;
      const uint32_t child = edges_[e].node;
      if (nodes_[child].token >= 0) {
        allow(nodes_[child].token);
        for (int32_t id : same_[child]) allow(id);
      }
      if (nodes_[child].count > 0) stack.push_back({child, t});
    }
  }
}

void JsonVocab::mask(const JsonState& s, const std::vector<int32_t>& eog, std::vector<uint8_t>& allowed) const {
  allowed.assign(pieces_.size(), 0);
  bool any = false;
  auto allow = [&](int32_t id) {
    allowed[static_cast<size_t>(id)] = 1;
    any = true;
  };
  if (s.done()) {
    for (int32_t id : eog) allow(id);
    return;
  }
  if (s.mode == Mode::Str && s.utf8_left == 0) {
    for (int32_t id : plain_) allow(id);
    for (int32_t id : special_) {
      JsonState t = s;
      if (advance(t, id)) allow(id);
    }
  } else {
    walk(s, allow);
  }
  if (!any)
    for (int32_t id : eog) allow(id);
}

bool JsonVocab::advance(SchemaState& s, int32_t id) const {
  if (id < 0 || id >= vocab()) return false;
  const std::string& p = pieces_[static_cast<size_t>(id)];
  if (p.empty()) return false;
  SchemaState t = s;
  for (unsigned char c : p)
    if (!t.feed(c)) return false;
  s = t;
  return true;
}

void JsonVocab::mask(const SchemaState& s, const std::vector<int32_t>& eog, std::vector<uint8_t>& allowed) const {
  const bool free_string = s.accepts_plain();
  if (free_string) allowed = plain_mask_;
  else allowed.assign(pieces_.size(), 0);
  auto& cache = s.grammar()->cache;
  const std::string key = s.key();
  auto hit = cache.find(key);
  if (hit == cache.end()) {
    std::vector<int32_t> ids;
    if (free_string) {
      // Every plain token (complete UTF-8, no quote, backslash or control byte) is accepted by the
      // free string's stacks, whatever other stacks (an enum's beside the string in an anyOf)
      // accept: only the other tokens need simulating.
      // In a free string only (no other stacks): a token without a quote is accepted exactly when
      // a JSON string takes it, known from the vocabulary; only those with a quote depend on what
      // follows the string.
      const bool pure = s.in_free_string();
      if (pure) ids = special_string_;
      for (int32_t id : pure ? special_quote_ : special_) {
        SchemaState t = s;
        if (advance(t, id)) ids.push_back(id);
      }
    } else {
      walk(s, [&](int32_t id) { ids.push_back(id); });
    }
    if (cache.size() >= 256) cache.clear();
    hit = cache.emplace(key, std::move(ids)).first;
  }
  bool any = free_string && !plain_.empty();
  for (int32_t id : hit->second) allowed[static_cast<size_t>(id)] = 1, any = true;
  if (s.accepting() || !any)
    for (int32_t id : eog) allowed[static_cast<size_t>(id)] = 1;
}

}  // namespace larql::server
