// The KV engine interface: a policy for what continuation state survives between tokens.
// Specification: docs/engines.md "Interface".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace larql {

struct ModelConfig;

/// Every engine's context guard: Error{ContextOverflow} when a sequence of `tokens` tokens
/// would not fit the model's context length.
void check_context(int64_t tokens, const ModelConfig& config);

/// The largest sliding window among the model's layers (0 when none slides).
int64_t max_sliding_window(const ModelConfig& config);

/// Every evicting engine's window guard: an engine window (`window` > 0) smaller than the model's
/// sliding window would cut the sliding layers' own span — the model never saw such a mask, and
/// it collapses (issue 8) — so it is Error{InvalidArgument} naming `engine`, the window and the
/// sliding window. window 0 (no eviction) always passes.
void check_engine_window(const std::string& engine, int64_t window, const ModelConfig& config);

/// What generation needs beyond an engine's own tensors to continue exactly as if it had never
/// stopped. kv/generate.h keeps it current; state files (kv/state_file.h) carry it.
struct SessionState {
  /// Every token of the sequence in order: prompts and generated tokens, including the ones the
  /// engine has not consumed yet (positions >= n_past(): fed first when the sequence continues).
  std::vector<int32_t> history;
  std::string sampler;  ///< the sampler configuration (SamplerParams::config_string()), "" if none
  std::string rng;      ///< the sampler's random-number state (Sampler::rng_state()), "" if none
};

struct EngineInfo {
  std::string name;     ///< canonical name, e.g. "standard"
  std::string backend;  ///< "cpu"
  std::string config;   ///< e.g. "window=512" ("" for defaults)
  std::string note{};   ///< what a front end should tell the user about this engine ("" = nothing)
};

/// Engine-held state, counted by logical rows (not buffer capacity).
struct EngineMemory {
  size_t hot_bytes = 0;
  size_t cold_bytes = 0;
  int64_t window_tokens = 0;  ///< rows kept hot per layer at most (0 = unbounded)
};

/// All engines: prefill a prompt, then decode one token at a time. Both return the last
/// position's residual before the final norm, [hidden] f32; the caller applies final norm and
/// lm_head (Forward::logits). Errors are larql::Error with the engine kinds: EmptyPrompt,
/// BackendUnavailable, RetrievalMiss, InvariantViolation (decode before prefill), BackendFailure;
/// InvalidArgument for a state from another model or engine (the caller's mistake);
/// ContextOverflow when the context is full.
class Engine {
 public:
  virtual ~Engine() = default;
  /// Start a new sequence with `tokens` (discarding any previous state).
  virtual std::vector<float> prefill(const std::vector<int32_t>& tokens) = 0;
  /// Append one token to the sequence.
  virtual std::vector<float> decode_step(int32_t token) = 0;
  virtual EngineInfo info() const = 0;
  virtual EngineMemory memory() const = 0;
  /// Tokens consumed so far (the next position).
  virtual int64_t n_past() const = 0;
  /// Canonical state as a file: versioned header with the model fingerprint, then tensors.
  /// Errors: Error{Io}.
  virtual void save_state(const std::string& path) const = 0;
  /// Replace the state from a file. Errors: Error{Io}, Error{Format} (corrupt), and
  /// Error{InvalidArgument} for a file from another model, engine or configuration.
  virtual void load_state(const std::string& path) = 0;

  /// The last position's logits computed where the engine runs (a GPU engine keeps its residual
  /// on the device): true with out [vocab] filled; false (the default) = the caller applies
  /// Forward::logits to the residual prefill/decode_step returned.
  virtual bool device_logits(float* out) {
    (void)out;
    return false;
  }
  /// The last position's greedy token (lowest index of the largest logit) computed where the
  /// engine runs, without copying the logits; -1 (the default) = not available.
  virtual int32_t device_argmax() { return -1; }

  /// The generation session of the current sequence; save_state() writes it, load_state()
  /// restores it. Engines never interpret it.
  SessionState& session() { return session_; }
  const SessionState& session() const { return session_; }

 protected:
  SessionState session_;
};

}  // namespace larql
