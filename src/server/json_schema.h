// Constrained decoding for `response_format: {"type": "json_schema", ...}` (docs/server.md "JSON
// output"): a JSON Schema (the subset OpenAI's structured outputs accept) compiles to a grammar
// over bytes, run as a pushdown automaton with a set of stacks (the way llama.cpp's GBNF grammars
// run, written anew here); JsonVocab (json_constraint.h) masks the vocabulary with it.
//
// The grammar: rules of alternatives, each alternative a sequence of elements — a byte class (256
// bits) or a reference to a rule — ending in an End element. A stack holds positions in that flat
// element array, the top being the next element to match; after each byte every stack is expanded
// until its top is a byte class (a rule reference pushes one stack per alternative; an End pops).
// A reference that is the last element of its alternative replaces its own position (a tail call),
// so the right-recursive loops (string bodies, arrays) run in constant depth. The empty stack means
// "a whole value was read".
//
// Output shape: compact JSON (no whitespace outside strings), object properties in the schema's
// order, required ones always, optional ones allowed or skipped; numbers at most 15 integer digits,
// 15 fraction digits and 3 exponent digits; strings unbounded (max_tokens bounds them).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace larql::server {

/// A compiled schema (immutable once built, shared by a request's choices).
class SchemaGrammar {
 public:
  enum class Kind : uint8_t { End, Bytes, Rule };
  struct Elem {
    Kind kind;
    uint32_t arg;  ///< Bytes: class index; Rule: rule index
  };

  /// Compile `schema_json` (the text of a JSON Schema). Throws larql::Error (InvalidArgument) for
  /// text that is not JSON or a schema that is malformed, and (Unsupported) for a keyword outside
  /// the subset, naming the keyword and its JSON pointer, e.g. "'pattern' at
  /// /properties/name is not supported". Supported: type (a name or a list of them: object,
  /// array, string, number, integer, boolean, null), properties, required, additionalProperties
  /// (false or absent), items, minItems, maxItems (<= 256), enum, const, anyOf, $ref to
  /// #/$defs/NAME or #/definitions/NAME (a recursive reference is refused); title, description,
  /// $comment, examples, default, $schema, $id are ignored. Nesting (properties, items, anyOf,
  /// $ref) at most 32 deep.
  static std::shared_ptr<SchemaGrammar> compile(const std::string& schema_json);

  const std::vector<Elem>& elems() const { return elems_; }
  const std::vector<uint32_t>& alts(uint32_t rule) const { return rules_[rule]; }
  bool in_class(uint32_t cls, uint8_t c) const { return (classes_[cls][c >> 6] >> (c & 63)) & 1; }
  uint32_t root() const { return root_; }
  /// The position of a free string's plain-character class (0x20-0x7F but '"' and '\\'): a stack
  /// waiting there comes with the stacks of every other character alternative (expansion adds them
  /// together), so the state accepts every "plain" token (complete UTF-8, no quote, backslash or
  /// control byte). -1 when the schema has no free string.
  int64_t plain_char_pos() const { return plain_pos_; }
  /// True when position `pos` starts one alternative of a free string's character or is a free
  /// string's closing quote.
  bool free_string_pos(uint32_t pos) const { return pos < free_.size() && free_[pos]; }

  /// Mask cache (JsonVocab's): allowed non-plain tokens per state, used by the scheduler thread only.
  mutable std::map<std::string, std::vector<int32_t>> cache;

 private:
  friend class SchemaCompiler;
  std::vector<Elem> elems_;
  std::vector<std::vector<uint32_t>> rules_;  ///< per rule: the element index where each alternative starts
  std::vector<std::array<uint64_t, 4>> classes_;
  int64_t plain_pos_ = -1;
  std::vector<uint8_t> free_;
  uint32_t root_ = 0;
};

/// The automaton's state: the set of stacks, flat ([depth, positions...] per stack), held inline so
/// that copies (the trie walk copies it per node) never allocate.
class SchemaState {
 public:
  static constexpr int kCapacity = 1024;  ///< uint16 entries over all stacks
  static constexpr int kMaxStacks = 128;  ///< a byte that would need more is refused
  SchemaState() = default;
  /// Copies move only the stacks in use.
  SchemaState(const SchemaState& o) { *this = o; }
  SchemaState& operator=(const SchemaState& o) {
    g_ = o.g_;
    len_ = o.len_;
    n_stacks_ = o.n_stacks_;
    std::copy(o.buf_.begin(), o.buf_.begin() + len_, buf_.begin());
    return *this;
  }
  /// The start state of `g` (before the first byte).
  explicit SchemaState(const SchemaGrammar& g);
  /// Feed one byte; false (state unchanged) when no stack accepts it, or when the result would
  /// exceed the capacity (a pathological schema; documented as refused output).
  bool feed(uint8_t c);
  /// A whole value has been read (end of generation may come now).
  bool accepting() const;
  /// No byte can follow (accepting and nothing else).
  bool done() const { return n_stacks_ == 1 && accepting(); }
  /// Some stack waits on a free string's character: every plain token is accepted (see
  /// SchemaGrammar::plain_char_pos).
  bool accepts_plain() const;
  /// Every stack is in a free string, between characters: then a token without a quote is accepted
  /// exactly when JSON's string grammar takes it (JsonState in a string), whatever follows the string.
  bool in_free_string() const;
  /// The state's bytes, as a cache key.
  std::string key() const;
  const SchemaGrammar* grammar() const { return g_; }

 private:
  bool expand(uint16_t* stack, int depth, SchemaState& out) const;
  bool add(const uint16_t* stack, int depth);
  const SchemaGrammar* g_ = nullptr;
  uint16_t len_ = 0, n_stacks_ = 0;
  std::array<uint16_t, kCapacity> buf_;  ///< entries past len_ are never read
};

}  // namespace larql::server
