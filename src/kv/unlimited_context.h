// The `unlimited-context` engine: the context is cut into windows of `window` tokens.
//
// Canonical state: the K/V of the current window (f32, post-RoPE, every layer), one checkpoint
// per closed window (the K/V row of that window's last position on every layer: n_layers x 2 x
// kv_dim f32), the attention sink (the K/V row of position 0 — `<bos>` — on every layer, kept
// once), and an archive of every token id. A token in window k attends to the checkpoint row of
// window k-1 (at its absolute position) plus the tokens of window k up to itself; on global
// (non-sliding) layers also to the sink row, as it would in `standard`. Nothing else older. The
// model's sliding-window layers still apply their own window on top (standard's sliding layers
// never see position 0 past their window, so they get no sink). Positions stay absolute (RoPE at
// the true position; K rows are stored post-RoPE, so a row keeps its own position's rotation).
//
// Why the sink: Gemma puts much of every global layer's attention mass on `<bos>`; a window that
// cannot see it renormalises that mass onto its own tokens and loses the thread (measured: top-1
// agreement with standard 19% without the sink beyond one window; see docs/BENCHMARKS.md).
// `sink=0` turns it off (the reference design).
//
// Contract: exact (logits identical to standard) while the context fits one window; beyond,
// what is lost is measured, not hidden. replay(id) rebuilds a closed window's K/V exactly from
// its predecessor's checkpoint and its archived tokens.
//
// Windows close lazily: a full window stays current (and inspectable) until the next token
// arrives.
#pragma once

#include <memory>
#include <vector>

#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "kv/engine.h"

namespace larql {

/// K/V of one window: per layer, rows [rows, kv_dim] f32 at positions first_pos.. (the window's
/// own tokens; the seed checkpoint row is not included).
struct WindowKv {
  int64_t first_pos = 0;
  int64_t rows = 0;
  std::vector<std::vector<float>> k, v;  ///< [n_layers][rows * kv_dim]
};

class UnlimitedContextEngine : public Engine {
 public:
  /// Error{InvalidArgument} for window <= 0. sink: keep position 0's K/V for global layers.
  UnlimitedContextEngine(std::shared_ptr<Forward> forward, int64_t window = 512, bool sink = true);
  std::vector<float> prefill(const std::vector<int32_t>& tokens) override;
  std::vector<float> decode_step(int32_t token) override;
  EngineInfo info() const override;
  /// hot = the current window's K/V rows (including the seed rows); cold = the checkpoints and
  /// the sink (n_layers x 2 x kv_dim x 4 B each) + 4 B per archived token.
  EngineMemory memory() const override;
  int64_t n_past() const override { return static_cast<int64_t>(tokens_.size()); }
  void save_state(const std::string& path) const override;
  void load_state(const std::string& path) override;

  int64_t window() const { return window_; }
  /// Id of the current window (= number of closed windows).
  int64_t current_window_id() const { return win_id_; }
  /// The current window's K/V (its own tokens only).
  WindowKv current_window_kv() const;
  /// Rebuild closed window `id`'s K/V from checkpoint id-1 and the archived tokens.
  /// Error{InvalidArgument} unless 0 <= id < current_window_id().
  WindowKv replay(int64_t id);
  /// Every token consumed, in order.
  const std::vector<int32_t>& token_archive() const { return tokens_; }

 private:
  struct Checkpoint {
    int64_t pos = 0;
    std::vector<float> k, v;  ///< [n_layers * kv_dim]
  };
  std::vector<float> process(const int32_t* tokens, int64_t n);
  void close_window();
  /// Fresh per-layer K/V for window `id`: seeded with checkpoint id-1's row when id > 0, and on
  /// global layers with the sink row before it (labelled one position earlier: K is post-RoPE,
  /// and a global layer's mask is only causal, so the label only has to precede the window).
  std::vector<LayerKv> seeded_layers(int64_t id) const;
  /// Whether window id's layer l starts with the sink row.
  bool has_sink(int64_t id, int64_t layer) const;
  /// Run m tokens at pos0 through every layer over `kv`; x [m, hidden].
  void run_piece(std::vector<LayerKv>& kv, const int32_t* tokens, int64_t m, int64_t pos0, float* x);
  WindowKv window_kv_of(const std::vector<LayerKv>& kv, int64_t first_pos) const;

  std::shared_ptr<Forward> fwd_;
  int64_t window_;
  std::vector<int32_t> tokens_;
  std::vector<Checkpoint> checkpoints_;  ///< index = closed window id
  bool sink_on_ = true;
  Checkpoint sink_;                      ///< position 0's K/V, captured when window 0 closes
  std::vector<LayerKv> cur_;
  int64_t win_id_ = 0;
  int64_t cur_len_ = 0;  ///< tokens of the current window
  bool started_ = false;
};

}  // namespace larql
