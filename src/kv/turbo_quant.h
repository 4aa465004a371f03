// The `turbo-quant` engine: K/V quantised in place to 3 or 4 bits per coordinate
// (shared/design/ENGINES.md "turbo-quant"; the codec: kv/turbo_codec.h).
#pragma once

#include <memory>
#include <vector>

#include "inference/forward.h"
#include "kv/engine.h"
#include "kv/turbo_codec.h"

namespace larql {

/// Canonical state: per layer, per position, per KV head, the K row and the V row of that head
/// (head_dim floats each, post-RoPE K as standard keeps it) encoded by turbo::Codec: f32 gain +
/// head_dim packed `bits`-bit indices — 132 bytes per 256-float head at 4 bits, 100 at 3 bits
/// (f16 would take 512). Sliding layers keep only their model window; global layers keep every
/// position. There is no derivative state and no f32 copy.
///
/// A row is encoded exactly once, in the step that produces it (Forward::qkv), and never
/// touched again. Attention sees older rows through their codes and the current chunk's own rows
/// exactly (as the reference system did: a prompt attends to itself at full precision, so a
/// prefill of up to Forward::kChunk tokens gives standard's logits; every later step attends to
/// quantised history). Attention runs in the rotated domain: q is rotated once per head (R·q),
/// stored rows are decoded to gain·levels (no inverse transform per row), and the attention
/// output is rotated back (R is orthonormal and self-inverse, so q·k = (Rq)·(Rk) and
/// Σ p·v = R·Σ p·(Rv)). A prefill chunk decodes its visible rows once and calls Forward::attend;
/// a decode step (attend_codes) decodes each row into an L1-sized buffer as it goes, so no f32
/// copy of the cache is ever materialised.
///
/// Errors: EmptyPrompt, InvariantViolation (decode/save before prefill; another engine's, model's
/// or bit width's state file), ContextOverflow, BackendUnavailable (head_dim not a power of two),
/// InvalidArgument (bits not 3 or 4).
class TurboQuantEngine : public Engine {
 public:
  TurboQuantEngine(std::shared_ptr<Forward> forward, int bits);
  std::vector<float> prefill(const std::vector<int32_t>& tokens) override;
  std::vector<float> decode_step(int32_t token) override;
  EngineInfo info() const override;
  /// hot_bytes = rows kept × n_kv_heads × bytes_per_vector × 2 (K and V), summed over layers.
  EngineMemory memory() const override;
  int64_t n_past() const override { return n_past_; }
  void save_state(const std::string& path) const override;
  void load_state(const std::string& path) override;

  const turbo::Codec& codec() const { return codec_; }
  /// The stored rows of `layer`, decoded to the original domain: k, v [rows, kv_dim] for
  /// positions [first_pos, first_pos + rows). For tests and inspection.
  void decoded_rows(int64_t layer, std::vector<float>& k, std::vector<float>& v, int64_t& first_pos) const;

 private:
  /// Encoded rows of one layer for positions [first_pos + start, first_pos + rows_total).
  struct QuantLayer {
    int64_t first_pos = 0;  ///< position of row 0 of k/v
    int64_t start = 0;      ///< rows at the front that are logically evicted
    int64_t keep = 0;       ///< 0 = keep all, else the sliding window
    std::vector<uint8_t> k, v;
  };
  int64_t rows_total(const QuantLayer& l) const { return static_cast<int64_t>(l.k.size() / row_bytes_); }
  int64_t live_rows(const QuantLayer& l) const { return rows_total(l) - l.start; }
  void clear_layers();
  void layer_step(int64_t li, float* x, int64_t n, int64_t pos0);
  /// Decode-step attention (one query at `pos`) read straight from the codes into attn_.
  void attend_codes(int64_t li, int64_t pos);
  /// Evict beyond a sliding window, then the rest of the layer (attention output, FFN).
  void finish_after_attention(int64_t li, QuantLayer& l, float* x, int64_t n);
  std::vector<float> run(const int32_t* tokens, int64_t n);

  std::shared_ptr<Forward> fwd_;
  int bits_;
  turbo::Codec codec_;
  size_t row_bytes_;  ///< n_kv_heads × codec_.bytes_per_vector()
  std::vector<QuantLayer> layers_;
  int64_t n_past_ = 0;
  bool started_ = false;
  // Scratch (reused across steps).
  std::vector<float> q_, k_, v_, attn_, kr_, vr_, scores_, partial_;
};

}  // namespace larql
