#include "inference/kv_cache.h"

#include <algorithm>

namespace larql {

void LayerKv::append(const float* k, const float* v, int64_t n) {
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

void LayerKv::clear() {
  k_.clear();
  v_.clear();
  first_pos_ = 0;
  start_ = 0;
}

void LayerKv::truncate(int64_t pos) {
  if (pos >= end_pos()) return;
  const int64_t keep_rows = std::max<int64_t>(0, pos - first_pos_);
  k_.resize(static_cast<size_t>(keep_rows * kv_dim_));
  v_.resize(static_cast<size_t>(keep_rows * kv_dim_));
  start_ = std::min(start_, keep_rows);
}

KvCache::KvCache(const ModelConfig& config, int64_t window) {
  for (const LayerConfig& l : config.layers) {
    int64_t keep = l.sliding ? l.window : 0;
    if (window > 0) keep = keep > 0 ? std::min(keep, window) : window;
    layers_.emplace_back(config.kv_dim(), keep);
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
