// The layer primitives engines compose, and the config-driven forward pass built from them.
// Gemma 3 layer (Gemma Team 2025, "Gemma 3 Technical Report"; HF modeling_gemma3.py):
//   h = x + post_attn_norm(Wo · attn(rope(qk_norm(Wq,Wk,Wv · attn_norm(x)))))
//   out = h + post_ffn_norm(Wdown · (gelu_tanh(Wgate · ffn_norm(h)) ⊙ Wup · ffn_norm(h)))
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "compute/ops.h"
#include "inference/kv_cache.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace larql {

/// Contiguous K/V rows for positions [first_pos, first_pos + rows), each kv_dim floats.
struct KvSpan {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t first_pos = 0;
  int64_t rows = 0;
};

inline KvSpan span_of(const LayerKv& kv) {
  return kv.rows() == 0 ? KvSpan{} : KvSpan{kv.k_at(kv.first_pos()), kv.v_at(kv.first_pos()), kv.first_pos(), kv.rows()};
}

/// What an engine adds to the model's own mask in Forward::attend (the model's mask — causal,
/// and on sliding layers the last `window` positions — always applies). The default adds nothing.
///
/// For a query at position p, key position j is visible iff j <= p, the model's mask allows it,
/// and (window == 0 or p - j < window or j < sink_end), where sink_end = sink.first_pos + sink.rows.
/// Keys are visited in ascending position; a key's row is read from
///   * `sink` when j < sink_end (so the sink reads the same numbers whether or not `kv` still
///     holds it: prefill and decode agree);
///   * `alt` when j lies in alt's rows and j <= p - alt_recent (an engine that attends to old
///     positions through encoded K/V — markov-rs-codec's cold tier — passes their round-tripped
///     rows here, so a prefill query sees exactly what a decode step at p would);
///   * `kv` otherwise.
/// Every engine that routes its prefill and its decode steps through this function with the same
/// mask gets prefill == decode bit for bit (the arithmetic per query does not depend on the batch).
struct AttendMask {
  int64_t window = 0;      ///< engine window: the newest `window` positions, the query's own included; 0 = none
  KvSpan sink;             ///< rows always visible to the engine window (the attention sink, <bos>)
  KvSpan alt;              ///< replacement rows for positions at least alt_recent before the query
  int64_t alt_recent = 0;  ///< positions p - alt_recent + 1 .. p are read from kv, older ones from alt
};

/// The mask a LayerKv implies: its engine window (LayerKv::span()) and its sink rows.
inline AttendMask mask_of(const LayerKv& kv) {
  AttendMask m;
  m.window = kv.span();
  if (kv.sink_rows() > 0) m.sink = KvSpan{kv.sink_k(), kv.sink_v(), 0, kv.sink_rows()};
  return m;
}

/// Binds a model to a thread pool and scratch buffers. Not thread-safe: one per sequence.
class Forward {
 public:
  /// n_threads <= 0: all hardware threads.
  Forward(std::shared_ptr<const Model> model, int n_threads);

  const Model& model() const { return *model_; }
  const ModelConfig& config() const { return model_->config(); }
  std::shared_ptr<const Model> model_ptr() const { return model_; }
  ThreadPool& pool() { return pool_; }

  /// x [n, hidden] = token_embd[tokens] * embed_scale.
  /// Errors: Error{InvalidArgument} for a token id outside [0, vocab).
  void embed(const int32_t* tokens, int64_t n, float* x);

  /// Projections for n residual rows x [n, hidden] at positions pos0..pos0+n-1:
  /// q [n, q_dim] and k [n, kv_dim] q/k-normed and RoPE'd with the layer's base and scaling,
  /// v [n, kv_dim]. This is also "K/V from a residual" for residual-state engines.
  void qkv(int64_t layer, const float* x, int64_t n, int64_t pos0, float* q, float* k, float* v);

  /// K/V only (no Q) for n residual rows x [n, hidden] at positions pos0..pos0+n-1: the same
  /// arithmetic as qkv()'s k and v (attn_norm, projection, k-norm, RoPE with the layer's base and
  /// scaling), bit-identical to it row for row. k, v: [n, kv_dim]. Used by residual-state
  /// engines (markov-rs) to re-derive K/V for stored residuals.
  void kv_from_residual(int64_t layer, const float* x, int64_t n, int64_t pos0, float* k, float* v);

  /// Causal attention of n queries q [n, q_dim] at positions pos0.. over kv (which must cover
  /// each query's own position). Sliding layers see only their last `window` positions; `mask`
  /// adds an engine window, sink rows and replacement rows (AttendMask). Rows older than kv's
  /// first row (and not in the sink) are not seen. out [n, q_dim].
  /// Errors: Error{InvariantViolation} when kv does not reach the last query's position.
  void attend(int64_t layer, const float* q, int64_t n, int64_t pos0, const KvSpan& kv, float* out,
              const AttendMask& mask = {});

  /// The rest of a layer: x += post_attn_norm(attn · Wo^T); then the FFN block, in place on
  /// x [n, hidden]. attn is [n, q_dim].
  void finish_layer(int64_t layer, const float* attn, int64_t n, float* x);

  /// One whole layer over n rows, appending to and attending over `kv` with mask_of(kv), then
  /// evicting what kv no longer keeps.
  void layer(int64_t layer, float* x, int64_t n, int64_t pos0, LayerKv& kv);

  /// Run n tokens at positions cache.n_past().. through every layer. x [n, hidden] receives
  /// the final residual (before the final norm). Long inputs are processed in chunks.
  void forward(const int32_t* tokens, int64_t n, KvCache& cache, float* x);

  /// logits [n, vocab] = lm_head · output_norm(x) for x [n, hidden] (with the final softcap
  /// when the model has one).
  void logits(const float* x, int64_t n, float* logits);

  /// Observe progress: `cb(n)` after every finish_layer() of n rows (so a prefill of T tokens
  /// reports T x n_layers rows in all). It may throw to abandon the work (the sequence is then
  /// invalid until the next prefill). Empty: off (one branch per layer).
  void set_layer_progress(std::function<void(int64_t rows)> cb) { layer_progress_ = std::move(cb); }

  /// Rows per chunk in forward() and in the engines' prefills: bounds scratch memory for long
  /// prompts. A runtime option (default kDefaultChunk); results do not depend on it
  /// (tests/kv/chunk_size_test.cc). Errors: set_chunk: Error{InvalidArgument} for rows < 1.
  static constexpr int64_t kDefaultChunk = 512;
  int64_t chunk() const { return chunk_; }
  void set_chunk(int64_t rows);

 private:
  std::vector<float>& buf(int idx, size_t n);
  /// attn_norm(x) for n rows, into scratch; valid until the next call.
  const float* attn_input(int64_t layer, const float* x, int64_t n);
  /// k, v [n, kv_dim] from the normed rows in acts_: projections, k-norm, RoPE. With q set, also
  /// q's projection [n, q_dim] (in the same pass over the pool; q-norm and RoPE are the caller's).
  void project_kv(int64_t layer, int64_t n, int64_t pos0, float* q, float* k, float* v);

  std::shared_ptr<const Model> model_;
  ThreadPool pool_;
  std::vector<std::vector<float>> scratch_;
  std::function<void(int64_t)> layer_progress_;
  int64_t chunk_ = kDefaultChunk;
  compute::Activations acts_;  ///< the current matmul input, quantised once for all its weights
};

}  // namespace larql
