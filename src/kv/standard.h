// The `standard` engine: K/V tensors per layer; the reference every other engine answers to.
#pragma once

#include <memory>

#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "kv/engine.h"

namespace larql {

/// Canonical state: post-RoPE K and V rows (f32) per layer. Sliding layers keep at most their
/// model window; `window` > 0 keeps only the newest `window` rows on every layer (positions stay
/// absolute; evicted rows are gone).
class StandardEngine : public Engine {
 public:
  StandardEngine(std::shared_ptr<Forward> forward, int64_t window);
  std::vector<float> prefill(const std::vector<int32_t>& tokens) override;
  std::vector<float> decode_step(int32_t token) override;
  EngineInfo info() const override;
  EngineMemory memory() const override;
  int64_t n_past() const override { return cache_.n_past(); }
  void save_state(const std::string& path) const override;
  void load_state(const std::string& path) override;

 private:
  std::vector<float> run(const int32_t* tokens, int64_t n);
  std::shared_ptr<Forward> fwd_;
  int64_t window_;
  KvCache cache_;
  bool started_ = false;
};

}  // namespace larql
