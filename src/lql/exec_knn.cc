// The statements that read the vindex alone (gate KNN and down_meta): DESCRIBE, WALK on a vindex
// without weights, SELECT, SHOW FEATURES / ENTITIES.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "compute/ops.h"
#include "lql/exec_internal.h"
#include "model/ffn_features.h"
#include "quant/quant.h"
#include "util/error.h"

namespace larql::lql::detail {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Words too common to be an entity's edge (DESCRIBE drops them unless RAW).
const std::set<std::string>& stop_words() {
  static const std::set<std::string> w = {
      "the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was", "one", "our", "out",
      "has", "his", "how", "its", "may", "new", "now", "old", "see", "two", "who", "did", "get", "him", "let", "say",
      "she", "too", "use", "that", "with", "have", "this", "will", "your", "from", "they", "been", "were", "what",
      "when", "which", "their", "there", "would", "about", "into", "than", "then", "them", "these", "some", "also",
      "more", "most", "such", "only", "other", "very", "just", "over", "is", "of", "to", "in", "on", "at", "by",
      "or", "as", "an", "be", "it", "a", "de", "la", "le", "el", "en", "der", "die", "das", "und", "par", "aux",
      "che", "del", "des", "les", "von", "per", "con", "por", "para", "est", "une", "ein", "eine"};
  return w;
}

// A word worth showing as an edge: 2-25 bytes, at least 2/3 of them ASCII letters, at least
// one letter, not a stop word.
bool content_token(const std::string& t) {
  if (t.size() < 2 || t.size() > 25) return false;
  size_t letters = 0;
  for (unsigned char c : t) {
    if (c < 0x80 && !std::isalpha(c) && c != '\'' && c != '-' && c != '.') return false;
    letters += std::isalpha(c) != 0;
  }
  if (letters == 0 || letters * 3 < t.size() * 2) return false;
  return !stop_words().count(lower(t));
}

// A token that looks like a named entity: an upper-case first letter, all letters, >= 3 bytes.
bool entity_token(const std::string& t) {
  if (t.size() < 3 || !std::isupper(static_cast<unsigned char>(t[0]))) return false;
  for (unsigned char c : t)
    if (!std::isalpha(c)) return false;
  return !stop_words().count(lower(t));
}

}  // namespace

Table feature_rows(Session& s, const std::vector<int64_t>& layers) {
  Table t;
  t.columns = {{"layer", Column::Type::Int},  {"feature", Column::Type::Int},         Column{"token", Column::Type::Text, 4, true},
               {"token_id", Column::Type::Int}, {"score", Column::Type::Float, 4}, {"also", Column::Type::List}};
  for (int64_t l : layers) {
    s.check_cancel();
    const int64_t nf = s.index().layers[static_cast<size_t>(l)].num_features;
    for (int64_t f = 0; f < nf; ++f) {
      auto top = feature_top(s, l, f);
      if (!top) {
        t.rows.push_back({l, f, Cell{}, Cell{}, Cell{}, std::vector<std::string>{}});
        continue;
      }
      t.rows.push_back({l, f, s.token_piece(top->first), top->first, top->second, feature_tokens(s, l, f, 1, 4)});
    }
  }
  add_expert_column(s, t);
  add_relation_column(s, t);
  return t;
}

