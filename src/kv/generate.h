// The generation loop: prefill, then sample / decode until a stop condition, streaming text.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "inference/forward.h"
#include "inference/sampler.h"
#include "kv/engine.h"
#include "tokenizer/tokenizer.h"

namespace larql {

struct GenerateOptions {
  int64_t max_tokens = 128;              ///< tokens to generate at most
  SamplerParams sampler;
  std::vector<std::string> stop_strings;  ///< generation ends before any of these appears
  bool stop_at_eog = true;               ///< stop at the end-of-generation ids (eog_ids())
  std::vector<int32_t> stop_ids;         ///< also stop at these ids (the token is not emitted)
  /// Continue the engine's sequence instead of starting one: first the tokens of its session
  /// history it has not consumed yet, then the prompt, are decoded on top of its state; the
  /// repetition penalty sees the whole history; the sampler's random state is restored from the
  /// session when its configuration matches (see restore_rng).
  bool continue_sequence = false;
  bool restore_rng = true;               ///< false: draw from opt.sampler.seed even when continuing
  /// Set (by another thread or a signal handler) to stop: generation ends before the next token
  /// with stop_reason "cancelled"; during the prompt it throws Error{Cancelled} within one layer.
  const std::atomic<bool>* cancel = nullptr;
  /// Prompt progress, (tokens done, tokens total), at least once per layer of every chunk.
  std::function<void(int64_t, int64_t)> on_prefill_progress;
  int64_t context_limit = 0;             ///< positions the engine may reach (0 = the model's);
                                         ///< counted on the engine's own context (apollo's is
                                         ///< longer than the prompt): ContextOverflow if prefill
                                         ///< passes it, stop_reason "context" when decode would
};

struct GenerateResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> ids;     ///< generated tokens (the stop token excluded)
  std::string text;             ///< generated text (stop string excluded)
  std::string stop_reason;      ///< "eog", "stop_id", "stop_string", "max_tokens", "context", "cancelled"
  std::vector<std::string> notes;  ///< things the caller should tell the user (e.g. a sampler
                                   ///< configuration that differs from the saved one)
  double prefill_seconds = 0;
  double decode_seconds = 0;
  int64_t decoded = 0;          ///< decode_step calls
  /// Tokens the engine ran in prefill: the prompt, or more for an engine that builds its own
  /// context (apollo prefills a retrieved passage plus the prompt).
  int64_t prefill_tokens = 0;
  double prefill_tok_s() const { return prefill_seconds > 0 ? prefill_tokens / prefill_seconds : 0; }
  double decode_tok_s() const { return decode_seconds > 0 ? decoded / decode_seconds : 0; }
};

/// End-of-generation ids of a vocabulary: <eos>, the metadata's end-of-turn id
/// (tokenizer.ggml.eot_token_id) and every token whose text llama.cpp treats as
/// end of generation where present (<end_of_turn>, </s>, <|eot_id|>, <|im_end|>, <|end|>,
/// <|endoftext|>, <|eom_id|>, <EOT>) — for Gemma 3: 1, 106 and 212, as llama.cpp's
/// llama_vocab_is_eog() reports.
std::vector<int32_t> eog_ids(const Tokenizer& tok);

/// Token ids of a prompt: `text` with special-token text parsed, BOS first when `add_bos` —
/// but not a second one when the text already starts with <bos> (a note says so, as llama.cpp
/// warns). `notes` (may be null) receives what the caller should tell the user.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text, bool add_bos,
                                   std::vector<std::string>* notes);

/// The text side of generation, shared by generate() and the server: tokens in, UTF-8 text out,
/// cut before the first stop string even when it spans tokens. Text that could be the start of
/// a stop string is held back until the next token shows it is not (OpenAI's `stop` semantics).
class StopTextStream {
 public:
  /// stops: strings that end generation (empty ones are ignored). skip_special as StreamDecoder.
  StopTextStream(const Tokenizer& tok, std::vector<std::string> stops, bool skip_special = true);
  /// Append a token; returns the text now safe to emit (possibly ""). After a stop string
  /// appears, stopped() is true and the text before it is returned; later pushes return "".
  std::string push(int32_t id);
  /// The text still held back (an incomplete UTF-8 tail becomes U+FFFD), at the end of
  /// generation; "" once stopped.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  StreamDecoder dec_;
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

/// Run a prompt through `engine` and generate. `on_text` receives complete UTF-8 pieces as they
/// are produced (nullptr for none). Afterwards engine.session() holds the whole sequence (every
/// generated token; the last one is not consumed by the engine, so the next generation or a
/// resumed process feeds it first, exactly as an uninterrupted run would) and the sampler's
/// configuration and random state, so save_state() captures everything needed to continue.
/// Errors: whatever the engine raises (EmptyPrompt, ContextOverflow before the prompt fits, ...);
/// Error{Format} for a session history holding ids outside the vocabulary; running out of
/// context while generating just stops with stop_reason "context".
GenerateResult generate(Engine& engine, Forward& forward, const Tokenizer& tok,
                        const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                        const std::function<void(std::string_view)>& on_text);

}  // namespace larql
