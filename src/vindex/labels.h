// feature_labels.json: relation labels of FFN features (docs/vindex-format.md "feature_labels.json"),
// written by `larql label` and read by the LQL executor (SHOW RELATIONS, RELATIONS ONLY, the
// relation column of DESCRIBE / EXPLAIN / SELECT rows).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace larql::vindex {

/// One labelled feature: `relation` is the probe relation whose prompts fire it most selectively.
struct FeatureLabel {
  int64_t layer = 0, feature = 0;
  std::string relation;
  double score = 0;                   ///< in [0, 1]: fraction fired for `relation` minus the best other fraction
  int64_t fires = 0, of = 0;          ///< prompts of `relation` that fired it, prompts of `relation`
  std::vector<std::string> examples;  ///< up to 3 subjects whose prompt fired it
};

/// A relation of the probe set, as recorded in the file.
struct LabelRelation {
  std::string name, template_text;
  int64_t subjects = 0;
};

struct FeatureLabels {
  int64_t version = 1;
  std::string model;
  int64_t top_k = 0;            ///< features counted as firing per layer and prompt (largest positive gate)
  double min_fraction = 0, min_margin = 0;
  std::vector<LabelRelation> relations;
  std::vector<FeatureLabel> features;  ///< sorted by (layer, feature), each pair once

  /// The label of (layer, feature), nullptr when unlabelled. O(log n).
  const FeatureLabel* find(int64_t layer, int64_t feature) const;
};

/// Parse feature_labels.json text. Errors: Error{Format} naming `name`, the key and what is wrong
/// (bad JSON, version != 1, a missing or mistyped key, a negative layer / feature, a score outside
/// [0, 1], a (layer, feature) given twice, a label naming a relation not in "relations").
FeatureLabels parse_feature_labels(const std::string& text, const std::string& name = "feature_labels.json");
/// The JSON text (2-space indent), features sorted by (layer, feature).
std::string serialize_feature_labels(const FeatureLabels& labels);
/// Read DIR/feature_labels.json. Errors: NotFound when absent; parse_feature_labels's.
FeatureLabels read_feature_labels(const std::string& dir);

}  // namespace larql::vindex
