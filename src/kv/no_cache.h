// The `no-cache` engine: a debugging oracle that keeps nothing but the token list.
#pragma once

#include <memory>

#include "inference/forward.h"
#include "kv/engine.h"

namespace larql {

/// Canonical state: the token ids consumed so far (4 bytes per token, counted as hot bytes).
/// Every prefill and decode step re-runs the whole forward pass over the full token list with a
/// fresh, throw-away KvCache, so a step costs O(N) layers of work and a sequence O(N^2).
/// Contract: the same logits as `standard` (max |delta logit| <= 1e-3; in practice equal).
/// Errors: EmptyPrompt, InvariantViolation (decode before prefill), ContextOverflow (past the
/// model context), InvalidArgument (bad token id; another engine's/model's state file).
class NoCacheEngine : public Engine {
 public:
  explicit NoCacheEngine(std::shared_ptr<Forward> forward);
  std::vector<float> prefill(const std::vector<int32_t>& tokens) override;
  std::vector<float> decode_step(int32_t token) override;
  EngineInfo info() const override;
  EngineMemory memory() const override;
  int64_t n_past() const override { return static_cast<int64_t>(tokens_.size()); }
  void save_state(const std::string& path) const override;
  void load_state(const std::string& path) override;

 private:
  /// Full forward over `tokens`; returns the last position's residual [hidden].
  std::vector<float> run(const std::vector<int32_t>& tokens);
  std::shared_ptr<Forward> fwd_;
  std::vector<int32_t> tokens_;
};

}  // namespace larql
