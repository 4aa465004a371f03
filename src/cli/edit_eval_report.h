// The measures of `larql edit-eval` (docs/cli.md "edit-eval") as JSON, and the text report
// printed from that JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/edit_eval_set.h"

namespace larql::cli {

/// One fact measured in one state of the model (after its own edit, or re-tested later).
struct FactResult {
  int64_t top1 = -1;                   ///< INFER's top-1 on the canonical prompt
  int64_t old_id = -1;                 ///< the base model's top-1 there (the "old answer")
  double p_target = NAN, p_old = NAN;  ///< INFER's probability of the target and of old_id
  std::vector<int64_t> para_top1;      ///< top-1 on each paraphrase
  std::vector<int64_t> neigh_top1;     ///< top-1 on each neighbourhood prompt
  std::vector<int64_t> neigh_base;     ///< the base model's top-1 on each neighbourhood prompt
  // The fact's INSERT (NaN / -1 when not inserted in this phase).
  double insert_ms = NAN;              ///< wall time of the INSERT statement
  double insert_p = NAN;               ///< INSERT's own `probability` (COMPOSE: P(target) after balancing)
  int64_t layer = -1, feature = -1;
  int64_t at_insert_top1 = -1;         ///< sequential: top-1 on the canonical prompt right after its INSERT
  std::string refused;                 ///< INSERT's error where it refused the fact (nothing installed; measured as is)
};

/// The measures of a whole state: real-fact retention, held-out perplexity, fluency.
struct GlobalResult {
  std::vector<int64_t> real_changed;   ///< indices of the real-fact prompts whose top-1 changed
  int64_t real_total = 0;
  double perplexity = NAN;
  std::vector<std::vector<int32_t>> fluency_ids;  ///< the greedy continuations
};

/// `x` as JSON, null when NaN.
nlohmann::ordered_json num(double x);
/// a / b, null when b is 0.
nlohmann::ordered_json ratio(int64_t a, int64_t b);
/// {"entropy": mean ngram_entropy over the continuations (null without any), "continuations": ids}.
nlohmann::ordered_json fluency_json(const std::vector<std::vector<int32_t>>& ids);
/// {"n", "mean", "median", "p90", "max"} of INSERT times in ms (NaNs skipped; nulls when none).
nlohmann::ordered_json ms_json(const std::vector<double>& ms);
/// Over facts[0..n): efficacy (top-1 = target), efficacy_prob (P(target) > P(old)), paraphrase
/// (paraphrase prompts with the target top-1, over all of them), neighbourhood (neighbourhood
/// prompts whose top-1 is the base's, over all of them); efficacy_at_insert when measured.
nlohmann::ordered_json summary_json(const std::vector<FactResult>& res, size_t n, const std::vector<EditFact>& facts);
/// summary_json per relation, in order of first appearance: {relation: {facts, ...}}.
nlohmann::ordered_json per_relation_json(const std::vector<FactResult>& res, size_t n, const std::vector<EditFact>& facts);
/// One fact's record: id, relation, target_id, old_id, top1, p_target, p_old, paraphrase_top1,
/// neighbourhood_top1, neighbourhood_base, and the INSERT's insert_ms, layer, feature,
/// insert_probability, at_insert_top1 when known.
nlohmann::ordered_json fact_json(const EditFact& f, const FactResult& r);
/// real_retention (1 - changed / total), real_changed, perplexity, perplexity_change (relative
/// to `base_ppl`), fluency (fluency_json), fluency_change (entropy minus the base's).
nlohmann::ordered_json global_json(const GlobalResult& g, double base_ppl, const std::vector<std::vector<int32_t>>& base_fluency);

/// The text report of edit-eval's JSON document, on stdout.
void print_report(const nlohmann::ordered_json& out);

}  // namespace larql::cli
