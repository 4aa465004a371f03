// The `unlimited-context` engine: the context is cut into windows of `window` tokens.
//
// What each layer attends to:
//   * Global (non-sliding) layers: a token in window k sees the attention sink (position 0's K/V
//     row, `<bos>`), the whole previous window k-1 and window k up to itself — at least `window`
//     positions back, at most 2 x window. Nothing older: that is the engine's trade (bounded
//     state; old facts lost, to be brought back by replay()).
//   * Sliding layers keep their own span (the model's sliding window) across window boundaries,
//     exactly as in `standard`: the model never looks further back on them, so they lose nothing.
//     They get no sink: their own mask never shows position 0 past their window, and adding it
//     would move them away from standard.
// Why (issue 8): the reference design restarted every layer at a boundary from one checkpoint
// row (the previous window's last position). On license text, teacher-forced against standard,
// that cost 4.98 nats at positions 512-515 and 2.72 at 516-531, and greedy decoding printed
// "<i><i><b>...". Keeping the sliding spans alone left 0.26 nats over the 32 positions after a
// boundary against 0.09 between boundaries (a global layer right after a boundary saw only the
// checkpoint and a few rows); with the previous window kept whole it is 0.008 vs 0.010. The
// previous window's last row — the reference's checkpoint — is part of it.
// Positions stay absolute (RoPE at the true position). `window` must be at least the model's
// sliding window (check_engine_window), like every evicting engine's.
//
// Why the sink: Gemma puts much of every global layer's attention mass on `<bos>`; a window that
// cannot see it renormalises that mass onto its own tokens. `sink=0` turns it off.
//
// Canonical state: the sliding layers' K/V spans, the global layers' K/V of the previous and the
// current window, the sink row of each global layer, and an archive of every token id.
//
// Chunk invariance: windows are cut at the same positions whatever the chunking, and every
// layer masks by position (Forward::attend), so one prefill, prefill + decode and token-by-token
// decode give identical logits.
//
// Contract: exact (logits identical to standard) while the context fits two windows; beyond,
// what is lost is measured (tests/kv/chunk_invariance_test.cc: no cliff after a boundary).
// replay(id) rebuilds a closed window's K/V exactly, on demand, from the token archive.
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

/// K/V of one window as the engine held it when the window was full: per layer, the rows of the
/// window's positions that layer holds — all of them on global layers; on sliding layers the
/// newest min(rows, sliding window) (older ones were evicted by the layer's own span).
/// Layer l's rows are positions [layer_first[l], first_pos + rows), [.., kv_dim] f32 post-RoPE.
struct WindowKv {
  int64_t first_pos = 0;
  int64_t rows = 0;
  std::vector<int64_t> layer_first;
  std::vector<std::vector<float>> k, v;  ///< [n_layers][(first_pos + rows - layer_first[l]) * kv_dim]
};

class UnlimitedContextEngine : public Engine {
 public:
  /// Error{InvalidArgument} for window <= 0 or a window smaller than the model's sliding window.
  /// sink: global layers keep seeing position 0's K/V.
  UnlimitedContextEngine(std::shared_ptr<Forward> forward, int64_t window = 512, bool sink = true);
  std::vector<float> prefill(const std::vector<int32_t>& tokens) override;
  std::vector<float> decode_step(int32_t token) override;
  EngineInfo info() const override;
  /// hot = every layer's K/V rows (sliding spans; the global layers' previous and current window
  /// and sink rows); cold = 4 B per archived token.
  EngineMemory memory() const override;
  int64_t n_past() const override { return static_cast<int64_t>(tokens_.size()); }
  void save_state(const std::string& path) const override;
  void load_state(const std::string& path) override;

  int64_t window() const { return window_; }
  /// Id of the current window (= number of closed windows).
  int64_t current_window_id() const { return win_id_; }
  /// The current window's K/V (its own tokens; WindowKv).
  WindowKv current_window_kv() const;
  /// Rebuild closed window `id`'s K/V exactly, on demand: a fresh engine re-runs the archived
  /// tokens of windows 0..id (sliding layers carry state across boundaries, so a window depends
  /// on all before it). Cost: a prefill of (id + 1) x window tokens; memory: one more engine's
  /// state. Leaves this engine unchanged (works after load_state too: the archive is state).
  /// Error{InvalidArgument} unless 0 <= id < current_window_id().
  WindowKv replay(int64_t id) const;
  /// Every token consumed, in order.
  const std::vector<int32_t>& token_archive() const { return tokens_; }

 private:
  std::vector<float> process(const int32_t* tokens, int64_t n);
  void close_window();
  bool sliding(int64_t li) const;
  /// Layer li's empty K/V: a sliding layer's span; a global layer's unbounded rows + sink.
  LayerKv fresh_layer(int64_t li) const;
  void reset();

  std::shared_ptr<Forward> fwd_;
  int64_t window_;
  bool sink_on_ = true;
  std::vector<int32_t> tokens_;
  std::vector<int64_t> global_;  ///< indices of the global layers
  std::vector<LayerKv> kv_;      ///< per layer: sliding = its span; global = previous + current window, sink
  int64_t win_id_ = 0;
  int64_t cur_len_ = 0;  ///< tokens of the current window
  bool started_ = false;
};

}  // namespace larql
