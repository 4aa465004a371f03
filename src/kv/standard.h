// The `standard` engine: K/V tensors per layer; the reference every other engine answers to.
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <vector>

#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "kv/engine.h"

namespace larql {

/// Canonical state: post-RoPE K and V rows (f32) per layer. Sliding layers keep (and attend over)
/// their model window. `window` > 0 (standard:window=N) is an evicting engine: every other layer
/// attends to the newest N positions, its own included — the same mask in prefill as in decode,
/// so one prefill gives exactly the logits of token-by-token decoding — plus, with `sink`, position
/// 0 (the attention sink, <bos>), which is kept on those layers forever. Positions stay absolute;
/// evicted rows are gone. N smaller than the model's sliding window is refused
/// (check_engine_window): it would cut the sliding layers' own span.
///
/// State file: per layer the live rows (write_layer_kv); with a window and the sink, then per
/// cut layer u64 sink rows + their K, V.
class StateWriter;
class StateReader;

/// The sink rows of a KvCache in a state file: per layer that keeps a sink (LayerKv::
/// sink_capacity() > 0), u64 rows then K, V [rows, kv_dim] f32. read_sink_rows expects
/// min(capacity, n_past) rows per such layer; Error{Format} naming the file and layer otherwise.
void write_sink_rows(StateWriter& w, const KvCache& cache);
void read_sink_rows(StateReader& r, KvCache& cache, int64_t n_past);

class StandardEngine : public Engine {
 public:
  /// Errors: Error{InvalidArgument} for 0 < window < the model's sliding window.
  StandardEngine(std::shared_ptr<Forward> forward, int64_t window, bool sink = true);
  std::vector<float> prefill(const std::vector<int32_t>& tokens) override;
  std::vector<float> decode_step(int32_t token) override;
  /// Append several tokens to a started sequence in one forward pass (a prompt read in chunks:
  /// prefill(first chunk), then extend(each next chunk)); the hidden state of the last one, and
  /// a cache bit-identical to one prefill of all of them. Errors: InvariantViolation before
  /// prefill, EmptyPrompt for no tokens, ContextOverflow.
  std::vector<float> extend(const std::vector<int32_t>& tokens);
  EngineInfo info() const override;
  EngineMemory memory() const override;
  int64_t n_past() const override { return cache_.n_past(); }
  void save_state(const std::string& path) const override;
  void load_state(const std::string& path) override;

  /// One standard engine's part in decode_batch.
  struct BatchStep {
    StandardEngine* engine = nullptr;
    int32_t token = 0;
    const std::atomic<bool>* cancel = nullptr;  ///< optional: drop this sequence from the step
    std::vector<float> hidden;                  ///< out: [hidden], as decode_step returns it
    bool cancelled = false;                     ///< out: dropped; the engine is as before the step
  };
  /// One decode step for several standard engines in one pass over the weights
  /// (Forward::decode_batch on `runner`, whose scratch, FFNs and observer it uses). Each hidden
  /// state is bit-identical to engine->decode_step(token). Which engines batch: `standard` (any
  /// window, sink) only; the other engines decode one sequence at a time.
  /// Errors (before any work): Error{InvariantViolation} for an engine not started,
  /// Error{InvalidArgument} for a null or repeated engine or one on another model,
  /// Error{ContextOverflow} for an engine whose context is full.
  static void decode_batch(Forward& runner, std::span<BatchStep> steps);

 private:
  std::vector<float> run(const int32_t* tokens, int64_t n);
  std::shared_ptr<Forward> fwd_;
  int64_t window_;
  bool sink_;
  KvCache cache_;
  bool started_ = false;
};

}  // namespace larql
