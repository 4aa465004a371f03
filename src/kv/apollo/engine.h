// The `apollo` retrieval engine. Specification: docs/engines.md ("apollo").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "kv/apollo/router.h"
#include "kv/apollo/store.h"
#include "kv/engine.h"

namespace larql {

struct ApolloOptions {
  std::string store;          ///< path of a store from `larql apollo build` (kept canonical)
  int64_t layer = -1;         ///< injection layer; -1 = round(7/8 x n_layers)
  double coef = 8.0;          ///< injection scale (0 = no injection)
  int64_t top_k = 12;         ///< injected entry tokens at most
  double min_coverage = 0.25; ///< best window below this share of the query's content weight: RetrievalMiss (ApolloRouter)
};

/// Answers a query about a long document without holding the document's K/V.
///
/// prefill(query): the router (ApolloRouter) picks the store window the query's content words
/// point to; the engine then runs the forward over
///     [BOS] + window tokens + separator ("\n\n") + query (its own BOS dropped)
/// — a few hundred tokens instead of the whole document — and, on the last position, adds the
/// injection delta to the residual entering layer `layer`:
///     delta = coef * sum_i s_i * embed(t_i),  s_i = c_i / sum_j c_j
/// over the router's entry tokens t_i near the query's words in that window (coefficients c_i;
/// embed includes the model's embedding scale), which leans the prediction toward the passage's
/// salient tokens; the remaining layers run as usual. coef = 0 runs the retrieved context alone.
/// decode_step continues on that context's K/V like `standard`.
///
/// Canonical state: the K/V of the retrieved context (as standard) plus the store (read-only).
/// memory(): hot = K/V bytes, cold = store bytes. State file: as standard's, config names the
/// options and the store, so a state from another store or option set is refused.
///
/// Contract: task-level — answer accuracy on a QA set over the document, against standard with
/// the whole document in context (`larql apollo eval`).
/// Errors: RetrievalMiss (constructor: no store given; prefill: the router's best window holds
/// less than min_coverage of the query's content weight — the query is not about the document);
/// EmptyPrompt; InvariantViolation (decode before prefill); InvalidArgument (a store or state from
/// another model);
/// ContextOverflow; InvalidArgument (layer >= n_layers); NotFound / Format (store file).
class ApolloEngine : public Engine {
 public:
  ApolloEngine(std::shared_ptr<Forward> forward, ApolloOptions options);

  std::vector<float> prefill(const std::vector<int32_t>& tokens) override;
  std::vector<float> decode_step(int32_t token) override;
  EngineInfo info() const override;
  EngineMemory memory() const override;
  int64_t n_past() const override { return cache_.n_past(); }
  void save_state(const std::string& path) const override;
  void load_state(const std::string& path) override;

  /// Route a query (token ids, BOS allowed) without running the model: the decision prefill
  /// makes (route().retrieved() is false exactly when prefill raises RetrievalMiss).
  ApolloRoute route(const std::vector<int32_t>& tokens) const;
  /// The route and the injected (token, coefficient) pairs of the last prefill; the route is kept
  /// when prefill refused (RetrievalMiss) and empty when it failed before routing.
  const ApolloRoute& last_route() const { return route_; }
  const std::vector<std::pair<int32_t, float>>& last_entries() const { return injected_; }
  const ApolloStore& store() const { return *store_; }
  int64_t layer() const { return opt_.layer; }

 private:
  std::vector<int32_t> strip_bos(const std::vector<int32_t>& tokens) const;

  std::shared_ptr<Forward> fwd_;
  ApolloOptions opt_;
  std::shared_ptr<const ApolloStore> store_;
  std::unique_ptr<ApolloRouter> router_;
  int32_t bos_ = -1;
  KvCache cache_;
  ApolloRoute route_;
  std::vector<std::pair<int32_t, float>> injected_;
  bool started_ = false;
};

}  // namespace larql
