// Per-layer K/V storage with absolute positions, used by the standard engine and the
// whole-sequence scorer. Rows are f32, post-RoPE keys and values.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace larql {

/// K/V rows for one layer, covering positions [first_pos, first_pos + rows()).
/// Rows older than `keep` (0 = keep all) are evicted lazily, so appends stay amortised O(1).
class LayerKv {
 public:
  LayerKv() = default;
  LayerKv(int64_t kv_dim, int64_t keep) : kv_dim_(kv_dim), keep_(keep) {}

  /// Append n rows k, v: [n, kv_dim] at positions end_pos() .. end_pos() + n - 1.
  /// Nothing is evicted until evict(): a prefill chunk's queries still see their own window.
  void append(const float* k, const float* v, int64_t n);
  /// Drop rows older than `keep` (call after the chunk's attention).
  void evict();
  int64_t first_pos() const { return first_pos_ + start_; }
  int64_t end_pos() const { return first_pos_ + static_cast<int64_t>(k_.size() / kv_dim_); }
  int64_t rows() const { return end_pos() - first_pos(); }
  int64_t kv_dim() const { return kv_dim_; }
  const float* k_at(int64_t pos) const { return k_.data() + (pos - first_pos_) * kv_dim_; }
  const float* v_at(int64_t pos) const { return v_.data() + (pos - first_pos_) * kv_dim_; }
  /// Bytes of live rows (keys + values), not buffer capacity.
  size_t bytes() const { return static_cast<size_t>(rows() * kv_dim_) * 2 * sizeof(float); }
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
  int64_t first_pos_ = 0;  ///< position of k_[0]
  int64_t start_ = 0;      ///< rows at the front that are logically evicted
  std::vector<float> k_, v_;
};

/// One LayerKv per layer. Sliding layers keep their model window; `window` > 0 additionally
/// bounds every layer to the newest `window` rows (the standard:window=N engine).
class KvCache {
 public:
  KvCache() = default;
  KvCache(const ModelConfig& config, int64_t window = 0);
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
