#include "kv/apollo/router.h"

#include <algorithm>
#include <map>
#include <set>

namespace larql {

ApolloRouter::ApolloRouter(const ApolloStore& store, std::vector<float> weights)
    : store_(store), weights_(std::move(weights)), window_entries_(store.windows.size()) {
  for (size_t i = 0; i < store_.entries.size(); ++i)
    window_entries_[static_cast<size_t>(store_.entries[i].window)].push_back(static_cast<int64_t>(i));
  for (size_t w = 0; w < store_.windows.size(); ++w) {
    std::map<int32_t, int32_t> tf;
    for (int64_t e : window_entries_[w]) ++tf[store_.entries[static_cast<size_t>(e)].token];
    for (const auto& [t, n] : tf) postings_[t].push_back({static_cast<int32_t>(w), n});
  }
}

float ApolloRouter::weight(int32_t token) const {
  return token >= 0 && static_cast<size_t>(token) < weights_.size() ? weights_[static_cast<size_t>(token)] : 0.0f;
}

ApolloRoute ApolloRouter::route(const std::vector<int32_t>& query) const {
  const auto n_win = static_cast<int64_t>(store_.windows.size());
  std::vector<double> score(static_cast<size_t>(n_win), 0.0), found(static_cast<size_t>(n_win), 0.0);
  double total = 0;
  for (int32_t t : std::set<int32_t>(query.begin(), query.end())) {
    const double wt = weight(t);
    if (wt <= 0) continue;
    total += wt;
    auto it = postings_.find(t);
    if (it == postings_.end()) continue;
    const double idf = window_idf(static_cast<int64_t>(it->second.size()), n_win);
    for (const auto& [w, tf] : it->second) {
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
    r.window = r.ranked.front();
    r.score = score[static_cast<size_t>(r.window)];
    r.coverage = total > 0 ? found[static_cast<size_t>(r.window)] / total : 0.0;
  }
  return r;
}

std::vector<std::pair<int32_t, float>> ApolloRouter::entries_for(const std::vector<int32_t>& query, int64_t window,
                                                                 int64_t top_k, int64_t radius) const {
  const std::set<int32_t> q(query.begin(), query.end());
  const auto& idx = window_entries_.at(static_cast<size_t>(window));
  std::vector<int32_t> seeds;
  for (int64_t e : idx)
    if (q.count(store_.entries[static_cast<size_t>(e)].token)) seeds.push_back(store_.entries[static_cast<size_t>(e)].position);
  std::map<int32_t, float> best;
  for (int64_t e : idx) {
    const ApolloEntry& en = store_.entries[static_cast<size_t>(e)];
    if (q.count(en.token)) continue;
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