namespace {

Table entity_rows(Session& s, const std::vector<int64_t>& layers) {
  std::map<std::string, std::pair<int64_t, double>> count;  // text -> (features, max c_score)
  std::map<std::string, std::set<int64_t>> where;
  for (int64_t l : layers) {
    const int64_t nf = s.index().layers[static_cast<size_t>(l)].num_features;
    for (int64_t f = 0; f < nf; ++f)
      if (auto top = feature_top(s, l, f)) {
        const std::string tok = s.token_text(top->first);
        if (!entity_token(tok)) continue;
        auto& c = count[tok];
        c.second = c.first == 0 ? top->second : std::max(c.second, top->second);
        ++c.first;
        where[tok].insert(l);
      }
  }
  Table t;
  t.columns = {{"entity"}, {"features", Column::Type::Int}, {"max_score", Column::Type::Float, 4},
               {"layers", Column::Type::List}};
  for (const auto& [tok, c] : count) {
    std::vector<std::string> ls;
    for (int64_t l : where[tok]) ls.push_back("L" + std::to_string(l));
    t.rows.push_back({tok, c.first, c.second, ls});
  }
  order_rows(t, "features", true, Pos{});
  return t;
}

// SELECT ... FROM ENTITIES NEAREST TO "x" [AT LAYER n]: the entity-looking vocabulary tokens
// (entity_token of the displayed text) by the cosine of their embedding row with x's entity
// query; AT LAYER n keeps the tokens some feature of layer n writes first (down_meta). The top k
// (all with k < 0). Rows: entity, token_id, cosine, features (of layer n, or of every layer,
// whose top token it is).
Table nearest_entities(Session& s, const std::string& x, std::optional<int64_t> layer, int64_t k, Pos pos) {
  const auto q = s.entity_query(x);
  if (!q) throw Error(ErrorKind::InvalidArgument, "NEAREST TO \"" + x + "\" at " + pos.str() + ": the text has no tokens");
  const TensorView e = s.embeddings();
  const int64_t vocab = e.rows, hidden = e.cols;
  double qn = 0;
  for (float v : *q) qn += static_cast<double>(v) * v;
  qn = std::sqrt(qn);
  // Cosines in float (SIMD dot products over each dequantised row); -2 marks a zero row.
  std::vector<float> qf(q->begin(), q->end());
  std::vector<double> cos(static_cast<size_t>(vocab), 0.0);
  s.pool().parallel_for(vocab, [&](int64_t lo, int64_t hi) {
    std::vector<float> row(static_cast<size_t>(hidden));
    for (int64_t t = lo; t < hi; ++t) {
      quant::dequantize_row(e.type, e.row(t), row.data(), hidden);
      const double d = compute::dot_f32(row.data(), qf.data(), hidden);
      const double n = compute::dot_f32(row.data(), row.data(), hidden);
      cos[static_cast<size_t>(t)] = n > 0 && qn > 0 ? d / (std::sqrt(n) * qn) : -2.0;
    }
  }, 4096);
  // Features whose top token each id is, over the layer (or every layer).
  std::map<int64_t, int64_t> writers;
  const std::vector<int64_t> layers = layer ? std::vector<int64_t>{*layer} : layers_of(s, std::nullopt, pos);
  for (int64_t l : layers) {
    const int64_t nf = s.index().layers[static_cast<size_t>(l)].num_features;
    for (int64_t f = 0; f < nf; ++f)
      if (auto top = feature_top(s, l, f)) ++writers[top->first];
  }
  // The candidates, best first (ties to the lower id).
  std::vector<int64_t> order;
  for (int64_t t = 0; t < vocab; ++t) {
    if (cos[static_cast<size_t>(t)] < -1.5 || (layer && !writers.count(t))) continue;
    if (entity_token(s.token_text(t))) order.push_back(t);
  }
  auto better = [&](int64_t a, int64_t b) {
    const double x1 = cos[static_cast<size_t>(a)], x2 = cos[static_cast<size_t>(b)];
    return x1 != x2 ? x1 > x2 : a < b;
  };
  if (k >= 0 && static_cast<size_t>(k) < order.size()) {
    std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
    order.resize(static_cast<size_t>(k));
  } else {
    std::sort(order.begin(), order.end(), better);
  }
  Table t;
  t.columns = {Column{"entity", Column::Type::Text, 4, true}, {"token_id", Column::Type::Int}, {"cosine", Column::Type::Float, 4},
               {"features", Column::Type::Int}};
  for (int64_t id : order) {
    auto w = writers.find(id);
    t.rows.push_back({s.token_piece(id), id, cos[static_cast<size_t>(id)], w == writers.end() ? int64_t{0} : w->second});
  }
  return t;
}

}  // namespace

Table hits_table(Session& s, const std::vector<int64_t>& layers, const std::vector<std::vector<float>>& queries, int k,
                 const std::vector<std::vector<uint8_t>>* skips) {
  Table t;
  t.columns = {{"layer", Column::Type::Int},    {"feature", Column::Type::Int},       {"gate", Column::Type::Float, 2},
               Column{"token", Column::Type::Text, 4, true}, {"token_id", Column::Type::Int},      {"c_score", Column::Type::Float, 2},
               {"also", Column::Type::List}};
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::vector<uint8_t>* skip = skips && !(*skips)[i].empty() ? &(*skips)[i] : nullptr;
    for (const auto& h : s.gate_knn(layers[i], queries[i].data(), k, skip)) {
      auto top = feature_top(s, h.layer, h.feature);
      t.rows.push_back({h.layer, h.feature, static_cast<double>(h.score), top ? Cell{s.token_piece(top->first)} : Cell{},
                        top ? Cell{top->first} : Cell{}, top ? Cell{top->second} : Cell{},
                        feature_tokens(s, h.layer, h.feature, 1, 3)});
    }
  }
  add_expert_column(s, t);
  add_relation_column(s, t);
  return t;
}

