// Relation labels in LQL (docs/lql.md "Relation labels"): SHOW RELATIONS, and the relation column
// and RELATIONS ONLY filter of DESCRIBE / EXPLAIN / WALK / SELECT rows, from the vindex's
// feature_labels.json (`larql label`).
#include <algorithm>
#include <map>
#include <set>

#include "lql/exec_internal.h"
#include "util/error.h"

namespace larql::lql::detail {

const vindex::FeatureLabels& require_labels(Session& s, const std::string& what, Pos pos) {
  const auto* l = s.labels();
  if (!l)
    throw Error(ErrorKind::Unsupported, what + " at " + pos.str() + " needs relation labels: " + s.path() +
                                            " has no feature_labels.json (run `larql label " + s.path() + "` first)");
  return *l;
}

Cell relation_cell(Session& s, int64_t layer, int64_t feature) {
  const auto* labels = s.labels();
  const auto* l = labels ? labels->find(layer, feature) : nullptr;
  return l ? Cell{l->relation} : Cell{};
}

void add_relation_column(Session& s, Table& t) {
  if (!s.labels()) return;
  const int li = t.column("layer"), fi = t.column("feature");
  if (li < 0 || fi < 0 || t.column("relation") >= 0) return;
  const int tok = t.column("token");
  const size_t at = static_cast<size_t>(tok >= 0 ? tok + 1 : static_cast<int>(t.columns.size()));
  t.columns.insert(t.columns.begin() + static_cast<std::ptrdiff_t>(at), Column{"relation"});
  for (auto& r : t.rows) {
    Cell c;
    if (const auto* l = std::get_if<int64_t>(&r[static_cast<size_t>(li)]))
      if (const auto* f = std::get_if<int64_t>(&r[static_cast<size_t>(fi)])) c = relation_cell(s, *l, *f);
    r.insert(r.begin() + static_cast<std::ptrdiff_t>(at), std::move(c));
  }
}

void keep_labelled_rows(Table& t) {
  const int ri = t.column("relation");
  if (ri < 0) return;
  std::erase_if(t.rows, [&](const auto& r) { return std::holds_alternative<std::monostate>(r[static_cast<size_t>(ri)]); });
}

Table exec_show_relations(Session& s, const ShowStmt& st, Pos pos) {
  const auto& labels = require_labels(s, "SHOW RELATIONS", pos);
  if (st.layer) check_layer(s, *st.layer, st.layer_pos);
  std::vector<const vindex::FeatureLabel*> feats;
  for (const auto& f : labels.features)
    if (!st.layer || f.layer == *st.layer) feats.push_back(&f);
  Table t;
  t.statement = "SHOW";
  t.title = "Relations of " + s.path() + (st.layer ? " at layer " + std::to_string(*st.layer) : std::string()) + " (" +
            std::to_string(feats.size()) + " labelled features; feature_labels.json, top_k " +
            std::to_string(labels.top_k) + ")";
  auto token_of = [&](const vindex::FeatureLabel& f) -> Cell {
    auto top = feature_top(s, f.layer, f.feature);
    return top ? Cell{s.token_piece(top->first)} : Cell{};
  };
  if (st.detail == Detail::Raw || st.detail == Detail::Verbose) {
    // One row per labelled feature: RAW in the file's (layer, feature) order, VERBOSE by relation
    // (the file's relation order), then score descending.
    t.columns = {{"layer", Column::Type::Int}, {"feature", Column::Type::Int}, {"relation"},
                 {"score", Column::Type::Float, 3}, {"fires", Column::Type::Int}, {"of", Column::Type::Int}};
    if (st.detail == Detail::Verbose) t.columns.push_back(Column{"token", Column::Type::Text, 4, true});
    if (st.with_examples || st.detail == Detail::Raw) t.columns.push_back({"examples", Column::Type::List});
    if (st.detail == Detail::Verbose) {
      std::map<std::string, size_t> order;
      for (size_t i = 0; i < labels.relations.size(); ++i) order[labels.relations[i].name] = i;
      std::stable_sort(feats.begin(), feats.end(), [&](const auto* a, const auto* b) {
        return a->relation != b->relation ? order[a->relation] < order[b->relation] : a->score > b->score;
      });
    }
    for (const auto* f : feats) {
      std::vector<Cell> row = {f->layer, f->feature, f->relation, f->score, f->fires, f->of};
      if (st.detail == Detail::Verbose) row.push_back(token_of(*f));
      if (st.with_examples || st.detail == Detail::Raw) row.push_back(f->examples);
      t.rows.push_back(std::move(row));
    }
  } else {
    // One row per relation of the probe set (those with no labelled feature too).
    t.columns = {{"relation"}, {"features", Column::Type::Int}};
    if (st.detail != Detail::Brief) {
      t.columns.push_back({"layers", Column::Type::List});
      t.columns.push_back({"best_score", Column::Type::Float, 3});
      t.columns.push_back({"tokens", Column::Type::List});
      t.columns.push_back({"prompt"});
    }
    if (st.with_examples) t.columns.push_back({"examples", Column::Type::List});
    for (const auto& r : labels.relations) {
      int64_t n = 0;
      double best = 0;
      std::set<int64_t> layers;
      std::map<std::string, int64_t> tokens;
      std::vector<std::string> examples;
      for (const auto* f : feats) {
        if (f->relation != r.name) continue;
        ++n;
        best = std::max(best, f->score);
        layers.insert(f->layer);
        if (auto top = feature_top(s, f->layer, f->feature)) ++tokens[s.token_text(top->first)];
        for (const auto& e : f->examples)
          if (examples.size() < 5 && std::find(examples.begin(), examples.end(), e) == examples.end()) examples.push_back(e);
      }
      std::vector<Cell> row = {r.name, n};
      if (st.detail != Detail::Brief) {
        std::vector<std::string> ls;
        for (int64_t l : layers) ls.push_back("L" + std::to_string(l));
        // The tokens its features write most often (down_meta's top token), up to 3.
        std::vector<std::pair<std::string, int64_t>> tv(tokens.begin(), tokens.end());
        std::stable_sort(tv.begin(), tv.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
        std::vector<std::string> top;
        for (size_t i = 0; i < tv.size() && i < 3; ++i) top.push_back(tv[i].first);
        row.push_back(ls);
        row.push_back(n ? Cell{best} : Cell{});
        row.push_back(top);
        row.push_back(r.template_text);
      }
      if (st.with_examples) row.push_back(examples);
      t.rows.push_back(std::move(row));
    }
  }
  if (st.limit) limit_rows(t, *st.limit);
  if (feats.empty()) t.notes.push_back("(no labelled features" + (st.layer ? " at this layer)" : std::string(")")));
  return t;
}

}  // namespace larql::lql::detail
