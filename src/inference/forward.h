// The layer primitives engines compose, and the config-driven forward pass built from them.
// Gemma 3 layer (Gemma Team 2025, "Gemma 3 Technical Report"; HF modeling_gemma3.py):
//   h = x + post_attn_norm(Wo · attn(rope(qk_norm(Wq,Wk,Wv · attn_norm(x)))))
//   out = h + post_ffn_norm(Wdown · (gelu_tanh(Wgate · ffn_norm(h)) ⊙ Wup · ffn_norm(h)))
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "compute/ops.h"
#include "inference/device.h"
#include "inference/ffn.h"
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

/// One layer's rows at one position, handed to a LayerObserver. Each pointer is `hidden` floats,
/// valid only during the on_layer call. With h = residual_in + attn_out (the residual between the
/// blocks): residual_out = h + ffn_out, ffn_in = ffn_norm(h) (the layer formula at the top).
struct LayerTrace {
  int64_t layer = 0;
  int64_t pos = 0;   ///< absolute position of the row (or its row index when the caller gave none)
  int64_t seq = 0;   ///< the sequence's index in a decode_batch call; 0 otherwise
  int64_t hidden = 0;
  const float* residual_in = nullptr;   ///< x entering the layer
  const float* attn_out = nullptr;      ///< post_attn_norm(Wo · attn): what attention adds to x
  const float* ffn_in = nullptr;        ///< ffn_norm(h): the FFN's input
  const float* ffn_out = nullptr;       ///< post_ffn_norm(FFN(ffn_in)): what the FFN adds to x
  const float* residual_out = nullptr;  ///< x leaving the layer
};

/// Receives each layer's rows for the positions it wants (what LQL's TRACE and EXPLAIN INFER
/// read). Called on the thread that runs the forward pass, after the layer, once per wanted row.
/// When none is attached the forward pass pays one pointer check per layer.
class LayerObserver {
 public:
  virtual ~LayerObserver() = default;
  /// The position set: whether rows at absolute position `pos` are reported. Default: all.
  virtual bool wants(int64_t pos) const {
    (void)pos;
    return true;
  }
  virtual void on_layer(const LayerTrace& t) = 0;
};

/// A sequence's scratch, named by what each buffer holds; owned by whoever runs the sequence
/// (a Forward owns one for the calls made through it). Contents are the last call's and carry
/// no meaning between calls; sizes only grow, so steady decode allocates nothing.
struct Workspace {
  std::vector<float> h;         ///< [n, hidden] a normed input (attn_norm / ffn_norm / output_norm)
  std::vector<float> q, k, v;   ///< [n, q_dim], [n, kv_dim] x2: layer()'s projections
  std::vector<float> attn;      ///< [n, q_dim] layer()'s attention output (before Wo)
  std::vector<float> o;         ///< [n, hidden] post_attn_norm(Wo · attn)
  std::vector<float> gate, up;  ///< [n, ffn] DenseFfn's projections
  std::vector<float> down;      ///< [n, hidden] the FFN's output, then post_ffn_norm of it
  std::vector<float> trace_in;  ///< [n, hidden] the layer's input rows, kept for an observer
  std::vector<float> rows;      ///< [n, hidden] decode_batch's residual rows, one per live sequence
  std::vector<int64_t> pos;     ///< [n] decode_batch: each live row's position
  std::vector<int64_t> seq;     ///< [n] decode_batch: each live row's item index
  std::vector<KvSpan> spans;    ///< [n] decode_batch: each live row's K/V
  std::vector<AttendMask> masks;  ///< [n] decode_batch: each live row's mask
  compute::Activations acts;    ///< the current matmul input, quantised once for all its weights
  std::vector<float> attn_parts;     ///< decode attention's per-chunk partials (compute::attend_chunk)
  std::vector<int64_t> attn_offs;    ///< [n * n_kv_heads + 1] each (row, K/V group)'s first chunk task
  // MoeFfn's buffers.
  std::vector<float> moe_logits;     ///< [n, n_experts] router logits
  std::vector<float> moe_probs;      ///< [n_experts] one row's probabilities
  std::vector<int32_t> moe_chosen;   ///< [n, n_experts_used] each row's experts
  std::vector<float> moe_weights;    ///< [n, n_experts_used] their weights
  std::vector<float> moe_out;        ///< [n, n_experts_used, hidden] each chosen expert's output
  std::vector<int64_t> moe_slots;    ///< the (row, slot)s routed to the expert being run
  std::vector<float> moe_rows;       ///< [m, hidden] those rows gathered
  std::vector<float> moe_expert_out; ///< [m, hidden] the expert's output (or the shared expert's)

  /// buf resized to at least n floats; its data.
  static float* grow(std::vector<float>& buf, size_t n) {
    if (buf.size() < n) buf.resize(n);
    return buf.data();
  }
};

/// Where a norm sits in the layer (Forward::norm).
enum class NormSite { Attn, PostAttn, Ffn, PostFfn };

