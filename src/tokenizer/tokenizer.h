// SentencePiece-style (SPM) tokenizer over a GGUF vocabulary, matching llama.cpp.
//
// Behaviour follows llama.cpp's `llama_vocab::impl::tokenize` for LLAMA_VOCAB_TYPE_SPM
// (src/llama-vocab.cpp, llama-cpp-python 0.3.36):
//   1. special-token partition (`tokenizer_st_partition`): every CONTROL / USER_DEFINED / UNKNOWN
//      token, longest text first, is cut out of the raw text; with parse_special == false the
//      CONTROL and UNKNOWN tokens are skipped, but USER_DEFINED ones (Gemma: whitespace runs,
//      "\n", "\t", HTML tags) are still matched;
//   2. each remaining text fragment: optional leading space (add_space_prefix, only after BOS /
//      a special token), ' ' -> U+2581 "▁", then `llm_tokenizer_spm_session`: split into UTF-8
//      characters, repeatedly merge the adjacent pair whose concatenation is a vocabulary entry
//      with the highest score (ties: leftmost pair), then emit each symbol's id, or its bytes as
//      `<0xXX>` byte-fallback tokens when the symbol is not in the vocabulary.
// Vocabulary fields: ggml/docs/gguf.md "tokenizer.ggml.*" (tokens, scores, token_type, *_token_id,
// add_bos_token, add_eos_token, add_space_prefix).
//
// Byte-level BPE (tokenizer.ggml.model "gpt2": GPT-2, Llama 3, Qwen2) follows llama.cpp's
// LLAMA_VOCAB_TYPE_BPE path: the same special-token partition, then per raw fragment the
// pre-tokenizer regex split chosen by tokenizer.ggml.pre, GPT-2's bytes_to_unicode on each word's
// bytes, and BPE merges by rank (tokenizer.ggml.merges order); details in bpe.h. No space prefix;
// decode maps NORMAL pieces back through unicode_to_bytes and, for pres other than qwen2, applies
// llama.cpp's clean_spaces passes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace larql {

class GgufFile;
class GgufWriter;

/// Token types as stored in `tokenizer.ggml.token_type` (llama.cpp `llama_token_type`).
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

/// A vocabulary as plain data: what a weight source's vocabulary() returns (read by
/// vocab_from_gguf for GGUF), and what tests build by hand. `tokens`, `scores` and `types` are
/// indexed by token id and must have equal length. Special ids are -1 when absent.
struct VocabData {
  std::string model = "llama";      ///< tokenizer.ggml.model: "llama" = SentencePiece, "gpt2" = byte-level BPE
  std::string pre;                  ///< tokenizer.ggml.pre (BPE pre-tokenizer: "llama-bpe", "qwen2", "gpt-2", ...); "" when absent
  std::vector<std::string> tokens;  ///< piece text; SPM pieces use U+2581 for a space
  std::vector<float> scores;        ///< merge priority (higher merges first); log-probabilities
  std::vector<TokenType> types;
  std::vector<std::string> merges;  ///< BPE merges "a b" (tokenizer.ggml.merges); empty for SPM
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;              ///< end of turn (tokenizer.ggml.eot_token_id), -1 when absent
  int32_t pad_id = -1;
  int32_t unk_id = -1;
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = false;
  std::string chat_template;        ///< tokenizer.chat_template (Jinja source), "" when absent
};

/// Read `tokenizer.ggml.*` and `tokenizer.chat_template` from a GGUF file, any tokenizer model.
/// Missing scores default to 0, missing types to Normal; add_bos/add_space_prefix default as
/// llama.cpp's loader does: for "llama" (SPM) both true; for "gpt2" add_space_prefix false and
/// add_bos true only for the Llama 3 pre names (llama3, llama-v3, llama-bpe). tokenizer.ggml.pre
/// and tokenizer.ggml.merges are read when present. Errors: NotFound for a missing
/// tokenizer.ggml.model or tokens array; Format for a scores / token_type array of another
/// length, a special id out of range or a value of the wrong type.
VocabData vocab_from_gguf(const GgufFile& gguf);

/// The inverse: write `vocab` into `w` as the metadata vocab_from_gguf reads (tokenizer.ggml.*
/// and tokenizer.chat_template; every flag written explicitly, special ids only when >= 0,
/// merges and pre only when present), so vocab_from_gguf on the written file gives `vocab` back, field
/// for field. A vindex keeps its vocabulary this way in tokenizer.gguf (docs/vindex-format.md):
/// ~50 ms to load where tokenizer.json's JSON takes over a second. Errors: InvalidArgument if
/// the arrays differ in length.
void vocab_to_gguf(const VocabData& vocab, GgufWriter& w);

