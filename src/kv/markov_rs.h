// The residual-stream engines: `markov-rs` (exact) and `markov-rs-codec` (lossy cold tier).
// Specification: docs/engines.md ("markov-rs", "markov-rs-codec").
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "kv/engine.h"
#include "kv/residual_tiers.h"

namespace larql {

/// Canonical state: the residual stream — for every layer, the residual entering that layer
/// ([hidden] f32 per position), kept only where the contract needs it:
///   * global layers: every position (positions older than the newest `window` in the cold tier);
///   * sliding layers: only the last (sliding_window - 1) positions, the most the next query can
///     see; anything older is dropped.
/// Derivative state: post-RoPE K/V rows (f32) for the hot positions of each layer, derived from
/// the residuals by Forward::kv_from_residual. Cold positions are still attended: their K/V are
/// re-derived from the (decoded) cold residuals on every decode step that needs them — O(cold
/// rows) projection work per step; exact, memory-bounded by the window, but slow for long cold
/// tiers. This is the `cold_kv=derive` mode; the default `cold_kv=cache` mode is
/// CachedResidualEngine (kv/cached_residual.h), which derives each cold row's K/V once.
///
/// `window` (tokens, 0 = unbounded) bounds the hot tier: residuals and K/V of the newest `window`
/// positions. markov-rs keeps the cold tier in f32 (ColdCodec::F32) and is exact: the same logits
/// as `standard` (the forward pass is batch-invariant). markov-rs-codec encodes the cold tier with
/// bf16 or int8; cold K/V are always derived from the round-tripped residuals. Prefill attends
/// exactly as decode would (each query sees positions older than its hot window through the
/// round trip), so one prefill, prefill + decode and token-by-token decode agree bit for bit.
///
/// memory(): hot = hot K/V + hot residuals, cold = encoded cold residuals (logical rows).
/// State file: n_past plus per layer the hot residual rows (f32) and the cold rows (encoded
/// words, exactly as held) — never K/V, which load_state re-derives.
///
/// Errors: BackendUnavailable (constructor) for an architecture where the residual is not a
/// sufficient statistic; EmptyPrompt; InvariantViolation (decode before prefill); InvalidArgument
/// (a state file from another engine, config or model); ContextOverflow; Format (corrupt state file);
/// BackendFailure if an internal tier invariant is broken.
class MarkovRsEngine : public Engine {
 public:
  /// codec F32 is the `markov-rs` engine; Bf16 / Int8 are `markov-rs-codec`.
  MarkovRsEngine(std::shared_ptr<Forward> forward, int64_t window, ColdCodec codec = ColdCodec::F32);

  /// Whether the residual entering each layer (plus the absolute position) determines that
  /// layer's K/V, so residuals are a complete continuation state. Holds when (a) the K/V of a
  /// layer are a pure function of the residual row and its position (norm -> projection ->
  /// k-norm -> RoPE), (b) the attention mask depends only on positions (causal / sliding), and
  /// (c) no other per-token input enters a layer (no per-layer embeddings as in Gemma 3n /
  /// Gemma 4, no recurrent or cross-attention state). The family's architecture record says
  /// so (model/arch.h ArchRecord::residual_sufficient); anything else is refused (why receives
  /// the reason).
  static bool residual_is_sufficient(const ModelConfig& config, std::string* why);

  /// The engine's config string ("", "window=N", "window=N,codec=bf16", "codec=int8"); also the
  /// identity CachedResidualEngine takes for markov-rs in cold_kv=cache mode, so both modes write
  /// the same state-file header.
  static std::string config_string(int64_t window, ColdCodec codec);

  std::vector<float> prefill(const std::vector<int32_t>& tokens) override;
  std::vector<float> decode_step(int32_t token) override;
  EngineInfo info() const override;
  EngineMemory memory() const override;
  int64_t n_past() const override { return n_past_; }
  void save_state(const std::string& path) const override;
  void load_state(const std::string& path) override;

 private:
  struct Layer {
    LayerKv kv;               ///< derivative: hot K/V, positions [hot.first_pos(), n_past)
    RowStore<float> hot;      ///< canonical: f32 residuals of the hot positions
    RowStore<uint32_t> cold;  ///< canonical: encoded residuals, positions [cold.first_pos(), hot.first_pos())
  };
  std::vector<Layer> fresh_layers() const;
  /// Move rows leaving the hot tier into the cold tier (encoded) or drop them; drop cold rows no
  /// longer needed; evict K/V.
  void settle(std::vector<Layer>& layers, int64_t n) const;
  void decode_row(const uint32_t* in, float* x) const;
  /// K/V rows of positions [lo, end) for attention: hot rows from L.kv, cold ones derived from
  /// the decoded cold tier (into span_k_ / span_v_). Error{BackendFailure} when a row is missing.
  KvSpan attend_span(Layer& L, int64_t li, int64_t lo, int64_t end);
  /// K/V [n, kv_dim] for f32 residual rows x at positions pos0.., in chunks.
  void derive_kv(int64_t li, const float* x, int64_t n, int64_t pos0, float* k, float* v);
  std::string name() const;

  std::shared_ptr<Forward> fwd_;
  int64_t window_;
  ColdCodec codec_;
  int64_t words_per_row_;
  ResidualTierLimits tiers_;
  std::vector<Layer> layers_;
  int64_t n_past_ = 0;
  bool started_ = false;
  // Scratch for decode.
  std::vector<float> x_, q_, k_, v_, attn_, cold_x_, span_k_, span_v_;
};

}  // namespace larql