/// Binds a model to an executor (a thread pool, by default the process's shared pool for the
/// thread count: ThreadPool::shared) and holds one sequence's scratch (Workspace), FFN choice,
/// observer and cancel flag. Cheap to make: one per sequence. Several Forwards may run on
/// different threads at once over one Model and one pool (dispatch to the pool is serialised);
/// one Forward is used by one thread at a time.
class Forward {
 public:
  /// The shared pool of n_threads (n_threads <= 0: all hardware threads).
  Forward(std::shared_ptr<const Model> model, int n_threads);
  /// An explicit executor (not null).
  Forward(std::shared_ptr<const Model> model, std::shared_ptr<ThreadPool> pool);

  /// A new Forward over the same model and executor with the same per-layer FFNs (set_ffn) and
  /// chunk size: its own scratch, no observer, cancel flag or progress callback. How code that
  /// holds one Forward makes another for a second sequence (a remote FFN carries over).
  std::shared_ptr<Forward> sibling() const;

  const Model& model() const { return *model_; }
  const ModelConfig& config() const { return model_->config(); }
  std::shared_ptr<const Model> model_ptr() const { return model_; }
  ThreadPool& pool() { return *pool_; }
  std::shared_ptr<ThreadPool> pool_ptr() const { return pool_; }
  Workspace& workspace() { return ws_; }

  /// x [n, hidden] = token_embd[tokens] * embed_scale.
  /// Errors: Error{InvalidArgument} for a token id outside [0, vocab).
  void embed(const int32_t* tokens, int64_t n, float* x);

  /// y [n, hidden] = RMSNorm of x [n, hidden] with the layer's norm weight at `site`
  /// (compute::rmsnorm; in place allowed). PostAttn/PostFfn are identity copies when the model
  /// has no post norms.
  void norm(NormSite site, int64_t layer, const float* x, int64_t n, float* y);

  /// Projections for n residual rows x [n, hidden] at positions pos0..pos0+n-1:
  /// q [n, q_dim] and k [n, kv_dim] q/k-normed and RoPE'd with the layer's base and scaling,
  /// v [n, kv_dim]. This is also "K/V from a residual" for residual-state engines.
  void qkv(int64_t layer, const float* x, int64_t n, int64_t pos0, float* q, float* k, float* v);
  /// The same with each row's own position pos[t] (rows of different sequences in one batch);
  /// row t is bit-identical to qkv() of that row alone at pos[t].
  void qkv_at(int64_t layer, const float* x, int64_t n, const int64_t* pos, float* q, float* k, float* v);

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

  /// Attention's output stage, in place on x [n, hidden]: x += post_attn_norm(attn · Wo^T) for
  /// attn [n, q_dim]; the added rows are left in workspace().o.
  void attn_block(int64_t layer, const float* attn, int64_t n, float* x);

  /// The FFN stage, in place on x [n, hidden]: x += post_ffn_norm(FFN(ffn_norm(x))), FFN the
  /// layer's Ffn (set_ffn; DenseFfn by default). Leaves ffn_norm(x) in workspace().h and the
  /// added rows in workspace().down.
  void ffn_block(int64_t layer, int64_t n, float* x);

  /// The rest of a layer after attention: attn_block, then ffn_block, then the observer (rows at
  /// positions pos0.. when given; kNoPos numbers them 0..n-1) and the progress callback.
  static constexpr int64_t kNoPos = -1;
  void finish_layer(int64_t layer, const float* attn, int64_t n, float* x, int64_t pos0 = kNoPos);

  /// One whole layer over n rows, appending to and attending over `kv` with mask_of(kv), then
  /// evicting what kv no longer keeps.
  void layer(int64_t layer, float* x, int64_t n, int64_t pos0, LayerKv& kv);

  /// Run n tokens at positions cache.n_past().. through every layer. x [n, hidden] receives
  /// the final residual (before the final norm). Long inputs are processed in chunks.
  /// Errors: Error{Cancelled} when the cancel flag (set_cancel) is seen set before a layer; the
  /// cache then holds part of the input and must be cleared or rewound by the caller.
  void forward(const int32_t* tokens, int64_t n, KvCache& cache, float* x);

  /// Residual rows x [n, hidden] at positions cache.layer(begin).end_pos().. through layers
  /// [begin, end) only, in place (what a shard holding those layers runs; forward() is embed then
  /// run_layers(0, n_layers)). Chunked and cancellable as forward().
  /// Errors: Error{InvalidArgument} for a range outside the model or a layer the model part does
  /// not hold; Error{Cancelled} as forward().
  void run_layers(int64_t begin, int64_t end, float* x, int64_t n, KvCache& cache);

  /// logits [n, vocab] = lm_head · output_norm(x) for x [n, hidden] (with the final softcap
  /// when the model has one).
  void logits(const float* x, int64_t n, float* logits);

