// Internal: the shared tables behind a Tokenizer. Not part of the public API.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace larql {

namespace bpe {
struct State;
}

struct Tokenizer::Impl {
  VocabData v;
  /// Byte-level BPE tables (model "gpt2", bpe.h); null for SentencePiece.
  std::shared_ptr<const bpe::State> bpe;
  /// piece text -> id; keys view into v.tokens (Impl never moves: it lives behind shared_ptr).
  std::unordered_map<std::string_view, int32_t> by_text;
  /// token_to_piece() result per id, precomputed.
  std::vector<std::string> pieces;
  /// byte value -> fallback token id (`<0xXX>`, else the one-byte piece), -1 if none.
  std::array<int32_t, 256> byte_to_id{};

  // Special-token partition tables (CONTROL | USER_DEFINED | UNKNOWN tokens).
  /// ids in llama.cpp's order: text length descending (ties: ascending id).
  std::vector<int32_t> special_order;
  /// special text -> index into special_order.
  std::unordered_map<std::string_view, uint32_t> special_by_text;
  /// distinct special text lengths, ascending.
  std::vector<size_t> special_lengths;
  /// bytes that start some special text.
  std::array<bool, 256> special_first_byte{};

  /// id or -1.
  int32_t lookup(std::string_view s) const {
    auto it = by_text.find(s);
    return it == by_text.end() ? -1 : it->second;
  }
  void check_id(int32_t id, const char* what) const;
};

/// SPM bigram-merge encoding of one text fragment (spaces already escaped to U+2581), appending
/// ids to `out`. See tokenizer.h for the algorithm; source: llm_tokenizer_spm_session.
void spm_encode_fragment(const Tokenizer::Impl& impl, std::string_view text,
                         std::vector<int32_t>& out);

}  // namespace larql
