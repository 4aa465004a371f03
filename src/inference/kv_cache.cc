#include "inference/kv_cache.h"

#include <algorithm>

namespace larql {

void LayerKv::append(const float* k, const float* v, int64_t n) {
  // Sink positions pass through here once, in order: copy them aside before any eviction.
  for (int64_t i = 0, pos = end_pos(); i < n && pos + i < sink_; ++i) {
    if (pos + i != sink_rows()) continue;  // restored or already held
    sink_k_.insert(sink_k_.end(), k + i * kv_dim_, k + (i + 1) * kv_dim_);
    sink_v_.insert(sink_v_.end(), v + i * kv_dim_, v + (i + 1) * kv_dim_);
  }
  k_.insert(k_.end(), k, k + n * kv_dim_);
  v_.insert(v_.end(), v, v + n * kv_dim_);
}

void LayerKv::evict() {
  if (keep_ <= 0) return;
  const int64_t total = static_cast<int64_t>(k_.size() / kv_dim_);
  start_ = std::max<int64_t>(start_, total - keep_);
  // Compact once the dead prefix is as large as the live part: amortised O(1) per row.
  if (start_ > 0 && start_ >= keep_) {
    const size_t off = static_cast<size_t>(start_ * kv_dim_);
    k_.erase(k_.begin(), k_.begin() + static_cast<std::ptrdiff_t>(off));
    v_.erase(v_.begin(), v_.begin() + static_cast<std::ptrdiff_t>(off));
    first_pos_ += start_;
    start_ = 0;
  }
}

void LayerKv::set_sink(const float* k, const float* v, int64_t n) {
  sink_k_.assign(k, k + n * kv_dim_);
  sink_v_.assign(v, v + n * kv_dim_);
}

void LayerKv::clear() {
  k_.clear();
  v_.clear();
  sink_k_.clear();
  sink_v_.clear();
  first_pos_ = 0;
  start_ = 0;
}

void LayerKv::truncate(int64_t pos) {
  if (pos >= end_pos()) return;
  const int64_t keep_rows = std::max<int64_t>(0, pos - first_pos_);
  k_.resize(static_cast<size_t>(keep_rows * kv_dim_));
  v_.resize(static_cast<size_t>(keep_rows * kv_dim_));
  start_ = std::min(start_, keep_rows);
  if (sink_rows() > pos) {
    sink_k_.resize(static_cast<size_t>(std::max<int64_t>(0, pos) * kv_dim_));
    sink_v_.resize(sink_k_.size());
  }
}

KvCache::KvCache(const ModelConfig& config, int64_t window, bool sink) {
  for (const LayerConfig& l : config.layers) {
    const int64_t own = l.sliding ? l.window : 0;
    // The engine window cuts this layer only where it is tighter than the layer's own span;
    // there it keeps the sink too (a sliding layer's own mask never shows position 0 past it).
    const bool cut = window > 0 && (own == 0 || window < own);
    layers_.emplace_back(config.kv_dim(), cut ? window : own, cut && sink ? 1 : 0);
  }
}

size_t KvCache::bytes() const {
  size_t b = 0;
  for (const auto& l : layers_) b += l.bytes();
  return b;
}

void KvCache::clear() {
  for (auto& l : layers_) l.clear();
}

}  // namespace larql