  /// The FFN of one layer (not null; shared: see Ffn for what a shared one must respect), or
  /// back to the dense one with nullptr. Errors: Error{InvalidArgument} for a layer out of range.
  void set_ffn(int64_t layer, std::shared_ptr<Ffn> ffn);
  /// The FFN a layer runs (the shared DenseFfn, or MoeFfn for a mixture of experts, unless
  /// set_ffn replaced it).
  Ffn& ffn(int64_t layer);
  /// Whether set_ffn gave the layer an FFN of its own (e.g. one on shards).
  bool ffn_replaced(int64_t layer) const {
    return layer >= 0 && static_cast<size_t>(layer) < ffns_.size() && ffns_[static_cast<size_t>(layer)] != nullptr;
  }

  /// The backend the engines made over this Forward run on (kv/registry.h make_engine): null
  /// (the default) = this Forward's own CPU code; a GPU DeviceModel (api::OpenOptions::device)
  /// makes `standard` a DeviceEngine over it. sibling() carries it.
  void set_device(std::shared_ptr<DeviceModel> device) { device_ = std::move(device); }
  const std::shared_ptr<DeviceModel>& device() const { return device_; }

  /// Attach (or, with nullptr, detach) an observer; not owned, must outlive its attachment.
  void set_observer(LayerObserver* obs) { observer_ = obs; }
  LayerObserver* observer() const { return observer_; }

  /// A flag another thread may set to stop this sequence: checked before every layer of
  /// forward() (Error{Cancelled}) and per sequence by decode_batch. nullptr: none. Not owned.
  void set_cancel(const std::atomic<bool>* flag) { cancel_ = flag; }

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

  /// One sequence's part in decode_batch.
  struct BatchItem {
    int32_t token = 0;                         ///< the next token, at position cache->n_past()
    KvCache* cache = nullptr;                  ///< the sequence's own K/V (not shared in the batch)
    float* x = nullptr;                        ///< out: [hidden] final residual (before the final norm)
    const std::atomic<bool>* cancel = nullptr; ///< optional: set (by any thread) to drop the sequence
    bool cancelled = false;                    ///< out: dropped; its cache is as before the call
  };
  /// A batched decode step: advances every item's sequence by its one token in one pass over the
  /// weights (each matmul over the batch's rows), attention per sequence over its own K/V with
  /// mask_of(its layer). Every item's x is bit-identical to what forward(&token, 1, *cache, x)
  /// gives it alone (the kernels are row-independent: docs/architecture.md "Seams"). A sequence
  /// whose cancel flag is seen set before a layer leaves the batch there: its cache is rewound
  /// to where it was, `cancelled` is set, the others go on. This Forward's FFNs, observer
  /// (LayerTrace::seq = item index) and progress callback apply to the whole batch; its own
  /// cancel flag is not read. Caches must be distinct.
  /// Errors: Error{InvalidArgument} for a null cache, a repeated cache or a bad token (before any
  /// work), Error{ContextOverflow} is the caller's check (kv/ engines make it).
  void decode_batch(std::span<BatchItem> items);

 private:
  /// attn_norm(x) for n rows into ws_.h, and the matmul input set to it.
  void attn_input(int64_t layer, const float* x, int64_t n);
  /// Error{InvalidArgument} unless the model part holds the layer's attention weights.
  void require_attention(int64_t layer) const;
  /// k, v [n, kv_dim] from the normed rows in ws_.acts: projections, k-norm, RoPE at pos[t]
  /// (pos0 + t when pos is null). With q set, also q's projection [n, q_dim] (in the same pass
  /// over the pool; q-norm and RoPE are the caller's).
  void project_kv(int64_t layer, int64_t n, int64_t pos0, const int64_t* pos, float* q, float* k, float* v);
  /// Attention of n query rows q [n, q_dim], row t at pos[t] over its own kv[t] with mask[t]
  /// (rows of different sequences), in one pass over the pool; row t bit-identical to attend()
  /// of that row alone. out [n, q_dim].
  void attend_rows(int64_t layer, const float* q, int64_t n, const int64_t* pos, const KvSpan* kv,
                   const AttendMask* mask, float* out);
  void qkv_impl(int64_t layer, const float* x, int64_t n, int64_t pos0, const int64_t* pos, float* q, float* k,
                float* v);
  /// finish_layer with each row's position and sequence index given (either may be null).
  void finish_rows(int64_t layer, const float* attn, int64_t n, float* x, int64_t pos0, const int64_t* pos,
                   const int64_t* seq);

  std::shared_ptr<const Model> model_;
  std::shared_ptr<ThreadPool> pool_;
  Workspace ws_;
  std::vector<std::shared_ptr<Ffn>> ffns_;  ///< per layer; empty or null entries: dense
  std::shared_ptr<DeviceModel> device_;
  LayerObserver* observer_ = nullptr;
  const std::atomic<bool>* cancel_ = nullptr;
  std::function<void(int64_t)> layer_progress_;
  int64_t chunk_ = kDefaultChunk;
};

}  // namespace larql
