// The generation loop: prefill, then sample / decode until a stop condition, streaming text.
#pragma once

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
  bool stop_at_eog = true;               ///< stop at <eos> / <end_of_turn>
  bool continue_sequence = false;        ///< decode the prompt on top of the engine's state
  int64_t context_limit = 0;             ///< positions the engine may reach (0 = the model's);
                                         ///< counted on the engine's own context (apollo's is
                                         ///< longer than the prompt): ContextOverflow if prefill
                                         ///< passes it, stop_reason "context" when decode would
  bool consume_last = false;             ///< also feed the last generated token to the engine
                                         ///< (so a saved state holds the whole text)
};

struct GenerateResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> ids;     ///< generated tokens (the stop token excluded)
  std::string text;             ///< generated text (stop string excluded)
  std::string stop_reason;      ///< "eog", "stop_string", "max_tokens", "context"
  double prefill_seconds = 0;
  double decode_seconds = 0;
  int64_t decoded = 0;          ///< decode_step calls
  /// Tokens the engine ran in prefill: the prompt, or more for an engine that builds its own
  /// context (apollo prefills a retrieved passage plus the prompt).
  int64_t prefill_tokens = 0;
  double prefill_tok_s() const { return prefill_seconds > 0 ? prefill_tokens / prefill_seconds : 0; }
  double decode_tok_s() const { return decode_seconds > 0 ? decoded / decode_seconds : 0; }
};

/// End-of-generation ids of a vocabulary: <eos> and, where present, <end_of_turn> / <eot>.
std::vector<int32_t> eog_ids(const Tokenizer& tok);

/// Run a prompt through `engine` and generate. `on_text` receives complete UTF-8 pieces as they
/// are produced (nullptr for none). Errors: whatever the engine raises (EmptyPrompt,
/// ContextOverflow before the prompt fits, ...); running out of context while generating just
/// stops with stop_reason "context".
GenerateResult generate(Engine& engine, Forward& forward, const Tokenizer& tok,
                        const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                        const std::function<void(std::string_view)>& on_text);

}  // namespace larql
