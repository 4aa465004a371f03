// Internal: byte-level BPE (GGUF tokenizer.ggml.model "gpt2"), as llama.cpp's llm_tokenizer_bpe
// (src/llama-vocab.cpp, llama-cpp-python 0.3.36). Not part of the public API.
//
// A raw text fragment (what the special-token partition leaves) is
//   1. decoded to code points as llama.cpp's unicode_cpts_from_utf8 does: each byte that does not
//      start a well-formed sequence becomes U+FFFD (so invalid bytes reach the model as the
//      three bytes EF BF BD), without checking for overlong forms or surrogates;
//   2. split into words by the pre-tokenizer's regex list (icu::RegexPattern, compiled once per
//      Tokenizer; each regex splits every piece the previous one left, unmatched stretches are
//      words too — llama.cpp's unicode_regex_split);
//   3. each word's bytes mapped through GPT-2's bytes_to_unicode;
//   4. merged: repeatedly the adjacent pair with the lowest rank (its index in
//      tokenizer.ggml.merges; ties: leftmost), O(n log n) per word with a priority queue;
//      with ignore_merges (Llama 3) a word that is itself a token is emitted whole;
//   5. each final symbol's id; a symbol that is no token emits, per byte, the token whose text
//      is that single byte when there is one, and nothing otherwise (llama.cpp's behaviour).
//
// The regexes are llama.cpp's, written for ICU: `\s` is spelled \p{White_Space} (llama.cpp's
// whitespace set is exactly that property; ICU 72's \s is the same set, but the patterns do not
// rely on it), and \p{L} also holds U+2EBF0..U+2EE5D (CJK Extension I, Unicode 15.1: letters in
// llama.cpp's tables, unassigned in ICU 72 = Unicode 15.0). With that, ICU's \p{L}, \p{N}, \p{P}
// and White_Space agree with llama.cpp's unicode-data.cpp on every code point (compared code
// point by code point against ICU 72.1; a newer ICU could know letters llama.cpp's tables do not).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace larql::bpe {

/// llama.cpp's LLAMA_VOCAB_PRE_TYPE_* that larql implements.
enum class PreType { Default, Gpt2, Llama3, Qwen2 };

/// What a tokenizer.ggml.pre name selects (llama.cpp `llama_vocab::impl::load`).
struct PreInfo {
  PreType type;
  bool ignore_merges;  ///< a word that is a token is not merged (Llama 3)
  bool add_bos;        ///< llama.cpp's default add_bos for this pre (before add_bos_token)
  bool clean_spaces;   ///< detokenize's clean_up_tokenization_spaces
};

/// The PreInfo of a pre name: "" and "default" -> Default (llama.cpp's fallback regexes),
/// "gpt-2"/"phi-2" -> Gpt2, "llama3"/"llama-v3"/"llama-bpe" -> Llama3, "qwen2"/"deepseek-r1-qwen"
/// -> Qwen2; nullopt for any other name.
std::optional<PreInfo> find_pre_info(std::string_view pre);
/// find_pre_info or Error{Unsupported} naming the pre.
PreInfo pre_info(std::string_view pre);

struct State;  // compiled regexes and the merge ranks; defined in bpe.cc

/// Build the BPE tables of a vocabulary (`v` must outlive the result: ranks view v.merges).
/// Errors: Unsupported for an unknown pre name; Format for a missing/empty merge list or a merge
/// that is not two pieces separated by a space, naming `tokenizer.ggml.merges[i]`.
std::shared_ptr<const State> build(const VocabData& v);

const PreInfo& info(const State& s);

/// Encode one raw text fragment (steps 1-5 above), appending ids.
void encode_fragment(const State& s, const Tokenizer::Impl& impl, std::string_view text,
                     std::vector<int32_t>& out);

/// The words the pre-tokenizer splits `text` into, before the byte mapping (for tests).
std::vector<std::string> split_words(const State& s, std::string_view text);

/// A NORMAL token's bytes: each code point of its text through GPT-2's unicode_to_bytes; a code
/// point outside that map becomes "[UNK_BYTE_0x<hex>" + text + "]" (llama_decode_text).
std::string decode_token_text(std::string_view text);

/// llama.cpp detokenize's clean_spaces passes over `text` (" ?", " !", " .", " ," lose the
/// space; " ' " loses both; " 's", " 'm", " 're", " 've" lose the space).
void clean_spaces(std::string& text);

}  // namespace larql::bpe