/// An immutable tokenizer: SentencePiece ("llama") or byte-level BPE ("gpt2"). Cheap to copy (the
/// tables are shared); thread-safe for concurrent const use.
class Tokenizer {
 public:
  /// Build from plain data. Errors: Unsupported if vocab.model is neither "llama" (SPM) nor
  /// "gpt2" (byte-level BPE), or for "gpt2" a vocab.pre larql does not implement, naming it;
  /// Format for "gpt2" without merges or with a merge that is not two pieces separated by a
  /// space (naming tokenizer.ggml.merges[i]); InvalidArgument if the arrays differ in length,
  /// the vocabulary is empty, a piece is empty or duplicated (naming its id), or a special id is
  /// out of range.
  explicit Tokenizer(VocabData vocab);

  /// Tokenizer(vocab_from_gguf(gguf)): errors of both.
  static Tokenizer from_gguf(const GgufFile& gguf);

  /// Text (UTF-8 bytes; invalid UTF-8 is tolerated, as in llama.cpp) -> token ids.
  /// add_bos: prepend bos_id() when the vocabulary says add_bos() (and append eos when it says
  /// add_eos) — llama.cpp's `add_special`. parse_special: also match CONTROL tokens such as
  /// "<start_of_turn>" in the text (USER_DEFINED tokens are always matched).
  /// Runs in O(n log n) in the text length n (plus one hash probe per position and distinct
  /// special-token length). Errors: Unsupported (SPM only) if a byte needs a fallback token and
  /// the vocabulary has neither `<0xXX>`, the one-byte piece, nor an unk id. BPE: a symbol with
  /// no token emits the one-byte tokens of its bytes that exist, as llama.cpp does (never with
  /// a complete byte alphabet).
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;

  /// Token ids -> text: the concatenation of token_to_piece(id). skip_special drops CONTROL and
  /// UNKNOWN tokens (llama.cpp detokenize with unparse_special = false). With add_space_prefix
  /// the first piece loses one leading space. BPE vocabularies whose pre-tokenizer is not qwen2
  /// then get llama.cpp's clean_spaces passes (" ," -> ","; " 's" -> "'s", ...), as
  /// llama_detokenize does. Errors: InvalidArgument on an id out of range.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  /// The bytes a token stands for (llama.cpp token_to_piece with special = true): NORMAL pieces
  /// with U+2581 -> ' ' (SPM) or through GPT-2's unicode_to_bytes (BPE); BYTE tokens `<0xXX>` ->
  /// that single byte; CONTROL / UNKNOWN /
  /// USER_DEFINED -> their text verbatim; UNUSED / UNDEFINED -> "". Not necessarily valid UTF-8.
  /// Errors: InvalidArgument if id is outside [0, vocab_size()).
  std::string token_to_piece(int32_t id) const;

  /// The stored piece text (U+2581 kept). Errors: InvalidArgument on a bad id.
  const std::string& token_text(int32_t id) const;
  /// Score / type of a token. Errors: InvalidArgument on a bad id.
  float token_score(int32_t id) const;
  TokenType token_type(int32_t id) const;

  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t pad_id() const;
  int32_t unk_id() const;
  int32_t eot_id() const;  ///< from metadata (tokenizer.ggml.eot_token_id); -1 when absent
  bool add_bos() const;
  /// tokenizer.chat_template of the source ("" when absent); see detect_chat_template().
  const std::string& chat_template() const;
  int32_t vocab_size() const;

