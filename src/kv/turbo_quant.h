// The `turbo-quant` engine: K/V quantised in place to 3 or 4 bits per coordinate
// (docs/engines.md "turbo-quant"; the codec: kv/turbo_codec.h).
#pragma once

#include <memory>
#include <vector>

#include "inference/forward.h"
#include "kv/engine.h"
#include "kv/turbo_codec.h"

namespace larql {

/// Canonical state: per layer, per position, per KV head, the K row and the V row of that head
/// encoded by turbo::Codec (f32 gain + head_dim packed `bits`-bit indices: 132 bytes per
/// 256-float head at 4 bits, 100 at 3 bits; f16 would take 512), plus the exact f32 K/V of the
/// last `recent` positions. Sliding layers keep only their model window; global layers keep
/// every position. No other copy of the cache.
///
/// What is encoded (the key transform): a V row as it is; a K row k (post-RoPE, as standard
/// keeps it) as (k − c) ⊙ a, where per layer
///   - c = the K of the model's BOS token at position 0 (one forward step at construction; zero
///     when the file names no BOS). Scores shift by q·c for every row alike, which attention
///     adds back exactly; a sequence's own BOS row is then c itself and encodes exactly (the
///     attention sink is kept exact).
///   - a_i = ((gq_i² + gq_j²) / (gk_i² + gk_j²))^(1/4), j = i ± head_dim/2 (its RoPE partner),
///     from the layer's q-norm and k-norm weights gq, gk (1 when the model has no q/k norm;
///     pair energies are floored at 1e-4 of the layer's mean). A quantisation error e in the
///     scaled row becomes a score error q·(e/a); with q_i ∝ gq_i and k_i ∝ gk_i this weighting
///     minimises the expected score error of an isotropic e (Cauchy–Schwarz: error ∝
///     Σ s_i a_i² · Σ w_i / a_i², smallest at a_i² = √(w_i / s_i)). Pairs share a_i so the
///     scaling commutes with RoPE.
/// Attention runs in the rotated domain: q' = R·(q / a), rows as decoded (g·levels) or, for
/// exact rows, R·((k − c) ⊙ a); score = (q'·row + q·c) · attn_scale; V rows R·v and the output
/// rotated back (R orthonormal and self-inverse).
///
/// When rows are quantised: a row is encoded once, in the step that produces it, before any
/// query attends to it. A query at position p sees the rows of positions > p − recent exactly
/// and every older row through its codes (recent = 0: every row, its own included, through
/// its codes). The rule is the same in prefill and decode, and both run one attention kernel
/// (per query and KV head: scores row by row, one softmax, the V sum in 64-row blocks added in
/// block order), so a prefill of any chunking and a token-by-token decode give the same logits
/// bit for bit (tested).
///
/// Errors: EmptyPrompt, InvariantViolation (decode/save before prefill; a state file of the first
/// codec), InvalidArgument (another engine's, model's or configuration's state file), ContextOverflow,
/// BackendUnavailable (head_dim not a power of two), InvalidArgument (bits not 3 or 4, recent < 0).
class TurboQuantEngine : public Engine {
 public:
  static constexpr int64_t kDefaultRecent = 16;
  TurboQuantEngine(std::shared_ptr<Forward> forward, int bits, int64_t recent = kDefaultRecent);
  std::vector<float> prefill(const std::vector<int32_t>& tokens) override;
  std::vector<float> decode_step(int32_t token) override;
  /// config: "bits=B", plus ",recent=R" when R is not the default.
  EngineInfo info() const override;
  /// hot_bytes = Σ layers (rows kept × n_kv_heads × bytes_per_vector + exact rows kept ×
  /// kv_dim × 4) × 2 (K and V).
  EngineMemory memory() const override;
  int64_t n_past() const override { return n_past_; }
  void save_state(const std::string& path) const override;
  void load_state(const std::string& path) override;

  const turbo::Codec& codec() const { return codec_; }
  int64_t recent() const { return recent_; }
  /// The key transform of `layer`: a [head_dim] and c [kv_dim] (see the class comment).
  const std::vector<float>& key_scale(int64_t layer) const { return kscale_.at(static_cast<size_t>(layer)); }
  const std::vector<float>& key_centre(int64_t layer) const { return kcentre_.at(static_cast<size_t>(layer)); }
  /// What attention sees of a K (is_key) or V row [kv_dim] of `layer` once it is older than the
  /// recent window: decode(encode(transform(row))), transformed back. out [kv_dim].
  void round_trip(int64_t layer, bool is_key, const float* row, float* out) const;
  /// The stored rows of `layer` decoded to the original domain: k, v [rows, kv_dim] for
  /// positions [first_pos, first_pos + rows). For tests and inspection.
  void decoded_rows(int64_t layer, std::vector<float>& k, std::vector<float>& v, int64_t& first_pos) const;
  /// The exact rows of `layer`'s recent window: k, v [rows, kv_dim] from first_pos.
  void recent_rows(int64_t layer, std::vector<float>& k, std::vector<float>& v, int64_t& first_pos) const;

 private:
  /// Encoded rows of one layer for positions [first_pos + start, first_pos + rows_total), and
  /// the exact rows of positions [end − ex rows, end).
  struct QuantLayer {
    int64_t first_pos = 0;  ///< position of row 0 of k/v
    int64_t start = 0;      ///< rows at the front that are logically evicted
    int64_t keep = 0;       ///< 0 = keep all, else the sliding window
    std::vector<uint8_t> k, v;
    std::vector<float> ek, ev;  ///< exact rows [n, kv_dim], the last min(recent, rows) positions
  };
  int64_t rows_total(const QuantLayer& l) const { return static_cast<int64_t>(l.k.size() / row_bytes_); }
  int64_t live_rows(const QuantLayer& l) const { return rows_total(l) - l.start; }
  int64_t exact_rows(const QuantLayer& l) const;
  /// The recent window of layer li (recent_, at most a sliding layer's window).
  int64_t recent_of(int64_t li) const;
  void clear_layers();
  void init_key_transform();
  /// Encode one head's centred K row (k − c) of layer li: codec(kc ⊙ a).
  void encode_key(int64_t li, const float* kc, uint8_t* out) const;
  /// y [head_dim] = R·((k − c) ⊙ a) for KV head g of layer li.
  void key_to_domain(int64_t li, int64_t g, const float* k, float* y) const;
  void layer_step(int64_t li, float* x, int64_t n, int64_t pos0);
  std::vector<float> run(const int32_t* tokens, int64_t n);

  std::shared_ptr<Forward> fwd_;
  int bits_;
  int64_t recent_;
  turbo::Codec codec_;
  size_t row_bytes_;  ///< n_kv_heads × codec_.bytes_per_vector()
  std::vector<std::vector<float>> kscale_, kinv_, kcentre_;
  std::vector<QuantLayer> layers_;
  int64_t n_past_ = 0;
  bool started_ = false;
  // Scratch (reused across steps).
  std::vector<float> q_, k_, v_, attn_, kr_, vr_, ekr_, evr_, qc_;
};

}  // namespace larql
