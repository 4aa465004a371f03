// DIFF (two vindexes of one shape compared feature by feature) and COMPILE INTO MODEL (a vindex
// exported as a GGUF, extract/gguf_export.h). docs/lql.md ("What runs").
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "extract/gguf_export.h"
#include "lql/edits.h"
#include "lql/exec_internal.h"
#include "model/ffn_features.h"
#include "model/model.h"
#include "model/overlay_source.h"
#include "model/vindex_source.h"
#include "quant/quant.h"
#include "util/clock.h"
#include "util/error.h"

namespace larql::lql::detail {
namespace {

// CURRENT is the vindex in use with the session's edits: say so, or both sides read alike.
std::string ref_name(const VindexRef& r, Session& s) { return r.current ? s.path() + " (edited session)" : r.path; }

/// A row of `t` as floats (dequantised; exact for float types).
void row_floats(const TensorView& t, int64_t r, std::vector<float>& out) {
  out.resize(static_cast<size_t>(t.cols));
  quant::dequantize_row(t.type, t.row(r), out.data(), t.cols);
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

[[noreturn]] void shape_error(const std::string& a, const std::string& b, const std::string& what, int64_t va, int64_t vb,
                              Pos pos) {
  throw Error(ErrorKind::InvalidArgument, "DIFF at " + pos.str() + ": " + a + " has " + std::to_string(va) + " " + what +
                                              ", " + b + " has " + std::to_string(vb) +
                                              ": only vindexes of the same shape compare feature by feature");
}

// DIFF ... INTO PATCH's file: ends in .vlp, in an existing directory, not inside the vindex in use
// (as BEGIN PATCH's).
void check_patch_path(Session& s, const std::string& name, Pos pos) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path path = fs::weakly_canonical(fs::absolute(name));
  if (path.extension() != ".vlp")
    throw Error(ErrorKind::InvalidArgument, "DIFF ... INTO PATCH at " + pos.str() + ": a patch file's name ends in .vlp, got \"" +
                                                name + "\"");
  if (!fs::is_directory(path.parent_path(), ec))
    throw Error(ErrorKind::NotFound, "DIFF ... INTO PATCH at " + pos.str() + ": no directory " + path.parent_path().string());
  const auto rel = path.lexically_relative(fs::weakly_canonical(fs::absolute(s.path())));
  if (!rel.empty() && *rel.begin() != "..")
    throw Error(ErrorKind::InvalidArgument, "DIFF ... INTO PATCH at " + pos.str() + ": " + name + " is inside the vindex in use");
  if (fs::exists(path, ec))  // a patch file is never written over (BEGIN / SAVE PATCH's rule)
    throw Error(ErrorKind::InvalidArgument, "DIFF ... INTO PATCH at " + pos.str() + ": " + name +
                                                " already exists; remove it first or choose another name");
}

// The weights a side runs: the session's edited overlay for the session itself, else the vindex's own.
std::shared_ptr<const WeightSource> side_source(Session& side, Session& s) {
  if (&side == &s && s.edits().overlay) return s.edits().overlay;
  return side.base_source("DIFF ... INTO PATCH");
}

bool same_tensor(const std::optional<SourceTensor>& a, const std::optional<SourceTensor>& b) {
  return a && b && a->type == b->type && a->nbytes == b->nbytes && std::memcmp(a->data, b->data, a->nbytes) == 0;
}

// Every FFN feature's down column of a layer, feature-major [features, hidden] (model/ffn_features.h
// numbering: a dense FFN's down matrix, or each expert's then the shared expert's).
std::vector<float> down_columns(const ModelConfig& c, const LayerWeights& l) {
  std::vector<float> out(static_cast<size_t>(ffn_feature_count(c) * c.hidden)), row;
  int64_t f0 = 0;
  for (const TensorView* d : ffn_down_matrices(c, l)) {  // [hidden, cols]
    row.resize(static_cast<size_t>(d->cols));
    for (int64_t r = 0; r < d->rows; ++r) {
      quant::dequantize_row(d->type, d->row(r), row.data(), d->cols);
      for (int64_t f = 0; f < d->cols; ++f) out[static_cast<size_t>((f0 + f) * c.hidden + r)] = row[static_cast<size_t>(f)];
    }
    f0 += d->cols;
  }
  return out;
}

}  // namespace

Table exec_diff(Session& s, const DiffStmt& st, Pos pos) {
  if (st.into_patch) check_patch_path(s, *st.into_patch, pos);
  if (st.limit && *st.limit < 0)
    throw Error(ErrorKind::InvalidArgument, "LIMIT " + std::to_string(*st.limit) + " at " + pos.str() + " is negative");

  // Each side: the session itself for CURRENT, else a session of its own.
  std::unique_ptr<Session> own_a, own_b;
  auto side = [&](const VindexRef& r, std::unique_ptr<Session>& own) -> Session& {
    if (r.current) {
      s.index();  // InvalidArgument when no vindex is in use
      // DIFF compares the vindexes' own features; features MODE SUBJECT appended past them would
      // be left out and the result (and an INTO PATCH) wrong.
      if (const auto& ov = s.edits().overlay; ov && ov->appended_ffn() > 0)
        throw Error(ErrorKind::Unsupported, "DIFF at " + r.pos.str() + ": the session's edits appended " +
                                                std::to_string(ov->appended_ffn()) +
                                                " features to every layer's FFN (MODE SUBJECT), which DIFF does not compare; "
                                                "COMPILE CURRENT INTO MODEL and larql extract it, then DIFF the two vindexes");
      return s;
    }
    SessionOptions o = s.options();
    o.threads = 1;
    own = std::make_unique<Session>(o);
    own->set_cancel(s.cancel_flag());
    try {
      own->use(r.path);
    } catch (const Error& e) {
      throw Error(e.kind(), "DIFF at " + r.pos.str() + ": " + e.what());
    }
    return *own;
  };
  Session& A = side(st.a, own_a);
  Session& B = side(st.b, own_b);
  const std::string na = ref_name(st.a, s), nb = ref_name(st.b, s);
  const auto &ia = A.index(), &ib = B.index();
  if (ia.layers.size() != ib.layers.size())
    shape_error(na, nb, "gate layers", static_cast<int64_t>(ia.layers.size()), static_cast<int64_t>(ib.layers.size()), pos);
  if (ia.hidden_size != ib.hidden_size) shape_error(na, nb, "hidden size", ia.hidden_size, ib.hidden_size, pos);
  for (size_t l = 0; l < ia.layers.size(); ++l)
    if (ia.layers[l].num_features != ib.layers[l].num_features)
      shape_error(na, nb, "features at layer " + std::to_string(l), ia.layers[l].num_features, ib.layers[l].num_features,
                  pos);

  std::vector<int64_t> layers;
  if (st.layer) {
    check_layer(A, *st.layer, st.layer_pos);
    layers.push_back(*st.layer);
  } else {
    layers = layers_of(A, std::nullopt, pos);
  }
  // RELATION: only the features labelled with that relation (A's labels, else B's).
  const vindex::FeatureLabels* labels = nullptr;
  if (st.relation) {
    labels = A.labels() ? A.labels() : B.labels();
    if (!labels) require_labels(A, "DIFF ... RELATION", pos);
    bool known = false;
    std::string names;
    for (const auto& r : labels->relations) {
      known |= r.name == *st.relation;
      names += (names.empty() ? "" : ", ") + r.name;
    }
    if (!known)
      throw Error(ErrorKind::InvalidArgument, "DIFF ... RELATION at " + pos.str() + ": no relation \"" + *st.relation +
                                                  "\" in the labels (" + names + ")");
  }
  // The FFN's up rows and down columns are compared when both sides hold model weights.
  const bool weights = A.runs_model() && B.runs_model();
  if (st.into_patch && !weights)
    throw Error(ErrorKind::Unsupported, "DIFF ... INTO PATCH at " + pos.str() +
                                            " needs model weights on both sides (the patch carries gate, up and down "
                                            "vectors): extract with --level inference");
  std::vector<PatchOp> ops;
  std::shared_ptr<const Model> ma, mb;
  if (weights) {
    ma = A.model("DIFF");
    mb = B.model("DIFF");
  }

  Table t;
  t.statement = "DIFF";
  t.title = "Features that differ: " + na + " -> " + nb;
  t.columns = {{"layer", Column::Type::Int},  {"feature", Column::Type::Int}, {"changed"},
               Column{"old_top", Column::Type::Text, 4, true}, Column{"new_top", Column::Type::Text, 4, true},                   {"gate_cos", Column::Type::Float, 4}};
  int64_t total = 0, compared = 0;
  std::vector<float> ga, gb;
  for (int64_t l : layers) {
    s.check_cancel();
    const TensorView gate_a = A.gate(l), gate_b = B.gate(l);
    std::vector<float> down_a, down_b;  // [features, hidden]
    int64_t hidden = 0;
    if (weights) {
      down_a = down_columns(ma->config(), ma->weights().layers[static_cast<size_t>(l)]);
      down_b = down_columns(mb->config(), mb->weights().layers[static_cast<size_t>(l)]);
      hidden = ma->config().hidden;
    }
    std::vector<float> ua, ub;
    for (int64_t f = 0; f < gate_a.rows; ++f) {
      if (labels) {
        const auto* lab = labels->find(l, f);
        if (!lab || lab->relation != *st.relation) continue;
      }
      std::string changed;
      auto mark = [&](const char* part) { changed += (changed.empty() ? "" : ",") + std::string(part); };
      row_floats(gate_a, f, ga);
      row_floats(gate_b, f, gb);
      const bool gate_changed = !same_bits(ga.data(), gb.data(), ga.size());
      if (gate_changed) mark("gate");
      if (weights) {
        const FfnFeatureViews va = ffn_feature_views(ma->config(), ma->weights().layers[static_cast<size_t>(l)], f);
        const FfnFeatureViews vb = ffn_feature_views(mb->config(), mb->weights().layers[static_cast<size_t>(l)], f);
        row_floats(*va.up, va.row, ua);
        row_floats(*vb.up, vb.row, ub);
        if (!same_bits(ua.data(), ub.data(), ua.size())) mark("up");
        if (!same_bits(&down_a[static_cast<size_t>(f * hidden)], &down_b[static_cast<size_t>(f * hidden)], static_cast<size_t>(hidden)))
          mark("down");
      }
      const auto top_a = feature_top(A, l, f), top_b = feature_top(B, l, f);
      const bool top_changed = (top_a.has_value() != top_b.has_value()) || (top_a && top_a->first != top_b->first);
      if (top_changed) mark("top_token");
      ++compared;
      if (changed.empty()) continue;
      ++total;
      if (st.into_patch && changed != "top_token") {
        // B's feature as an update op: its gate and up rows and down column, as floats.
        PatchOp op;
        op.kind = PatchOp::Kind::Update;
        op.layer = l;
        op.feature = f;
        const FfnFeatureViews vb = ffn_feature_views(mb->config(), mb->weights().layers[static_cast<size_t>(l)], f);
        row_floats(*vb.gate, vb.row, op.gate);
        op.up = ub;
        op.down.assign(down_b.begin() + f * hidden, down_b.begin() + (f + 1) * hidden);
        ops.push_back(std::move(op));
      }
      if (st.limit && static_cast<int64_t>(t.rows.size()) >= *st.limit) continue;
      Cell old_top, new_top;
      if (top_a) old_top = A.token_piece(top_a->first);
      if (top_b) new_top = B.token_piece(top_b->first);
      t.rows.push_back({l, f, changed, old_top, new_top, cosine(ga, gb)});
    }
  }
  add_expert_column(s, t);
  t.notes.push_back(std::to_string(total) + " of " + std::to_string(compared) + " features differ (compared: gate rows" +
                    (weights ? ", up rows, down columns" : "") + ", down_meta top token" +
                    (weights ? "" : "; up / down need model weights on both sides") + ")");
  if (st.limit && total > *st.limit)
    t.notes.push_back("showing " + std::to_string(*st.limit) + " of " + std::to_string(total) + " rows");
  if (st.relation) t.notes.push_back("compared: the features labelled \"" + *st.relation + "\"");
  if (st.into_patch) {
    // Check the patch: A's weights with its ops applied must hold B's FFN tensors byte for byte.
    auto check = std::make_shared<OverlaySource>(side_source(A, s));
    for (const auto& op : ops) check->set_ffn_feature(op.layer, op.feature, op.gate.data(), op.up.data(), op.down.data());
    int64_t differ = 0;
    const std::shared_ptr<const WeightSource> src_b = side_source(B, s);
    for (int64_t l : layers) {
      bool same = true;
      for (TensorRole r : {TensorRole::FfnGate, TensorRole::FfnUp, TensorRole::FfnDown, TensorRole::FfnGateExps,
                           TensorRole::FfnUpExps, TensorRole::FfnDownExps, TensorRole::FfnGateShexp, TensorRole::FfnUpShexp,
                           TensorRole::FfnDownShexp}) {
        const auto a = check->tensor(r, l), b = src_b->tensor(r, l);
        if (a.has_value() != b.has_value() || (a && !same_tensor(a, b))) same = false;
      }
      differ += same ? 0 : 1;
    }
    Patch p;
    p.base_model = A.index().model;
    p.base_fingerprint = A.base_source("DIFF ... INTO PATCH")->fingerprint();
    p.description = "DIFF " + na + " -> " + nb + (st.relation ? " RELATION " + *st.relation : std::string());
    p.created_at = utc_timestamp();
    p.ops = std::move(ops);
    save_patch(*st.into_patch, p, /*replace=*/false);
    t.notes.push_back("wrote " + *st.into_patch + ": " + std::to_string(p.ops.size()) + " update op(s)" +
                      (differ == 0 ? "; APPLY PATCH on " + na + " gives " + nb + "'s FFN tensors byte for byte"
                                   : "; warning: with it applied, " + std::to_string(differ) +
                                         " layer(s) of FFN tensors still differ from " + nb +
                                         "'s (the two store different quantisation scales): the patch is approximate"));
  }
  return t;
}

Table exec_compile_model(Session& s, const CompileStmt& st, Pos pos) {
  const std::string src = st.source.current ? s.path() : st.source.path;
  // CURRENT: the model the session runs — the vindex's weights with its edits (an OverlaySource
  // after INSERT / APPLY PATCH), so the GGUF answers as INFER does. A path: that vindex as stored.
  std::shared_ptr<const Model> model;
  if (st.source.current) {
    model = s.model("COMPILE INTO MODEL");
  } else {
    auto source = VindexSource::open(src);  // Unsupported naming the level for a browse-level vindex
    model = Model::load(source);            // every tensor shape-checked before a byte is written
  }
  {
    // Never overwrite: an existing file (LQL has no --force) or anything inside the vindex in use.
    namespace fs = std::filesystem;
    std::error_code ec;
    if (st.path.empty()) throw Error(ErrorKind::InvalidArgument, "COMPILE at " + pos.str() + ": the output path is empty");
    if (fs::exists(st.path, ec))
      throw Error(ErrorKind::InvalidArgument, "COMPILE at " + pos.str() + ": " + st.path +
                                                  " already exists; remove it first or choose another path");
    const auto rel = fs::weakly_canonical(fs::absolute(st.path)).lexically_relative(fs::weakly_canonical(fs::absolute(s.path())));
    if (!rel.empty() && *rel.begin() != "..")
      throw Error(ErrorKind::InvalidArgument, "COMPILE at " + pos.str() + ": the output " + st.path + " is inside the vindex in use");
  }
  extract::ExportOptions opt;
  opt.force = false;
  if (const auto* flag = s.cancel_flag())
    opt.progress = [flag](uint64_t, uint64_t) {
      if (flag->load()) throw Error(ErrorKind::Cancelled, "COMPILE INTO MODEL cancelled");
    };
  const auto r = extract::export_gguf(model->source(), st.path, opt);
  Table t;
  t.statement = "COMPILE";
  t.title = "Compiled " + src + " into " + st.path;
  t.columns = {{"key"}, {"value"}};
  t.rows.push_back({std::string("path"), st.path});
  t.rows.push_back({std::string("tensors"), std::to_string(r.tensors)});
  t.rows.push_back({std::string("metadata"), std::to_string(r.metadata)});
  t.rows.push_back({std::string("bytes"), std::to_string(r.bytes)});
  if (st.source.current && !s.edits().knn.empty())
    t.notes.push_back(std::to_string(s.edits().knn.size()) +
                      " KNN fact(s) are not in the GGUF: a GGUF holds weights only (INSERT ... MODE COMPOSE "
                      "writes a fact into the weights)");
  return t;
}

}  // namespace larql::lql::detail