void add_expert_column(Session& s, Table& t) {
  const auto& slots = s.index().layers;
  if (std::none_of(slots.begin(), slots.end(), [](const vindex::LayerSlot& x) { return x.num_experts > 0; })) return;
  const int li = t.column("layer"), fi = t.column("feature");
  if (li < 0 || fi < 0 || t.column("expert") >= 0) return;
  const size_t at = static_cast<size_t>(fi + 1);
  t.columns.insert(t.columns.begin() + static_cast<std::ptrdiff_t>(at), Column{"expert"});
  for (auto& r : t.rows) {
    Cell c;
    const auto* l = std::get_if<int64_t>(&r[static_cast<size_t>(li)]);
    const auto* f = std::get_if<int64_t>(&r[static_cast<size_t>(fi)]);
    if (l && f && *l >= 0 && *l < static_cast<int64_t>(slots.size())) {
      const int64_t e = vindex::expert_of(slots[static_cast<size_t>(*l)], *f);
      if (e != -1) c = ffn_feature_expert_label(e);
    }
    r.insert(r.begin() + static_cast<std::ptrdiff_t>(at), std::move(c));
  }
}

Table exec_describe(Session& s, const DescribeStmt& st, Pos pos) {
  if (st.relations_only) require_labels(s, "DESCRIBE ... RELATIONS ONLY", pos);
  std::vector<int64_t> layers;
  if (st.layer) {
    check_layer(s, *st.layer, st.layer_pos);
    layers = {*st.layer};
  } else {
    layers = layers_of_band(s, st.band.value_or(Band::All), pos);
  }
  if (layers.empty() || s.index().layers.empty())
    throw Error(ErrorKind::InvalidArgument, "DESCRIBE at " + pos.str() + ": " + s.path() + " has no gate vectors to describe with");
  Table t;
  t.statement = "DESCRIBE";
  t.columns = {{"band"},
               {"token"},
               {"gate", Column::Type::Float, 2},
               {"layer", Column::Type::Int},
               {"feature", Column::Type::Int},
               {"hits", Column::Type::Int},
               {"layers", Column::Type::List},
               {"also", Column::Type::List}};
  const auto q = s.entity_query(st.entity);
  if (!q) {
    t.title = st.entity;
    t.notes.push_back("(not found: \"" + st.entity + "\" has no tokens)");
    return t;
  }
  const bool raw = st.detail == Detail::Raw;
  const size_t cap = st.detail == Detail::Brief ? 10 : st.detail == Detail::Default ? 20 : 30;
  struct Edge {
    std::string token;
    double gate = 0;
    int64_t layer = 0, feature = 0, hits = 0;
    std::set<int64_t> layers;
  };
  // By (band, lower-cased token): tokens that differ only in case merge within a band, never
  // across bands ("Countries" at L12 and "countries" at L17 are two edges).
  std::map<std::pair<std::string, std::string>, Edge> edges;
  const std::string self = lower(st.entity);
  for (int64_t l : layers)
    for (const auto& h : s.gate_knn(l, q->data(), 20)) {
      if (h.score <= 0.0f) continue;  // a feature fires on a positive gate
      if (st.relations_only && !s.labels()->find(l, h.feature)) continue;  // labelled features only
      auto top = feature_top(s, l, h.feature);
      if (!top) continue;
      const std::string tok = s.token_text(top->first);
      if (!raw && (!content_token(tok) || lower(tok) == self)) continue;
      std::string band = s.band_of(l);
      if (band == "all") band = "knowledge";  // no bands (a small model): one section
      Edge& e = edges[{band, lower(tok)}];
      if (e.hits == 0 || h.score > e.gate) {
        e.token = tok;
        e.gate = h.score;
        e.layer = l;
        e.feature = h.feature;
      }
      ++e.hits;
      e.layers.insert(l);
    }
  std::vector<Edge> sorted;
  for (auto& [k, e] : edges) sorted.push_back(e);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Edge& a, const Edge& b) { return a.gate > b.gate; });
  std::map<std::string, size_t> per_band;
  double max_gate = 0;
  for (const auto& e : sorted) {
    std::string band = s.band_of(e.layer);
    if (band == "all") band = "knowledge";  // no bands (a small model): one section
    if (per_band[band]++ >= cap) continue;
    max_gate = std::max(max_gate, e.gate);
    std::vector<std::string> ls;
    for (int64_t l : e.layers) ls.push_back("L" + std::to_string(l));
    std::vector<std::string> also;
    for (const auto& a : feature_tokens(s, e.layer, e.feature, 1, 9))
      if ((raw || content_token(a)) && also.size() < 3) also.push_back(a);
    t.rows.push_back({band, e.token, e.gate, e.layer, e.feature, e.hits, ls, also});
  }
  // Sections in band order, each by gate.
  auto rank = [](const Cell& c) {
    const auto& b = std::get<std::string>(c);
    return b == "syntax" ? 0 : b == "knowledge" ? 1 : 2;
  };
  std::stable_sort(t.rows.begin(), t.rows.end(), [&](const auto& a, const auto& b) { return rank(a[0]) < rank(b[0]); });
  add_expert_column(s, t);
  add_relation_column(s, t);
  const char* signal = max_gate >= 20 ? "clean" : max_gate >= 10 ? "moderate" : "diffuse";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", max_gate);
  t.title = st.entity + " — signal: " + signal + " (" + std::to_string(t.rows.size()) + " edges, max gate " + buf +
            ", layers " + std::to_string(layers.front()) + "-" + std::to_string(layers.back()) + ")";
  if (t.rows.empty())
    t.notes.push_back(st.relations_only ? "(no edges: no labelled feature with a positive gate writes a content token)"
                                        : "(no edges: no feature with a positive gate writes a content token)");
  return t;
}

