// Constrained decoding for `response_format: {"type": "json_object"}` (docs/server.md "JSON
// output"): a byte-level pushdown automaton for one JSON object (RFC 8259 grammar), and a mask
// over the vocabulary of the tokens whose bytes it accepts from its current state.
//
// Cost per step: inside a string (the common case) every "plain" token — complete UTF-8 with no
// quote, backslash or control byte — is allowed from a precomputed list and only the few others
// are simulated; elsewhere a depth-first walk of a byte trie of the vocabulary, pruned at the first
// byte the automaton refuses, visits only the tokens that can follow.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "server/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace larql::server {

/// The automaton's state: small and copyable (the walk copies it per trie node).
struct JsonState {
  static constexpr int kMaxDepth = 32;      ///< nesting deeper than this is refused
  static constexpr int kMaxWhitespace = 16;  ///< whitespace bytes in a row at most
  enum class Mode : uint8_t {
    Top,          ///< before the top-level object: '{' (no whitespace)
    Value,        ///< a value must come
    ValueOrEnd,   ///< right after '[': a value or ']'
    KeyOrEnd,     ///< right after '{': a key or '}'
    Key,          ///< after ',' in an object: a key
    Colon,        ///< after a key
    CommaOrEnd,   ///< after a value inside a container
    Str,          ///< inside a string
    StrEscape,    ///< after a backslash
    StrHex,       ///< inside \uXXXX
    Number,
    Literal,      ///< true / false / null
    Done,         ///< the top-level object is closed: only the end of generation may follow
  };
  Mode mode = Mode::Top;
  uint8_t depth = 0;
  std::array<char, kMaxDepth> stack{};  ///< '{' or '[' per level
  bool key = false;        ///< Str: the string is an object key
  uint8_t hex_left = 0;    ///< StrHex: hex digits still to come
  uint8_t utf8_left = 0;   ///< Str: continuation bytes still to come
  uint8_t utf8_lo = 0x80, utf8_hi = 0xBF;  ///< the allowed range of the next continuation byte
  uint8_t num = 0;         ///< Number: sub-state (json_constraint.cc)
  uint8_t num_len = 0;     ///< Number: bytes so far (at most 40)
  uint8_t lit = 0, lit_pos = 0;  ///< Literal: which word, how far
  uint8_t ws = 0;          ///< whitespace bytes in a row

  /// Feed one byte; false (state unspecified) when the grammar refuses it.
  bool feed(uint8_t c);
  bool done() const { return mode == Mode::Done; }
};

/// The vocabulary prepared for masking, built once per tokenizer (~0.5 s, ~20 MB for 262k
/// tokens).
class JsonVocab {
 public:
  explicit JsonVocab(const Tokenizer& tok);
  /// allowed[id] = 1 for every token the automaton accepts next from `s` (all its bytes), and for
  /// the end-of-generation ids `eog` exactly when s.done(); control tokens never. allowed is
  /// resized to the vocabulary. When nothing else is allowed (a dead end), the end-of-generation
  /// ids are.
  void mask(const JsonState& s, const std::vector<int32_t>& eog, std::vector<uint8_t>& allowed) const;
  /// Advance `s` over the bytes of token `id`; false when refused.
  bool advance(JsonState& s, int32_t id) const;
  /// The same for a schema's automaton (json_schema.h): allowed[id] = 1 for every token whose
  /// bytes it accepts next; the end-of-generation ids when s.accepting() (or at a dead end).
  /// Results per state are cached in the state's grammar (SchemaGrammar::cache), so a step inside
  /// a long string costs the plain-token list only.
  void mask(const SchemaState& s, const std::vector<int32_t>& eog, std::vector<uint8_t>& allowed) const;
  bool advance(SchemaState& s, int32_t id) const;
  int64_t vocab() const { return static_cast<int64_t>(pieces_.size()); }

 private:
  /// Calls allow(id) for every token whose bytes `s` accepts from the trie's root.
  template <class S, class F>
  void walk(const S& s, F&& allow) const;
  struct Node {
    uint32_t first = 0;   ///< index of the first child edge in edges_
    uint32_t count = 0;   ///< child edges
    int32_t token = -1;   ///< a token whose bytes end here (others with the same bytes: same_)
  };
  struct Edge {
    uint8_t byte;
    uint32_t node;
  };
  std::vector<std::string> pieces_;   ///< bytes per token ("" for control tokens)
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::vector<std::vector<int32_t>> same_;  ///< per node: further tokens with the same bytes
  std::vector<int32_t> plain_;    ///< tokens that never change a string's state
  std::vector<uint8_t> plain_mask_;  ///< [vocab]: 1 for the plain tokens
  std::vector<int32_t> special_;  ///< the other non-control tokens
  std::vector<int32_t> special_string_;  ///< specials without '"' that a string accepts (escapes, partial UTF-8)
  std::vector<int32_t> special_quote_;   ///< specials with a '"'
};

}  // namespace larql::server
