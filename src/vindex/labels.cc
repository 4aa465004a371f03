#include "vindex/labels.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "util/error.h"
#include "util/text_file.h"

namespace larql::vindex {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& name, const std::string& what) {
  throw Error(ErrorKind::Format, name + ": " + what);
}

const json& need(const json& j, const char* key, const std::string& where, const std::string& name) {
  if (!j.is_object() || !j.contains(key)) bad(name, where + ": missing \"" + key + "\"");
  return j.at(key);
}

int64_t need_int(const json& j, const char* key, const std::string& where, const std::string& name) {
  const json& v = need(j, key, where, name);
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    bad(name, where + ": \"" + key + "\" must be a non-negative integer");
  return v.get<int64_t>();
}

double need_num(const json& j, const char* key, const std::string& where, const std::string& name) {
  const json& v = need(j, key, where, name);
  if (!v.is_number()) bad(name, where + ": \"" + key + "\" must be a number");
  return v.get<double>();
}

std::string need_str(const json& j, const char* key, const std::string& where, const std::string& name) {
  const json& v = need(j, key, where, name);
  if (!v.is_string()) bad(name, where + ": \"" + key + "\" must be a string");
  return v.get<std::string>();
}

}  // namespace

const FeatureLabel* FeatureLabels::find(int64_t layer, int64_t feature) const {
  auto it = std::lower_bound(features.begin(), features.end(), std::make_pair(layer, feature),
                             [](const FeatureLabel& a, const std::pair<int64_t, int64_t>& b) {
                               return a.layer != b.first ? a.layer < b.first : a.feature < b.second;
                             });
  return it != features.end() && it->layer == layer && it->feature == feature ? &*it : nullptr;
}

FeatureLabels parse_feature_labels(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(name, std::string("not JSON: ") + e.what());
  }
  FeatureLabels out;
  out.version = need_int(j, "version", "top level", name);
  if (out.version != 1) bad(name, "version " + std::to_string(out.version) + " is not supported (1 is)");
  out.model = need_str(j, "model", "top level", name);
  out.top_k = need_int(j, "top_k", "top level", name);
  out.min_fraction = need_num(j, "min_fraction", "top level", name);
  out.min_margin = need_num(j, "min_margin", "top level", name);
  const json& rels = need(j, "relations", "top level", name);
  if (!rels.is_array()) bad(name, "\"relations\" must be an array");
  std::set<std::string> names;
  for (size_t i = 0; i < rels.size(); ++i) {
    const std::string where = "relations[" + std::to_string(i) + "]";
    LabelRelation r;
    r.name = need_str(rels[i], "name", where, name);
    r.template_text = need_str(rels[i], "template", where, name);
    r.subjects = need_int(rels[i], "subjects", where, name);
    if (r.name.empty()) bad(name, where + ": empty name");
    if (!names.insert(r.name).second) bad(name, where + ": relation \"" + r.name + "\" given twice");
    out.relations.push_back(std::move(r));
  }
  const json& feats = need(j, "features", "top level", name);
  if (!feats.is_array()) bad(name, "\"features\" must be an array");
  for (size_t i = 0; i < feats.size(); ++i) {
    const std::string where = "features[" + std::to_string(i) + "]";
    const json& f = feats[i];
    FeatureLabel l;
    l.layer = need_int(f, "layer", where, name);
    l.feature = need_int(f, "feature", where, name);
    l.relation = need_str(f, "relation", where, name);
    l.score = need_num(f, "score", where, name);
    l.fires = need_int(f, "fires", where, name);
    l.of = need_int(f, "of", where, name);
    if (!(l.score >= 0.0 && l.score <= 1.0)) bad(name, where + ": score " + std::to_string(l.score) + " is outside [0, 1]");
    if (!names.count(l.relation)) bad(name, where + ": relation \"" + l.relation + "\" is not in \"relations\"");
    if (l.fires > l.of) bad(name, where + ": fires " + std::to_string(l.fires) + " > of " + std::to_string(l.of));
    if (f.contains("examples")) {
      const json& ex = f.at("examples");
      if (!ex.is_array()) bad(name, where + ": \"examples\" must be an array of strings");
      for (const auto& e : ex) {
        if (!e.is_string()) bad(name, where + ": \"examples\" must be an array of strings");
        l.examples.push_back(e.get<std::string>());
      }
    }
    out.features.push_back(std::move(l));
  }
  std::sort(out.features.begin(), out.features.end(), [](const FeatureLabel& a, const FeatureLabel& b) {
    return a.layer != b.layer ? a.layer < b.layer : a.feature < b.feature;
  });
  for (size_t i = 1; i < out.features.size(); ++i)
    if (out.features[i].layer == out.features[i - 1].layer && out.features[i].feature == out.features[i - 1].feature)
      bad(name, "layer " + std::to_string(out.features[i].layer) + " feature " + std::to_string(out.features[i].feature) +
                    " is labelled twice");
  return out;
}

std::string serialize_feature_labels(const FeatureLabels& labels) {
  json rels = json::array(), feats = json::array();
  for (const auto& r : labels.relations) rels.push_back({{"name", r.name}, {"template", r.template_text}, {"subjects", r.subjects}});
  auto sorted = labels.features;
  std::sort(sorted.begin(), sorted.end(), [](const FeatureLabel& a, const FeatureLabel& b) {
    return a.layer != b.layer ? a.layer < b.layer : a.feature < b.feature;
  });
  for (const auto& f : sorted)
    feats.push_back({{"layer", f.layer}, {"feature", f.feature}, {"relation", f.relation}, {"score", f.score},
                     {"fires", f.fires}, {"of", f.of}, {"examples", f.examples}});
  json j = {{"version", labels.version}, {"model", labels.model},       {"top_k", labels.top_k},
            {"min_fraction", labels.min_fraction}, {"min_margin", labels.min_margin},
            {"relations", rels},           {"features", feats}};
  return j.dump(2) + "\n";
}

FeatureLabels read_feature_labels(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "feature_labels.json").string();
  if (!std::filesystem::exists(path)) throw Error(ErrorKind::NotFound, path + ": no such file (run `larql label`)");
  return parse_feature_labels(read_text_file(path, "feature labels"), path);
}

}  // namespace larql::vindex