Table exec_select(Session& s, const SelectStmt& st, Pos pos) {
  Table t;
  const int64_t limit = st.limit.value_or(20);
  if (st.from == SelectStmt::From::Entities) {
    if (st.nearest) {
      if (st.nearest_layer) check_layer(s, *st.nearest_layer, st.nearest_layer_pos);
      // With a WHERE or ORDER BY every candidate is scored, so the filter sees them all.
      t = nearest_entities(s, *st.nearest, st.nearest_layer, st.where || st.order_by ? -1 : std::max<int64_t>(limit, 0), pos);
    } else {
      t = entity_rows(s, layers_of(s, std::nullopt, pos));
    }
  } else if (st.nearest) {
    check_layer(s, *st.nearest_layer, st.nearest_layer_pos);
    const auto q = s.entity_query(*st.nearest);
    if (!q) throw Error(ErrorKind::InvalidArgument, "NEAREST TO \"" + *st.nearest + "\" at " + pos.str() + ": the text has no tokens");
    // With a WHERE or ORDER BY every feature is scored, so the filter sees the whole layer.
    const int k = st.where || st.order_by
                      ? static_cast<int>(s.index().layers[static_cast<size_t>(*st.nearest_layer)].num_features)
                      : static_cast<int>(std::max<int64_t>(limit, 1));
    t = hits_table(s, {*st.nearest_layer}, {*q}, k);
    t.columns[static_cast<size_t>(t.column("gate"))].name = "score";  // the signed gate score
    t.columns.insert(t.columns.begin(), Column{"entity"});
    for (auto& r : t.rows) r.insert(r.begin(), Cell{*st.nearest});
  } else {
    t = feature_rows(s, layers_of(s, std::nullopt, pos));
  }
  t.statement = "SELECT";
  const char* from = st.from == SelectStmt::From::Edges      ? "EDGES"
                     : st.from == SelectStmt::From::Features ? "FEATURES"
                                                             : "ENTITIES";
  t.title = std::string("SELECT FROM ") + from +
            (st.nearest ? " NEAREST TO \"" + *st.nearest + "\"" +
                              (st.nearest_layer ? " AT LAYER " + std::to_string(*st.nearest_layer) : std::string())
                        : "");
  if (st.where) filter_rows(t, *st.where);
  if (st.order_by) order_rows(t, *st.order_by, st.descending, st.order_by_pos);
  limit_rows(t, limit);
  project(t, st.fields, st.field_pos);
  return t;
}

Table exec_show_features(Session& s, const ShowStmt& st, Pos) {
  check_layer(s, *st.layer, st.layer_pos);
  Table t = feature_rows(s, {*st.layer});
  t.statement = "SHOW";
  t.title = "Features of layer " + std::to_string(*st.layer);
  if (st.where) filter_rows(t, *st.where);
  limit_rows(t, st.limit.value_or(20));
  return t;
}

Table exec_show_entities(Session& s, const ShowStmt& st, Pos pos) {
  std::vector<int64_t> layers;
  if (st.layer) {
    check_layer(s, *st.layer, st.layer_pos);
    layers = {*st.layer};
  } else {
    layers = layers_of(s, std::nullopt, pos);
  }
  Table t = entity_rows(s, layers);
  t.statement = "SHOW";
  t.title = "Entities written by features" + (st.layer ? " of layer " + std::to_string(*st.layer) : std::string());
  limit_rows(t, st.limit.value_or(50));
  return t;
}

}  // namespace larql::lql::detail
