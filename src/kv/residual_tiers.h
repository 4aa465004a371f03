// Shared pieces of the residual-stream engines (markov-rs in both cold_kv modes, markov-rs-codec,
// boundary-per-layer): cold-tier row codecs, the row store, the per-layer tier limits and the
// state-file layout of the tiers. Specification: docs/engines.md "markov-rs".
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "kv/state_file.h"

namespace larql {

struct ModelConfig;

/// How cold residual rows are stored.
///   F32  — exact (markov-rs), 4 bytes/element.
///   Bf16 — round-to-nearest-even bf16 (util/half.h), 2 bytes/element.
///   Int8 — symmetric per row: scale = max|x| / 127 (f32), q = round-half-even(x / scale)
///          clamped to [-127, 127]; decode x = q * scale; 1 byte/element + 4 bytes/row.
enum class ColdCodec { F32, Bf16, Int8 };

/// "f32", "bf16", "int8".
const char* cold_codec_name(ColdCodec codec);

/// 32-bit words per encoded row of `hidden` elements (shared by markov-rs-codec and
/// boundary-per-layer).
int64_t cold_codec_words(ColdCodec codec, int64_t hidden);
/// Encode one row x [hidden] into out [cold_codec_words] / decode it back (the round trip).
void encode_cold_row(ColdCodec codec, int64_t hidden, const float* x, uint32_t* out);
void decode_cold_row(ColdCodec codec, int64_t hidden, const uint32_t* in, float* x);

/// Rows of fixed width at absolute positions [first_pos(), end_pos()); appends at the end and
/// drops from the front in amortised O(1) per row. Logical rows only are counted in bytes().
template <class T>
class RowStore {
 public:
  RowStore() = default;
  explicit RowStore(int64_t width) : width_(width) {}
  int64_t width() const { return width_; }
  int64_t first_pos() const { return first_ + start_; }
  int64_t end_pos() const { return first_ + static_cast<int64_t>(data_.size()) / width_; }
  int64_t rows() const { return end_pos() - first_pos(); }
  const T* at(int64_t pos) const { return data_.data() + (pos - first_) * width_; }
  T* mut_at(int64_t pos) { return data_.data() + (pos - first_) * width_; }
  size_t bytes() const { return static_cast<size_t>(rows() * width_) * sizeof(T); }
  /// Append n rows [n, width] at end_pos().
  void append(const T* rows, int64_t n) { data_.insert(data_.end(), rows, rows + n * width_); }
  /// Empty the store; the next append lands at `pos`.
  void reset_to(int64_t pos) {
    data_.clear();
    first_ = pos;
    start_ = 0;
  }
  /// Drop every row at a position < pos.
  void drop_before(int64_t pos) {
    if (pos <= first_pos()) return;
    start_ = std::min(pos, end_pos()) - first_;
    if (start_ > 0 && start_ >= rows()) {  // compact once the dead prefix is as large as the live part
      data_.erase(data_.begin(), data_.begin() + static_cast<std::ptrdiff_t>(start_ * width_));
      first_ += start_;
      start_ = 0;
    }
  }

 private:
  int64_t width_ = 1;
  int64_t first_ = 0;  ///< position of data_[0]
  int64_t start_ = 0;  ///< logically dropped rows at the front
  std::vector<T> data_;
};

/// Which residual rows each layer keeps, for a hot `window` (tokens, 0 = unbounded):
///   * retain: global layers keep every position (0 = all); a sliding layer keeps only its last
///     (sliding_window - 1) positions, the most the next query can see;
///   * kv_keep: hot rows per layer — min(window, retain), 0 = all.
struct ResidualTierLimits {
  ResidualTierLimits() = default;
  ResidualTierLimits(const ModelConfig& config, int64_t window);
  std::vector<int64_t> kv_keep, retain;
  /// First position layer li keeps a residual for once n tokens are consumed (0 for global).
  int64_t retain_lo(int64_t li, int64_t n) const;
  /// First hot position of layer li at n tokens.
  int64_t hot_lo(int64_t li, int64_t n) const;
};

/// K/V [b - a, kv_dim] (into k, v, resized) of layer li for positions [a, b) of `hot`, derived
/// from their residuals after an encode/decode round trip with `codec`: exactly the K/V those
/// positions get once they turn cold. A prefill passes them as AttendMask::alt so that each query
/// sees what a decode step at its position sees (older positions through the round trip).
void roundtrip_kv(Forward& f, int64_t li, ColdCodec codec, const RowStore<float>& hot, int64_t a, int64_t b,
                  std::vector<float>& k, std::vector<float>& v);

/// The tier move of layer li once n tokens are consumed, shared by markov-rs and the cached
/// residual engines' settle(): cold rows below tiers.retain_lo(li, n) are dropped; hot rows at
/// [max(hot.first_pos(), retain_lo), tiers.hot_lo(li, n)) are encoded with `codec` and appended to
/// `cold` (which restarts at the first of them when it does not end there), then dropped from
/// `hot`. Returns that range's first position (== hot_lo when no row moved); the caller re-derives
/// what it caches for [returned, hot_lo(li, n)).
int64_t settle_layer_tiers(const ResidualTierLimits& tiers, int64_t li, int64_t n, ColdCodec codec, int64_t hidden,
                           RowStore<uint32_t>& cold, RowStore<float>& hot);

/// The mask a prefill chunk of layer li (queries up to position end - 1, attending from `lo`)
/// needs so that each query sees what a decode step at its position sees: hot rows in
/// [max(hot.first_pos(), lo), end - 1 - keep) — those that turn cold for a later query of the
/// chunk — through the codec round trip (AttendMask::alt, K/V in ak/av from roundtrip_kv), the
/// newest keep + 1 exact. An empty mask for F32 (the round trip is exact) or keep == 0 (all hot).
/// Shared by markov-rs-codec's and the cached residual engines' prefill.
AttendMask prefill_roundtrip_mask(Forward& f, int64_t li, ColdCodec codec, int64_t keep, const RowStore<float>& hot,
                                  int64_t lo, int64_t end, std::vector<float>& ak, std::vector<float>& av);

/// One layer's tiers in a state file: u64 cold first, u64 cold rows, the encoded words as held;
/// u64 hot first, u64 hot rows, the f32 residuals.
void write_residual_tiers(StateWriter& w, const RowStore<uint32_t>& cold, const RowStore<float>& hot);
/// Read what write_residual_tiers wrote for layer li into cold (width = words per row) and hot
/// (width = hidden). The cold rows must be [want_cold, want_hot) and the hot rows
/// [want_hot, n_past). Errors: Error{Format} naming the file and the layer.
void read_residual_tiers(StateReader& r, int64_t li, int64_t want_cold, int64_t want_hot, int64_t n_past,
                         RowStore<uint32_t>& cold, RowStore<float>& hot);

}  // namespace larql
