// A generation session: one sequence on one engine, and the request logic every front end shares
// (`larql run`, `larql chat`, the coming server): the context a request may use, whether a prompt
// gets BOS (only at the start of a new sequence, never on a resumed one), refusing an output path
// that is an input (before any generation), continuing a saved sequence and saving it again.
// docs/architecture.md "Seams" places it: the lowest layer that knows engines.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "inference/forward.h"
#include "kv/engine.h"
#include "kv/generate.h"
#include "kv/registry.h"
#include "tokenizer/tokenizer.h"

namespace larql {

struct SessionOptions {
  /// Positions the sequence may reach, in [1, the model's context_length]; 0: the model's.
  int64_t context = 0;
  /// A state file written by save_state (kv/state_file.h) to continue; "": a new sequence.
  std::string resume;
  /// After each generate(), the sequence (engine state, tokens, sampler) is saved here; "": not.
  std::string save_state;
  /// How errors name save_state (the CLI passes "--save-state").
  std::string save_state_name = "save_state";
};

class Session {
 public:
  /// Builds the engine of `spec` on `fwd` (it opens the engine's own inputs), checks that
  /// save_state can be written and is no input (util/atomic_file.h check_output_path), then loads
  /// `resume` — all before any generation, so a refused request has written nothing.
  /// Errors: Error{InvalidArgument} for a context outside [1, the model's context_length] (the
  /// message names both); make_engine's; check_output_path's; the engine's load_state errors
  /// (another model's or engine's file, a corrupt one).
  /// The session keeps `fwd` and `tok` alive (it borrows nothing). Error{InvalidArgument} for a
  /// null forward or tokenizer.
  Session(std::shared_ptr<Forward> fwd, std::shared_ptr<const Tokenizer> tok, const EngineSpec& spec, const SessionOptions& opt);

  Engine& engine() { return *engine_; }
  const Engine& engine() const { return *engine_; }
  /// The positions this session may use (SessionOptions::context, or the model's).
  int64_t context() const { return context_; }
  /// True when the next generate() starts a new sequence: nothing run or resumed yet, or after
  /// restart(). A resumed sequence is continued (it has its BOS), even an empty one.
  bool starts_sequence() const { return fresh_; }

  /// Token ids of a prompt for the next generate(): special-token text parsed, BOS first only
  /// when it starts a new sequence and the vocabulary wants one (a continued sequence already
  /// has its BOS). `notes` (may be null) as encode_prompt's.
  std::vector<int32_t> encode(const std::string& text, std::vector<std::string>* notes = nullptr) const;

  /// The checks generate() makes before running anything, for a caller that wants them before it
  /// prints: Error{EmptyPrompt} for no ids on a new sequence; Error{ContextOverflow} when a new
  /// sequence's ids exceed context() (a continued one stops at the context instead).
  void check_prompt(const std::vector<int32_t>& ids) const;

  /// Run `ids` and generate (kv/generate.h): a new sequence is prefilled; otherwise the ids
  /// continue the sequence (its unconsumed history first). opt.context_limit and
  /// opt.continue_sequence are the session's. Afterwards the sequence is saved when
  /// SessionOptions::save_state is set.
  /// Errors: check_prompt's, then generate()'s and save_state's.
  GenerateResult generate(const std::vector<int32_t>& ids, GenerateOptions opt,
                          const std::function<void(std::string_view)>& on_text);

  /// The next generate() starts a new sequence (a chat front end that re-sends the whole
  /// conversation each turn).
  void restart() { fresh_ = true; }

 private:
  std::shared_ptr<Forward> fwd_;
  std::shared_ptr<const Tokenizer> tok_;
  SessionOptions opt_;
  std::unique_ptr<Engine> engine_;
  int64_t context_ = 0;
  bool fresh_ = false;
};

}  // namespace larql
