// Apollo's unit of routing: normalised words. A token id says how a word was spelt and where it
// stood ("Zanzibar" at the start of a line is `Z` `anz` `ibar`, after a space `▁Zanzibar`), so
// the router matches words recovered from the decoded text instead. Specification:
// docs/engines.md ("apollo").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace larql {

class Tokenizer;

/// One word of a token sequence: its normalised text and the tokens it was read from.
struct TokenWord {
  std::string text;     ///< normalised (normalize_word)
  int64_t first = 0;    ///< index of the token holding the word's first byte
  int64_t last = 0;     ///< index of the token holding its last byte (>= first)
};

/// Unicode NFKC_Casefold (Unicode 15, UAX #15 and DerivedNormalizationProps.txt) of one word,
/// through ICU's Normalizer2; ASCII words are lower-cased directly (the same result). "Zanzibar",
/// "ZANZIBAR" and "ｚａｎｚｉｂａｒ" all give "zanzibar". Input: UTF-8. Errors: Error{BackendFailure} if ICU fails.
std::string normalize_word(std::string_view word);

/// The words of a UTF-8 text: maximal runs of letters and decimal digits (ICU u_isalnum: general
/// categories L* and Nd) together with the combining marks (Mn, Mc) that follow them, each
/// normalised. Everything else — spaces, punctuation, symbols, apostrophes, hyphens, ill-formed
/// bytes — separates words ("net-mender's" -> "net", "mender", "s").
std::vector<std::string> words_of_text(std::string_view text);

/// The words of a token sequence: the ids' pieces (Tokenizer::token_to_piece) are concatenated —
/// control, unknown and unused tokens contribute nothing — and split as words_of_text, each word
/// keeping the first and last token index it was read from. The same text gives the same words
/// however it was tokenised. Errors: Error{InvalidArgument} on an id outside the vocabulary or a
/// decoded text over 2 GiB.
std::vector<TokenWord> words_of_tokens(const Tokenizer& tok, const std::vector<int32_t>& ids);

}  // namespace larql
