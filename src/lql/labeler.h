// Probe labels for FFN features (`larql label`, docs/cli.md "label"): run each relation's prompt
// for each subject through the model, record which features fire at the last position, and label
// the features that fire for most subjects of one relation and rarely for the others.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lql/session.h"
#include "vindex/labels.h"

namespace larql::lql {

/// One probe relation: a prompt template ("{}" is replaced by the subject) and (subject, object) facts.
struct ProbeRelation {
  std::string name, template_text;
  std::vector<std::pair<std::string, std::string>> facts;
  /// The template with "{}" replaced by `subject`.
  std::string prompt(const std::string& subject) const;
};

/// Parse a relation set (data/relations.json's schema: {"version": 1, "relations": [{"name",
/// "template", "facts": [[subject, object], ...]}]}). Errors: Error{Format} naming `name` and the
/// entry: bad JSON, a template without exactly one "{}", a relation with no facts or given twice.
std::vector<ProbeRelation> parse_relations(const std::string& text, const std::string& name);

struct LabelOptions {
  int top_k = 32;             ///< features that fire per layer and prompt: the top_k largest positive gates
  double min_fraction = 0.5;  ///< a label needs its relation's prompts to fire the feature at least this often
  double min_margin = 0.3;    ///< ... and that fraction to beat every other relation's by this much
  std::function<void(int64_t done, int64_t total)> progress;  ///< after each prompt; may be empty
};

/// Features that fired: fired[r][i] lists the (layer, feature) pairs of relation r's i-th prompt.
using Firings = std::vector<std::vector<std::vector<std::pair<int64_t, int64_t>>>>;

/// The labelling rule, on recorded firings: for each (layer, feature), frac_r = (prompts of r
/// that fired it) / (prompts of r); the label is the r with the largest frac_r (ties: the earlier
/// relation), its score = frac_r - max over the other relations of frac_r'. A feature is labelled
/// when frac_r >= min_fraction and score >= min_margin. Examples: the first 3 subjects that fired it.
vindex::FeatureLabels choose_labels(const std::vector<ProbeRelation>& rels, const Firings& fired, const LabelOptions& opt);

/// Run every prompt (the session's vindex must run a model) and choose the labels. The firing
/// features of a prompt, per layer: the top_k largest positive w_gate[f] · x, x = the FFN input
/// (after the pre-FFN norm) at the last position. Errors: Session::model's; Cancelled.
vindex::FeatureLabels label_features(Session& s, const std::vector<ProbeRelation>& rels, const LabelOptions& opt);

/// Write DIR/feature_labels.json atomically, and when index.json lists checksums, add its SHA-256
/// there (index.json rewritten atomically) so `larql verify` accepts it.
void write_feature_labels(const std::string& dir, const vindex::FeatureLabels& labels);

}  // namespace larql::lql
