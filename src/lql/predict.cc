#include "lql/predict.h"

#include <algorithm>
#include <cmath>

#include "lql/edits.h"
#include "lql/exec_internal.h"
#include "util/error.h"

namespace larql::lql {

double Prediction::probability(int64_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= logits.size())
    throw Error(ErrorKind::InvalidArgument, "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                                std::to_string(logits.size()) + ")");
  // As INFER (exec_infer.cc softmax, predictions): p = exp(x - max) / sum in double, then the mix.
  const double p = std::exp(static_cast<double>(logits[static_cast<size_t>(id)]) - max_logit) / sum_exp;
  if (id == knn_target) return knn_confidence + (1 - knn_confidence) * p;
  return (1 - knn_confidence) * p;
}

int64_t Prediction::top1() const {
  // The best model token other than the KNN target: the largest logit, ties to the lower id.
  int64_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (static_cast<int64_t>(i) == knn_target) continue;
    if (best < 0 || logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int64_t>(i);
  }
  if (knn_target < 0) return best;
  if (best < 0) return knn_target;
  return probability(knn_target) >= probability(best) ? knn_target : best;
}

Prediction predict(Session& s, const std::string& prompt, bool verify) {
  const detail::ForwardRun run = detail::run_forward(s, prompt, false, "INFER");
  Prediction out;
  out.logits = run.last_logits;
  double mx = -INFINITY, sum = 0;
  for (float x : out.logits) mx = std::max(mx, static_cast<double>(x));
  for (float x : out.logits) sum += std::exp(static_cast<double>(x) - mx);
  out.max_logit = mx;
  out.sum_exp = sum;
  if (auto m = detail::knn_lookup(s, run, prompt, verify); m && !m->refused) {
    const KnnFact& f = s.edits().knn[m->fact];
    out.knn_target = f.target_id;
    out.knn_confidence = std::clamp(f.confidence, 0.0, 1.0);
  }
  return out;
}

std::string fact_prompt(const std::string& relation, const std::string& entity) {
  return detail::canonical_prompt(relation, entity);
}

}  // namespace larql::lql