  /// Exact lookup of a piece text, e.g. "<end_of_turn>" or "▁the".
  std::optional<int32_t> find_token(std::string_view piece) const;
  /// True for CONTROL tokens (<bos>, <eos>, <start_of_turn>, ...). InvalidArgument on a bad id.
  bool is_control(int32_t id) const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

/// Incremental detokenizer for streaming generation. Feeds ids one at a time and returns only
/// complete, valid UTF-8: a multi-byte character split across byte-fallback tokens is held back
/// until its last byte arrives. Invalid sequences are replaced by U+FFFD, one per maximal
/// subpart (Unicode 15 §3.9, "U+FFFD Substitution of Maximal Subparts").
class StreamDecoder {
 public:
  explicit StreamDecoder(Tokenizer tokenizer, bool skip_special = false);
  /// Append one token; returns the newly completed text (possibly ""). Errors: InvalidArgument
  /// on an id out of range.
  std::string push(int32_t id);
  /// Emit whatever is held back (an incomplete tail becomes U+FFFD) and reset.
  std::string flush();
  /// Bytes currently held back (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  Tokenizer tok_;
  bool skip_special_;
  bool first_ = true;
  std::string pending_;
};

/// Repair UTF-8: invalid sequences -> U+FFFD (maximal subparts). If `hold_incomplete_tail`, a
/// trailing valid-but-incomplete sequence is not emitted; its length is stored in *held.
std::string utf8_sanitize(std::string_view bytes, bool hold_incomplete_tail, size_t* held);

/// One chat turn. role: "system" (first message only), "user", "assistant" or "model".
struct ChatMessage {
  std::string role;
  std::string content;
};

/// Chat formats larql can apply, named as llama.cpp names them (src/llama-chat.cpp).
enum class ChatFormat { Gemma, ChatML, Llama3, Llama2, Phi3, Mistral };

/// The format of a model's Jinja chat template (tokenizer.chat_template), detected as
/// llama.cpp's llm_chat_detect_template does: `<|im_start|>` -> ChatML; `[INST]` -> Mistral for
/// Mistral's official templates (`[SYSTEM_PROMPT]`, `' [INST] ' + system_message`,
/// `[AVAILABLE_TOOLS]`), else Llama2; `<start_of_turn>` -> Gemma; `<|start_header_id|>` and
/// `<|end_header_id|>` -> Llama3; `<|assistant|>` and `<|end|>` -> Phi3 (in that order). A bare
/// name ("gemma", "chatml", "llama3", "llama2", "phi3", "mistral-v1", "mistral-v3",
/// "mistral-v3-tekken", "mistral-v7") is accepted too. nullopt for an empty or unrecognised
/// template (llama.cpp's variants that larql does not apply — Phi-4, ... — are unrecognised here).
std::optional<ChatFormat> detect_chat_template(std::string_view jinja);
const char* chat_format_name(ChatFormat f);

/// A model's chat format: detect_chat_template(tok.chat_template()); when the vocabulary has no
/// template (tokenizer.chat_template absent, as in some GGUF conversions of Gemma 3), the first
/// turn-marker token the vocabulary holds: `<start_of_turn>` -> Gemma, `<|im_start|>` -> ChatML,
/// `<|start_header_id|>` -> Llama3, `<|assistant|>` -> Phi3. nullopt when neither names a format.
std::optional<ChatFormat> chat_format_of(const Tokenizer& tok);

/// Apply a chat format to a conversation (without the BOS: encode(add_bos = true) adds it).
/// Gemma: apply_gemma_chat_template. The others as llama.cpp's llm_chat_apply_template:
///   ChatML: `<|im_start|>{role}\n{content}<|im_end|>\n` per message; generation prompt
///           `<|im_start|>assistant\n`;
///   Phi3: `<|{role}|>\n{content}<|end|>\n` per message; generation prompt `<|assistant|>\n`;
///   Mistral: llama.cpp's MISTRAL_V7 (`[SYSTEM_PROMPT] {s}[/SYSTEM_PROMPT][INST] {u}[/INST] {a}</s>`),
///           V1 (` [INST] {s}\n\n{u} [/INST] {a}</s>`), V3 (`[INST] {u}[/INST] {a | trim}</s>`) and
///           V3-Tekken (`[INST]{u}[/INST]{a}</s>`), the variant read from `jinja` as llama.cpp does;
///   Llama3: `<|start_header_id|>{role}<|end_header_id|>\n\n{content | trim}<|eot_id|>`;
///           generation prompt `<|start_header_id|>assistant<|end_header_id|>\n\n`;
///   Llama2: `[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST]{assistant}</s>[INST] ...`;
///           as llama.cpp's variants: contents trimmed only when `jinja` mentions
///           `content.strip()`; `<s>[INST] ` after an answer when it mentions
///           `bos_token + '[INST]'` (and does not strip); the `<<SYS>>` block when either of
///           those or `<<SYS>>` appears, otherwise the system text and "\n" open the first turn.
/// Roles: "model" is written as "assistant" (llama.cpp writes roles verbatim; the templates
/// themselves name the answer "assistant").
/// Errors: InvalidArgument from the Gemma template's checks; for the others a role outside
/// system / user / assistant ("model" is taken as assistant).
std::string apply_chat_template(ChatFormat f, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                std::string_view jinja = {});

/// Gemma's chat template (tokenizer_config.json of google/gemma-3-*-it), without the BOS (added by
/// encode(add_bos = true)):
///   `<start_of_turn>{role}\n{content | trim}<end_of_turn>\n` per turn, "assistant" -> "model";
///   a leading "system" message is not a turn: its content + "\n\n" is prepended to the first
///   turn's content; add_generation_prompt appends `<start_of_turn>model\n`.
/// Errors: InvalidArgument if a system message is not first, a role is unknown, or turns do not
/// alternate user / model starting with user (the template's raise_exception).
std::string apply_gemma_chat_template(const std::vector<ChatMessage>& messages,
                                      bool add_generation_prompt);

}  // namespace larql
