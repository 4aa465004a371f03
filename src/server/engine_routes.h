// `GET /v1/engines` of `larql serve` (docs/server.md "Routes"): the KV engines this build has,
// and — with `?spec=S` — what engine S keeps per token of context on the loaded model, measured
// by running it: the console's engine picker shows it beside the spec a user types.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "inference/forward.h"
#include "server/http.h"

namespace larql::server {

/// One measurement: engine `spec` after a prefill of `tokens` tokens on the loaded model.
struct EngineFootprint {
  std::string spec;        ///< canonical (EngineSpec::to_string)
  int64_t tokens = 0;      ///< the prefill's length
  size_t hot_bytes = 0;    ///< Engine::memory(): state in RAM at full precision / fast tier
  size_t cold_bytes = 0;   ///< compressed / archived tiers
  int64_t window_tokens = 0;  ///< rows kept hot per layer at most (0: unbounded)
  /// (hot + cold) / tokens, bytes. For an engine with a bounded window this falls as the
  /// context grows past it; measure at the length you care about (`tokens`).
  double bytes_per_token = 0;
};

/// Runs `spec` over `tokens` tokens (a fixed pattern of ordinary vocabulary ids, BOS first) on
/// `runner`'s model and pool and reads its memory. Errors: Error{InvalidArgument} for a bad spec
/// (parse_engine_spec's message) or a `tokens` outside [1, the model's context − 1]; the
/// engine's own errors (e.g. apollo without its store).
EngineFootprint measure_engine(const Forward& runner, const std::string& spec, int64_t tokens);

class EnginesApi {
 public:
  explicit EnginesApi(std::shared_ptr<Forward> runner) : runner_(std::move(runner)) {}
  /// GET /v1/engines[?spec=S[&tokens=N]]: the registry as {"object": "list", "data": [...]};
  /// with spec, one EngineFootprint (cached per canonical spec and length). Errors in OpenAI's
  /// envelope: 400 naming `spec` or `tokens`, 405 for another method.
  void operator()(const Request& req, Responder& r);

 private:
  std::shared_ptr<Forward> runner_;
  std::mutex mu_;  ///< the cache; measurements themselves run one at a time under it
  std::map<std::string, EngineFootprint> cache_;
};

}  // namespace larql::server
