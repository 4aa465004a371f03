// Apollo's router: picks the store window a query is about, by token statistics, and the entry
// tokens to inject. Specification: shared/design/ENGINES.md ("apollo").
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kv/apollo/store.h"

namespace larql {

struct ApolloRoute {
  int64_t window = -1;    ///< best window, -1 when nothing matched
  double score = 0;       ///< its score (see ApolloRouter::route)
  double coverage = 0;    ///< share of the query's content weight found in that window, [0, 1]
  std::vector<int64_t> ranked;  ///< windows with score > 0, best first (ties: earlier window)
};

/// Token-statistics routing over a store (BM25-style, Robertson & Zaragoza 2009):
///   score(w)    = sum over distinct content tokens t of the query present in w of
///                 weight(t) * idf(t) * tf_w(t) / (tf_w(t) + 1.2)
///   coverage(w) = sum_{t in query and w} weight(t) / sum_{t in query} weight(t)
/// weight = content_weights(), idf = window_idf() over the store's windows. Tokens with weight 0
/// (frequent words, punctuation, specials) are ignored.
class ApolloRouter {
 public:
  /// `weights`: content_weights() of the store's tokenizer (one per token id).
  ApolloRouter(const ApolloStore& store, std::vector<float> weights);

  ApolloRoute route(const std::vector<int32_t>& query) const;

  /// Injection entries for a query routed to `window`: seeds are the window positions holding a
  /// query content token; candidates are the window's entries within +-`radius` positions of a
  /// seed whose token is not in the query; each distinct token keeps its best coefficient; the
  /// `top_k` best are returned as (token, coefficient), best first.
  std::vector<std::pair<int32_t, float>> entries_for(const std::vector<int32_t>& query, int64_t window, int64_t top_k,
                                                     int64_t radius = 10) const;

  float weight(int32_t token) const;

 private:
  const ApolloStore& store_;
  std::vector<float> weights_;
  /// token -> (window, term frequency) for every content token of the store.
  std::unordered_map<int32_t, std::vector<std::pair<int32_t, int32_t>>> postings_;
  /// per window: its entries (indices into store_.entries), by position.
  std::vector<std::vector<int64_t>> window_entries_;
};

}  // namespace larql
