#include "kv/apollo/router.h"

#include <algorithm>
#include <map>
#include <set>

#include "kv/apollo/words.h"
#include "util/error.h"

namespace larql {

WordWeights::WordWeights(Tokenizer tok) : tok_(std::move(tok)), token_(content_weights(tok_)) {}

double WordWeights::operator()(const std::string& word) const {
  double w = 0;
  for (int32_t t : tok_.encode(" " + word, false, false)) w += token_[static_cast<size_t>(t)];
  return w;
}

ApolloRouter::ApolloRouter(const ApolloStore& store, Tokenizer tok, double min_coverage, WordWeightFn weight)
    : store_(store),
      tok_(std::move(tok)),
      min_coverage_(min_coverage),
      weight_fn_(weight ? std::move(weight) : WordWeightFn(WordWeights(tok_))),
      window_words_(store.windows.size()),
      window_entries_(store.windows.size()) {
  if (!(min_coverage >= 0 && min_coverage <= 1))
    throw Error(ErrorKind::InvalidArgument, "apollo: min_coverage must lie in [0, 1]");
  for (size_t i = 0; i < store_.entries.size(); ++i)
    window_entries_[static_cast<size_t>(store_.entries[i].window)].push_back(static_cast<int64_t>(i));
  const std::vector<TokenWord> words = words_of_tokens(tok_, store_.doc);  // sorted by first token
  std::vector<int32_t> ids(words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    auto [it, fresh] = word_id_.emplace(words[i].text, static_cast<int32_t>(word_weight_.size()));
    if (fresh) word_weight_.push_back(weight_fn_(words[i].text));
    ids[i] = it->second;
  }
  postings_.resize(word_weight_.size());
  for (size_t w = 0; w < store_.windows.size(); ++w) {
    const int64_t start = store_.windows[w].start, end = start + store_.windows[w].len;
    auto lo = std::lower_bound(words.begin(), words.end(), start, [](const TokenWord& a, int64_t p) { return a.first < p; });
    std::map<int32_t, int32_t> tf;
    for (auto it = lo; it != words.end() && it->first < end; ++it) {
      const int32_t id = ids[static_cast<size_t>(it - words.begin())];
      window_words_[w].push_back({id, static_cast<int32_t>(it->first - start), static_cast<int32_t>(std::min(it->last, end - 1) - start)});
      if (word_weight_[static_cast<size_t>(id)] > 0) ++tf[id];
    }
    for (const auto& [id, n] : tf) postings_[static_cast<size_t>(id)].push_back({static_cast<int32_t>(w), n});
  }
}

double ApolloRouter::word_weight(const std::string& word) const {
  auto it = word_id_.find(word);
  return it != word_id_.end() ? word_weight_[static_cast<size_t>(it->second)] : weight_fn_(word);
}

ApolloRoute ApolloRouter::route(const std::vector<int32_t>& query) const {
  const auto n_win = static_cast<int64_t>(store_.windows.size());
  std::vector<double> score(static_cast<size_t>(n_win), 0.0), found(static_cast<size_t>(n_win), 0.0);
  std::set<std::string> distinct;
  for (TokenWord& w : words_of_tokens(tok_, query)) distinct.insert(std::move(w.text));
  double total = 0;
  for (const std::string& q : distinct) {
    const double wt = word_weight(q);
    if (wt <= 0) continue;
    total += wt;
    auto it = word_id_.find(q);
    if (it == word_id_.end()) continue;
    const auto& post = postings_[static_cast<size_t>(it->second)];
    const double idf = window_idf(static_cast<int64_t>(post.size()), n_win);
    for (const auto& [w, tf] : post) {
      score[static_cast<size_t>(w)] += wt * idf * tf / (tf + 1.2);
      found[static_cast<size_t>(w)] += wt;
    }
  }
  ApolloRoute r;
  for (int64_t w = 0; w < n_win; ++w)
    if (score[static_cast<size_t>(w)] > 0) r.ranked.push_back(w);
  std::stable_sort(r.ranked.begin(), r.ranked.end(),
                   [&](int64_t a, int64_t b) { return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)]; });
  if (!r.ranked.empty()) {
    r.best = r.ranked.front();
    r.score = score[static_cast<size_t>(r.best)];
    r.coverage = total > 0 ? found[static_cast<size_t>(r.best)] / total : 0.0;
    if (r.coverage >= min_coverage_) r.window = r.best;
  }
  return r;
}

std::vector<std::pair<int32_t, float>> ApolloRouter::entries_for(const std::vector<int32_t>& query, int64_t window,
                                                                 int64_t top_k, int64_t radius) const {
  std::set<int32_t> q;  // ids of the query's words that occur in the document
  for (const TokenWord& w : words_of_tokens(tok_, query)) {
    auto it = word_id_.find(w.text);
    if (it != word_id_.end()) q.insert(it->second);
  }
  const auto len = static_cast<size_t>(store_.windows.at(static_cast<size_t>(window)).len);
  std::vector<char> in_query(len, 0);
  std::vector<int32_t> seeds;
  for (const Occurrence& o : window_words_[static_cast<size_t>(window)]) {
    if (!q.count(o.word)) continue;
    for (int32_t p = o.first; p <= o.last; ++p) {
      in_query[static_cast<size_t>(p)] = 1;
      if (word_weight_[static_cast<size_t>(o.word)] > 0) seeds.push_back(p);
    }
  }
  std::map<int32_t, float> best;
  for (int64_t e : window_entries_[static_cast<size_t>(window)]) {
    const ApolloEntry& en = store_.entries[static_cast<size_t>(e)];
    if (in_query[static_cast<size_t>(en.position)]) continue;
    const bool near = std::any_of(seeds.begin(), seeds.end(),
                                  [&](int32_t s) { return std::abs(static_cast<int64_t>(s) - en.position) <= radius; });
    if (!near) continue;
    float& b = best[en.token];
    b = std::max(b, en.coefficient);
  }
  std::vector<std::pair<int32_t, float>> out(best.begin(), best.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (static_cast<int64_t>(out.size()) > top_k) out.resize(static_cast<size_t>(top_k));
  return out;
}

}  // namespace larql
