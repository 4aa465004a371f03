// Apollo's router: picks the store window a query is about, by the statistics of normalised
// words (kv/apollo/words.h), and the entry tokens to inject. Specification: docs/engines.md
// ("apollo").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/apollo/store.h"
#include "tokenizer/tokenizer.h"

namespace larql {

/// One routing decision. `window` is what the engine retrieves; everything else describes the
/// best candidate, so a refusal can say how close it came.
struct ApolloRoute {
  int64_t window = -1;    ///< the retrieved window: `best` when coverage >= min_coverage, else -1 (refused)
  int64_t best = -1;      ///< the best-scoring window, retrieved or not; -1 when no window holds a query word
  double score = 0;       ///< best's score (see ApolloRouter)
  double coverage = 0;    ///< share of the query's content weight found in `best`, [0, 1]
  std::vector<int64_t> ranked;  ///< windows with score > 0, best first (ties: earlier window)
  bool retrieved() const { return window >= 0; }
};

/// Content weight of a normalised word: the sum of content_weights() (store.h) over the tokens of
/// " " + word — the word as it stands after a space, lower-case. Under SPM's unigram model a
/// word's log-probability is the sum of its pieces', so this tracks the word's surprisal; words
/// made only of the 300 most frequent pieces ("the", "is", single digits) weigh 0. A function of
/// the normalised word alone: "Zanzibar" at the start of a line, after a space or in capitals
/// weighs the same. Errors: as Tokenizer::encode.
class WordWeights {
 public:
  explicit WordWeights(Tokenizer tok);
  double operator()(const std::string& word) const;

 private:
  Tokenizer tok_;
  std::vector<float> token_;
};

/// Word-statistics routing over a store (BM25-style, Robertson & Zaragoza 2009). The document
/// and the query are both read as words (words_of_tokens): a word belongs to every window that
/// holds its first token. With q ranging over the query's distinct words of weight > 0:
///   score(w)    = sum over q present in w of weight(q) * idf(q) * tf_w(q) / (tf_w(q) + 1.2)
///   coverage(w) = sum over q present in w of weight(q) / sum over q of weight(q)
/// weight = the word weight function (default WordWeights), idf = window_idf() over the store's
/// windows, tf_w = occurrences of q in w. The best window is retrieved when its coverage is at
/// least min_coverage; below that the query is not about the document (a refusal), and every
/// caller — the engine's prefill, route(), `apollo eval` — sees the same decision.
class ApolloRouter {
 public:
  using WordWeightFn = std::function<double(const std::string&)>;

  /// `tok`: the tokenizer the store was built with. `weight`: empty = WordWeights(tok).
  /// Errors: Error{InvalidArgument} for min_coverage outside [0, 1].
  ApolloRouter(const ApolloStore& store, Tokenizer tok, double min_coverage = 0.25, WordWeightFn weight = {});

  /// Route a query given as token ids (control tokens such as BOS are ignored).
  ApolloRoute route(const std::vector<int32_t>& query) const;

  /// Injection entries for a query routed to `window`: seeds are the window positions of the
  /// tokens of the query's words of weight > 0; candidates are the window's entries (store
  /// entries: content tokens) within +-`radius` positions of a seed whose token is not part of a
  /// query word; each distinct token keeps its best coefficient; the `top_k` best are returned as
  /// (token, coefficient), best first.
  std::vector<std::pair<int32_t, float>> entries_for(const std::vector<int32_t>& query, int64_t window, int64_t top_k,
                                                     int64_t radius = 10) const;

  /// The weight of a normalised word (cached for the document's words).
  double word_weight(const std::string& word) const;
  double min_coverage() const { return min_coverage_; }

 private:
  struct Occurrence {
    int32_t word;         ///< word id
    int32_t first, last;  ///< its tokens' positions within the window (last clamped to the window)
  };
  const ApolloStore& store_;
  Tokenizer tok_;
  double min_coverage_;
  WordWeightFn weight_fn_;
  std::unordered_map<std::string, int32_t> word_id_;   ///< the document's distinct words
  std::vector<double> word_weight_;                     ///< by word id
  std::vector<std::vector<std::pair<int32_t, int32_t>>> postings_;  ///< word id -> (window, tf), weight > 0 only
  std::vector<std::vector<Occurrence>> window_words_;   ///< per window, by position
  std::vector<std::vector<int64_t>> window_entries_;    ///< per window: indices into store_.entries
};

}  // namespace larql
