// Residual-stream engines with a cached K/V tier: `markov-rs` and `markov-rs-codec` with
// cold_kv=cache (their default) and `boundary-per-layer` (policy from a calibration record,
// kv/calibration.h). Specification: docs/engines.md "markov-rs".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "kv/engine.h"
#include "kv/markov_rs.h"

namespace larql {

/// Name and configuration string an engine reports in info() and writes into state files.
struct ResidualEngineIdentity {
  std::string name = "boundary-per-layer";
  /// unset: "[window=N,]policy=<one letter per layer: f, b, i>[,note]"
  std::optional<std::string> config;
};

/// Canonical state: as markov-rs — per layer the residual entering the layer, f32 for the newest
/// `window` positions (hot), encoded with that layer's codec (policy[layer]: f32, bf16 or int8)
/// for older positions (cold); sliding layers keep only their last (sliding_window - 1) rows.
///
/// Derivative state: post-RoPE K/V rows (f32) for every position a layer can still attend to.
/// Cold K/V are extended incrementally: when a row leaves the hot tier its residual is encoded
/// once, decoded (the round trip) and its K/V re-derived from the round-tripped residual, in
/// place; after that the row's K/V are cached. Each decode step therefore does O(1) new
/// projection work per layer (the new token, plus the one row that turns cold) and attention is
/// O(window) on sliding layers / O(N) on global layers — never the O(N) re-derivation per step
/// of MarkovRsEngine (cold_kv=derive). The price is memory: every attended position keeps its
/// K/V, as in `standard`, on top of the residuals. (For an f32 layer the round trip is exact,
/// so nothing is re-derived.)
///
/// Prefill attends exactly as decode does: a query sees positions older than its hot window
/// through the codec round trip (AttendMask::alt for rows that turn cold within the chunk), so one
/// prefill, prefill + decode and token-by-token decode give identical logits.
///
/// memory(): cold = encoded cold residuals; hot = hot residuals + all cached K/V (derivative).
/// State file: like markov-rs (n_past, per layer cold words as held + hot f32 residuals; never
/// K/V, which load_state re-derives from the round-tripped residuals); the config string names
/// the window and the policy, so a state from another policy is refused. Under the identity of
/// markov-rs / markov-rs-codec (same name and config string as MarkovRsEngine) the state file is
/// byte-compatible with MarkovRsEngine's: a state saves in one cold_kv mode and loads in the other.
///
/// Errors: as MarkovRsEngine.
class CachedResidualEngine : public Engine {
 public:
  /// policy: one codec per layer (size n_layers). window 0 = unbounded (no cold tier).
  CachedResidualEngine(std::shared_ptr<Forward> forward, int64_t window, std::vector<ColdCodec> policy,
                       ResidualEngineIdentity identity = {});

  std::vector<float> prefill(const std::vector<int32_t>& tokens) override;
  std::vector<float> decode_step(int32_t token) override;
  EngineInfo info() const override;
  EngineMemory memory() const override;
  int64_t n_past() const override { return n_past_; }
  void save_state(const std::string& path) const override;
  void load_state(const std::string& path) override;

  const std::vector<ColdCodec>& policy() const { return policy_; }
  /// Calibration support: re-encode layer li's current cold tier with `codec` (from its current
  /// codec; from f32 this is exactly what having used `codec` all along gives) and re-derive
  /// that layer's cold K/V. The engine is copyable, so one prefill serves many policies.
  void set_layer_codec(int64_t li, ColdCodec codec);
  /// Extra text for info().config (e.g. the record's bound); "" for none.
  void set_config_note(std::string note) { note_ = std::move(note); }
  /// EngineInfo::note (e.g. that no calibration record was found).
  void set_user_note(std::string note) { user_note_ = std::move(note); }

 private:
  struct Layer {
    RowStore<float> k, v;     ///< derivative: K/V for positions [k.first_pos(), n_past)
    RowStore<float> hot;      ///< canonical: f32 residuals, positions [hot.first_pos(), n_past)
    RowStore<uint32_t> cold;  ///< canonical: encoded residuals, [cold.first_pos(), hot.first_pos())
  };
  Layer fresh_layer(int64_t li) const;
  /// Move rows leaving the hot tier into the cold tier; with `rederive`, replace their cached
  /// K/V by K/V derived from the round-tripped residual. Drop rows no layer can attend to.
  void settle(int64_t n, bool rederive);
  /// K/V of layer li's cold rows [a, b) from the decoded cold residuals into the K/V store.
  void derive_cold(int64_t li, int64_t a, int64_t b);

  std::shared_ptr<Forward> fwd_;
  int64_t window_;
  std::vector<ColdCodec> policy_;
  ResidualEngineIdentity id_;
  std::string note_;
  std::string user_note_;
  ResidualTierLimits tiers_;
  std::vector<Layer> layers_;
  int64_t n_past_ = 0;
  bool started_ = false;
  std::vector<float> x_, q_, k_, v_, attn_, row_;
};

}  // namespace larql
