#include "lql/labeler.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "compute/top_k_rows.h"
#include "lql/exec_internal.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "vindex/index.h"
#include "vindex/sha256.h"

namespace larql::lql {

using nlohmann::json;

std::string ProbeRelation::prompt(const std::string& subject) const {
  std::string out = template_text;
  const size_t at = out.find("{}");
  if (at != std::string::npos) out.replace(at, 2, subject);
  return out;
}

std::vector<ProbeRelation> parse_relations(const std::string& text, const std::string& name) {
  auto bad = [&](const std::string& what) -> void { throw Error(ErrorKind::Format, name + ": " + what); };
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(std::string("not JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("relations") || !j["relations"].is_array()) bad("missing the \"relations\" array");
  std::vector<ProbeRelation> out;
  std::set<std::string> names;
  for (size_t i = 0; i < j["relations"].size(); ++i) {
    const json& r = j["relations"][i];
    const std::string where = "relations[" + std::to_string(i) + "]";
    if (!r.is_object() || !r.contains("name") || !r["name"].is_string() || !r.contains("template") ||
        !r["template"].is_string() || !r.contains("facts") || !r["facts"].is_array())
      bad(where + ": needs \"name\" (string), \"template\" (string) and \"facts\" (array)");
    ProbeRelation p;
    p.name = r["name"].get<std::string>();
    p.template_text = r["template"].get<std::string>();
    const size_t at = p.template_text.find("{}");
    if (at == std::string::npos || p.template_text.find("{}", at + 2) != std::string::npos)
      bad(where + " (" + p.name + "): the template must hold \"{}\" exactly once");
    if (p.name.empty() || !names.insert(p.name).second) bad(where + ": empty or repeated name \"" + p.name + "\"");
    for (size_t k = 0; k < r["facts"].size(); ++k) {
      const json& f = r["facts"][k];
      if (!f.is_array() || f.size() != 2 || !f[0].is_string() || !f[1].is_string() || f[0].get<std::string>().empty())
        bad(where + ".facts[" + std::to_string(k) + "]: needs [subject, object], two non-empty strings");
      p.facts.emplace_back(f[0].get<std::string>(), f[1].get<std::string>());
    }
    if (p.facts.empty()) bad(where + " (" + p.name + "): no facts");
    out.push_back(std::move(p));
  }
  if (out.empty()) bad("no relations");
  return out;
}

vindex::FeatureLabels choose_labels(const std::vector<ProbeRelation>& rels, const Firings& fired, const LabelOptions& opt) {
  if (fired.size() != rels.size())
    throw Error(ErrorKind::InvalidArgument, "choose_labels: " + std::to_string(fired.size()) + " firing lists for " +
                                                std::to_string(rels.size()) + " relations");
  // (layer, feature) -> per relation: count and the subjects that fired it.
  std::map<std::pair<int64_t, int64_t>, std::vector<std::vector<size_t>>> hits;
  for (size_t r = 0; r < rels.size(); ++r)
    for (size_t i = 0; i < fired[r].size(); ++i) {
      std::set<std::pair<int64_t, int64_t>> once(fired[r][i].begin(), fired[r][i].end());
      for (const auto& lf : once) {
        auto& v = hits[lf];
        if (v.empty()) v.resize(rels.size());
        v[r].push_back(i);
      }
    }
  vindex::FeatureLabels out;
  out.top_k = opt.top_k;
  out.min_fraction = opt.min_fraction;
  out.min_margin = opt.min_margin;
  for (size_t r = 0; r < rels.size(); ++r)
    out.relations.push_back({rels[r].name, rels[r].template_text, static_cast<int64_t>(fired[r].size())});
  for (const auto& [lf, per] : hits) {
    size_t best = 0;
    double best_frac = -1, second = 0;
    std::vector<double> frac(rels.size(), 0.0);
    for (size_t r = 0; r < rels.size(); ++r) {
      frac[r] = fired[r].empty() ? 0.0 : static_cast<double>(per[r].size()) / static_cast<double>(fired[r].size());
      if (frac[r] > best_frac) {
        best_frac = frac[r];
        best = r;
      }
    }
    for (size_t r = 0; r < rels.size(); ++r)
      if (r != best) second = std::max(second, frac[r]);
    const double score = best_frac - second;
    if (best_frac < opt.min_fraction || score < opt.min_margin) continue;
    vindex::FeatureLabel l;
    l.layer = lf.first;
    l.feature = lf.second;
    l.relation = rels[best].name;
    l.score = score;
    l.fires = static_cast<int64_t>(per[best].size());
    l.of = static_cast<int64_t>(fired[best].size());
    for (size_t i = 0; i < per[best].size() && l.examples.size() < 3; ++i)
      l.examples.push_back(rels[best].facts[per[best][i]].first);
    out.features.push_back(std::move(l));
  }
  return out;
}

vindex::FeatureLabels label_features(Session& s, const std::vector<ProbeRelation>& rels, const LabelOptions& opt) {
  if (opt.top_k < 1) throw Error(ErrorKind::InvalidArgument, "label: top_k must be at least 1");
  s.model("larql label");  // refuse a vindex without weights before any work
  int64_t total = 0, done = 0;
  for (const auto& r : rels) total += static_cast<int64_t>(r.facts.size());
  Firings fired(rels.size());
  const int64_t layers = static_cast<int64_t>(s.index().layers.size());
  for (size_t r = 0; r < rels.size(); ++r)
    for (const auto& [subject, object] : rels[r].facts) {
      const detail::ForwardRun run = detail::run_forward(s, rels[r].prompt(subject), false, "larql label");
      std::vector<std::pair<int64_t, int64_t>> on;
      for (int64_t l = 0; l < layers && l < static_cast<int64_t>(run.rows.size()); ++l) {
        s.check_cancel();
        const TensorView g = s.gate(l);
        compute::TopKOptions to;
        to.top_k = static_cast<int>(std::min<int64_t>(opt.top_k, g.rows));
        for (const auto& h : compute::top_k_rows(s.pool(), g, run.rows[static_cast<size_t>(l)].ffn_in.data(), 1, to))
          if (h.score > 0.0f) on.emplace_back(l, h.row);  // largest signed gates; padding scores 0
      }
      fired[r].push_back(std::move(on));
      if (opt.progress) opt.progress(++done, total);
    }
  auto out = choose_labels(rels, fired, opt);
  out.model = s.index().model;
  return out;
}

void write_feature_labels(const std::string& dir, const vindex::FeatureLabels& labels) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "feature_labels.json").string();
  const std::string text = vindex::serialize_feature_labels(labels);
  write_file_atomic(path, text, "feature_labels.json");
  auto ix = vindex::read_index(dir);
  if (!ix.checksums.empty()) {
    ix.checksums["feature_labels.json"] = vindex::sha256_hex(text.data(), text.size());
    vindex::write_index(dir, ix);
  }
}

}  // namespace larql::lql
