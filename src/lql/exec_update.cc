// UPDATE and DELETE on edges (docs/lql.md "Knowledge edits"): the features a WHERE selects, over
// the columns of SELECT ... FROM FEATURES (layer, feature, token, token_id, score, also, and
// relation with labels), at most kMaxEditRows per statement; `layer = N AND feature = F` names one
// slot directly (no down_meta needed).
#include <algorithm>
#include <cmath>
#include <optional>

#include "lql/edits.h"
#include "lql/exec_internal.h"
#include "model/model.h"
#include "model/overlay_source.h"
#include "quant/quant.h"
#include "util/error.h"

namespace larql::lql::detail {

namespace {

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

// WHERE layer = L AND feature = F (either order): one slot, named directly; the two values.
struct DirectSlot {
  const Value *layer = nullptr, *feature = nullptr;
};
std::optional<DirectSlot> direct_slot(const Cond& c) {
  DirectSlot d;
  auto take = [&](const Cond& x) {
    if (x.kind != Cond::Kind::Compare || x.op != "=" || x.values.size() != 1 || x.values[0].kind != Value::Kind::Integer)
      return false;
    if (x.field == "layer" && !d.layer) d.layer = &x.values[0];
    else if (x.field == "feature" && !d.feature) d.feature = &x.values[0];
    else return false;
    return true;
  };
  if (c.kind == Cond::Kind::And) {
    for (const Cond& a : c.args)
      if (!take(a)) return std::nullopt;
  } else if (!take(c)) {
    return std::nullopt;
  }
  if (!d.layer || !d.feature) return std::nullopt;
  return d;
}

// The first field of `c` named `name`, or nullptr (the tree is shallow: the parser bounds it).
const Cond* find_field(const Cond& c, const std::string& name) {
  if (c.kind == Cond::Kind::And || c.kind == Cond::Kind::Or || c.kind == Cond::Kind::Not) {
    for (const Cond& a : c.args)
      if (const Cond* f = find_field(a, name)) return f;
    return nullptr;
  }
  return c.field == name ? &c : nullptr;
}

std::string slots_text(const std::vector<std::pair<int64_t, int64_t>>& slots) {
  std::string out;
  for (size_t i = 0; i < slots.size() && i < 8; ++i)
    out += (i ? ", " : "") + std::string("L") + std::to_string(slots[i].first) + " F" + std::to_string(slots[i].second);
  if (slots.size() > 8) out += ", ...";
  return out;
}

Table slots_table(const std::string& statement, const std::vector<std::pair<int64_t, int64_t>>& slots) {
  Table t;
  t.statement = statement;
  t.columns = {{"layer", Column::Type::Int}, {"feature", Column::Type::Int}};
  for (const auto& [l, f] : slots) t.rows.push_back({l, f});
  return t;
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> select_slots(Session& s, const Cond& where, const std::string& what, Pos pos,
                                                      size_t cap) {
  if (auto slot = direct_slot(where)) {
    const int64_t layer = slot->layer->integer, feature = slot->feature->integer;
    check_layer(s, layer, slot->layer->pos);
    // The vindex's features, and those the session's MODE SUBJECT edits appended past them (named
    // only here: the scans below see the vindex's own).
    const int64_t f0 = s.index().intermediate_size;
    const auto& ov = s.edits().overlay;
    const int64_t width = f0 + (ov ? ov->appended_ffn() : 0);
    if (feature < 0 || feature >= width)
      throw Error(ErrorKind::InvalidArgument, what + ": feature " + std::to_string(feature) + " at " +
                                                  slot->feature->pos.str() + " is out of range 0-" + std::to_string(width - 1));
    if (ffn_append_range_column(feature, f0))
      throw Error(ErrorKind::InvalidArgument, what + ": feature " + std::to_string(feature) + " at " + slot->feature->pos.str() +
                                                  " is a range column of the appended features (it holds no feature; docs/lql.md "
                                                  "\"Knowledge edits\", MODE SUBJECT)");
    return {{layer, feature}};
  }
  if (const Cond* e = find_field(where, "entity"))
    not_built(what + " ... WHERE entity", e->pos,
              "a feature has no entity; filter on what it writes (token), layer, feature, score or relation");
  if (const Cond* r = find_field(where, "relation"); r && !s.labels())
    require_labels(s, what + " ... WHERE relation", r->pos);
  Table t = feature_rows(s, layers_of(s, std::nullopt, pos));
  filter_rows(t, where);
  if (t.rows.size() > cap)
    throw Error(ErrorKind::InvalidArgument,
                what + " at " + pos.str() + ": the WHERE matches " + std::to_string(t.rows.size()) +
                    " features; one statement changes at most " + std::to_string(cap) +
                    " (each change copies its layer's FFN tensors and adds its vectors to the patch): narrow the WHERE");
  const int lc = t.column("layer"), fc = t.column("feature");
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& row : t.rows)
    out.emplace_back(std::get<int64_t>(row[static_cast<size_t>(lc)]), std::get<int64_t>(row[static_cast<size_t>(fc)]));
  return out;
}

Table exec_delete(Session& s, const DeleteStmt& st, Pos pos) {
  need_weights(s, "DELETE", pos);
  const auto slots = select_slots(s, st.where, "DELETE", pos);
  Table t = slots_table("DELETE", slots);
  add_expert_column(s, t);
  std::vector<PatchOp> ops;
  for (const auto& [layer, feature] : slots) {
    PatchOp op;
    op.kind = PatchOp::Kind::Delete;
    op.layer = layer;
    op.feature = feature;
    ops.push_back(std::move(op));
  }
  s.base_source("DELETE");
  record_edits(s, std::move(ops), &t.notes);
  // What the stored down column still holds: 0 where the block type holds 0 per element (Q6_K,
  // Q8_0, Q5_0, Q4_0, floats); on Q4_K / Q5_K / Q4_1 / Q5_1 (a min offset per sub-block) the
  // nearest value the re-quantised block holds. The gate and up rows are exactly 0 in every type
  // (an all-zero row quantises to zero scales), so the feature's activation is 0 regardless.
  t.columns.push_back({"down_residual", Column::Type::Float, 6});
  {
    const auto& ov = s.edits().overlay;
    std::vector<float> down;
    double worst = 0;
    for (size_t i = 0; i < slots.size(); ++i) {
      ov->ffn_feature(slots[i].first, slots[i].second, nullptr, nullptr, &down);
      double m = 0;
      for (float v : down) m = std::max(m, static_cast<double>(std::fabs(v)));
      t.rows[i].push_back(m);
      worst = std::max(worst, m);
    }
    if (worst > 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.3g", worst);
      t.notes.push_back(std::string("the gate and up rows are exactly zero (the feature adds nothing on any prompt); a down column "
                                    "in a Q4_K block keeps a residual of at most ") + buf +
                        " per element (a min offset per 32 values: 0 is not always a value the block holds)");
    }
  }
  if (slots.size() == 1)
    t.title = "Deleted feature " + std::to_string(slots[0].second) + " of layer " + std::to_string(slots[0].first) +
              " (its gate and up rows and down column set to zero)";
  else
    t.title = "Deleted " + std::to_string(slots.size()) + " features (gate and up rows and down columns set to zero)" +
              (slots.empty() ? "" : ": " + slots_text(slots));
  if (slots.empty()) t.notes.push_back("no feature matched the WHERE: nothing changed");
  return t;
}

Table exec_update(Session& s, const UpdateStmt& st, Pos pos) {
  // What SET says, checked before anything is read: a mistyped value is the statement's error
  // whatever the vindex.
  std::optional<std::string> target;
  for (const auto& a : st.set) {
    if (a.field != "target" && a.field != "top_token")
      not_built("UPDATE ... SET " + a.field, a.pos, "UPDATE sets target = \"token\" (the down column's direction)");
    if (a.value.kind != Value::Kind::String)
      throw Error(ErrorKind::InvalidArgument, "SET " + a.field + " needs a string (a token), got a number at " + a.value.pos.str());
    if (target)  // target and its other name top_token: one of them
      throw Error(ErrorKind::InvalidArgument, "SET " + a.field + " at " + a.pos.str() + ": the target is already set");
    if (blank_value(a.value.str))  // as INSERT's target
      throw Error(ErrorKind::InvalidArgument, "SET " + a.field + " at " + a.value.pos.str() + ": the target is empty");
    target = a.value.str;
  }
  if (!target) throw Error(ErrorKind::InvalidArgument, "UPDATE at " + pos.str() + ": SET target = \"token\" is missing");
  need_weights(s, "UPDATE", pos);
  const auto slots = select_slots(s, st.where, "UPDATE", pos);
  const int64_t tid = target_token(s, *target, pos, "UPDATE");
  auto base = s.base_source("UPDATE");
  EditState& ed = s.edits();
  auto cur = ed.overlay ? ed.overlay : std::make_shared<OverlaySource>(base);
  auto model = s.model("UPDATE");
  const TensorView& emb = model->weights().lm_head;
  std::vector<float> dir(static_cast<size_t>(s.index().hidden_size));
  quant::dequantize_row(emb.type, emb.row(tid), dir.data(), static_cast<int64_t>(dir.size()));
  Table t = slots_table("UPDATE", slots);
  add_expert_column(s, t);
  std::vector<PatchOp> ops;
  std::vector<float> down;
  for (const auto& [layer, feature] : slots) {
    // The down column keeps its norm and points along the target's lm_head row (its embedding
    // row when the model ties them).
    cur->ffn_feature(layer, feature, nullptr, nullptr, &down);
    const double k = norm(down) / std::max(1e-30, norm(dir));
    PatchOp op;
    op.kind = PatchOp::Kind::Update;
    op.layer = layer;
    op.feature = feature;
    op.down.resize(dir.size());
    for (size_t i = 0; i < dir.size(); ++i) op.down[i] = static_cast<float>(k * dir[i]);
    ops.push_back(std::move(op));
  }
  record_edits(s, std::move(ops), &t.notes);
  if (slots.size() == 1)
    t.title = "Updated feature " + std::to_string(slots[0].second) + " of layer " + std::to_string(slots[0].first) +
              ": its down column now writes \"" + *target + "\" (same norm)";
  else
    t.title = "Updated " + std::to_string(slots.size()) + " features: their down columns now write \"" + *target +
              "\" (same norms)" + (slots.empty() ? "" : ": " + slots_text(slots));
  if (slots.empty()) t.notes.push_back("no feature matched the WHERE: nothing changed");
  return t;
}

}  // namespace larql::lql::detail
