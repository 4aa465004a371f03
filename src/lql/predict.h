// INFER's answer as a whole distribution, for tools that measure edits (`larql edit-eval`,
// docs/cli.md): the same forward pass and KNN store INFER uses (docs/lql.md "What runs"), with
// every token's probability rather than the top rows of a table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lql/session.h"

namespace larql::lql {

/// What INFER computes for one prompt on the session's model (its edits included).
struct Prediction {
  std::vector<float> logits;   ///< [vocab]: the model's logits at the prompt's last position
  int64_t knn_target = -1;     ///< the target of the KNN fact that answers (-1: none)
  double knn_confidence = 0;   ///< that fact's confidence c (0 when none)
  double max_logit = 0;        ///< max over logits
  double sum_exp = 0;          ///< sum over v of exp(logits[v] - max_logit), in double

  /// INFER's `probability` of token `id`: (1 - c) softmax(logits)[id], plus c when id is the
  /// KNN target — bit for bit the number INFER's table shows for that token.
  /// Error{InvalidArgument} for an id outside the vocabulary.
  double probability(int64_t id) const;
  /// INFER's rank-1 token: the KNN target when its probability is at least the best other
  /// token's (INFER lists it first on a tie), else the largest logit (ties to the lower id).
  int64_t top1() const;
};

/// The prediction for `prompt` (BOS added) as `INFER "prompt"` with VERIFY ON (`verify`: the KNN
/// entity check) computes it. Errors: run_forward's (no weights, an empty prompt, context).
Prediction predict(Session& s, const std::string& prompt, bool verify = true);

/// The prompt INSERT installs a fact on: "The {relation, '-' and '_' read as blanks} of {entity}
/// is" (docs/lql.md "Knowledge edits").
std::string fact_prompt(const std::string& relation, const std::string& entity);

}  // namespace larql::lql
