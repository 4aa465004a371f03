// Per-layer K/V storage with absolute positions, used by the standard engine and the
// whole-sequence scorer. Rows are f32, post-RoPE keys and values.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace larql {

/// K/V rows for one layer, covering positions [first_pos, first_pos + rows()).
/// `keep` (0 = keep all) is the layer's attention span: a query at p sees positions
/// p - keep + 1 .. p (Forward::layer masks by it, in prefill as in decode), and rows older than
/// `keep` are evicted lazily, so appends stay amortised O(1). The first `sink` positions
/// (the attention sink, <bos>) are also kept apart, never evicted, and stay visible to every
/// query whatever the span (AttendMask).
class LayerKv {
 public:
  LayerKv() = default;
  LayerKv(int64_t kv_dim, int64_t keep, int64_t sink = 0) : kv_dim_(kv_dim), keep_(keep), sink_(sink) {}

  /// Append n rows k, v: [n, kv_dim] at positions end_pos() .. end_pos() + n - 1.
  /// Nothing is evicted until evict(): a prefill chunk's queries still see their own window.
  void append(const float* k, const float* v, int64_t n);
  /// Drop rows older than `keep` (call after the chunk's attention).
  void evict();
  int64_t first_pos() const { return first_pos_ + start_; }
  int64_t end_pos() const { return first_pos_ + static_cast<int64_t>(k_.size() / kv_dim_); }
  int64_t rows() const { return end_pos() - first_pos(); }
  int64_t kv_dim() const { return kv_dim_; }
  /// The attention span (0 = unbounded).
  int64_t span() const { return keep_; }
  /// Sink rows held (positions 0 .. sink_rows()-1; at most the `sink` asked for).
  int64_t sink_rows() const { return static_cast<int64_t>(sink_k_.size() / (kv_dim_ > 0 ? kv_dim_ : 1)); }
  /// Sink positions asked for at construction.
  int64_t sink_capacity() const { return sink_; }
  const float* sink_k() const { return sink_k_.data(); }
  const float* sink_v() const { return sink_v_.data(); }
  /// Replace the sink rows (restoring saved state): n rows k, v [n, kv_dim] at positions 0..n-1.
  void set_sink(const float* k, const float* v, int64_t n);
  const float* k_at(int64_t pos) const { return k_.data() + (pos - first_pos_) * kv_dim_; }
  const float* v_at(int64_t pos) const { return v_.data() + (pos - first_pos_) * kv_dim_; }
  /// Bytes of live rows (keys + values), not buffer capacity; sink rows count once.
  size_t bytes() const {
    const int64_t apart = std::max<int64_t>(0, std::min(sink_rows(), first_pos()));
    return static_cast<size_t>((rows() + apart) * kv_dim_) * 2 * sizeof(float);
  }
  void clear();
  /// Clear and start the next append at absolute position `pos` (restoring saved state).
  void reset_to(int64_t pos) {
    clear();
    first_pos_ = pos;
  }
  /// Drop every row at position >= pos (for rewinding).
  void truncate(int64_t pos);

 private:
  int64_t kv_dim_ = 0;
  int64_t keep_ = 0;
  int64_t sink_ = 0;
  int64_t first_pos_ = 0;  ///< position of k_[0]
  int64_t start_ = 0;      ///< rows at the front that are logically evicted
  std::vector<float> k_, v_;
  std::vector<float> sink_k_, sink_v_;  ///< rows at positions [0, sink_rows())
};

/// One LayerKv per layer. Sliding layers keep (and attend over) their model window; `window` > 0
/// bounds every other layer to the newest `window` positions too (the standard:window=N engine),
/// and with `sink` those layers also keep position 0 (the attention sink). A window smaller than
/// a sliding layer's own is not this class's business: the engines refuse it
/// (check_engine_window in kv/engine.h).
class KvCache {
 public:
  KvCache() = default;
  KvCache(const ModelConfig& config, int64_t window = 0, bool sink = false);
  LayerKv& layer(int64_t i) { return layers_[static_cast<size_t>(i)]; }
  const LayerKv& layer(int64_t i) const { return layers_[static_cast<size_t>(i)]; }
  int64_t n_layers() const { return static_cast<int64_t>(layers_.size()); }
  int64_t n_past() const { return layers_.empty() ? 0 : layers_[0].end_pos(); }
  size_t bytes() const;
  void clear();

 private:
  std::vector<LayerKv> layers_;
};

}  // namespace larql
