// The statements that run the prompt: WALK, EXPLAIN WALK / INFER, INFER, TRACE. The forward pass
// (inference/forward.h) reports each layer's rows through a LayerObserver.
#include <algorithm>
#include <cmath>

#include "inference/ffn.h"
#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "lql/edits.h"
#include "lql/exec_internal.h"
#include "lql/printer.h"
#include "model/ffn_features.h"
#include "model/model.h"
#include "quant/quant.h"
#include "util/error.h"

namespace larql::lql::detail {

namespace {

class Capture final : public LayerObserver {
 public:
  Capture(int64_t last, bool all) : last_(last), all_(all) {}
  bool wants(int64_t pos) const override { return all_ || pos == last_; }
  void on_layer(const LayerTrace& t) override {
    auto copy = [&](const float* p) { return std::vector<float>(p, p + t.hidden); };
    rows.push_back({t.layer, t.pos, copy(t.residual_in), copy(t.attn_out), copy(t.ffn_in), copy(t.ffn_out),
                    copy(t.residual_out)});
  }
  std::vector<LayerRows> rows;

 private:
  int64_t last_;
  bool all_;
};

std::vector<double> softmax(const std::vector<float>& logits) {
  std::vector<double> p(logits.size());
  double mx = -INFINITY, sum = 0;
  for (float x : logits) mx = std::max(mx, static_cast<double>(x));
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp(static_cast<double>(logits[i]) - mx);
  for (double& x : p) x /= sum;
  return p;
}

std::vector<int64_t> top_ids(const std::vector<float>& v, size_t n) {
  std::vector<int64_t> ids(v.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  n = std::min(n, ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(), [&](int64_t a, int64_t b) {
    return v[static_cast<size_t>(a)] != v[static_cast<size_t>(b)] ? v[static_cast<size_t>(a)] > v[static_cast<size_t>(b)]
                                                                  : a < b;
  });
  ids.resize(n);
  return ids;
}

std::string quoted_token(Session& s, int64_t id) { return "\"" + s.token_text(id) + "\""; }

// The layers of a WALK / EXPLAIN: LAYERS range, band, or all.
std::vector<int64_t> pick_layers(Session& s, const std::optional<LayerRange>& r, const std::optional<Band>& b, Pos pos) {
  std::vector<int64_t> ls = layers_of(s, r, pos);
  if (b) {
    const auto band = layers_of_band(s, *b, pos);
    std::erase_if(ls, [&](int64_t l) { return std::find(band.begin(), band.end(), l) == band.end(); });
  }
  return ls;
}

// WALK's per-layer queries: the FFN input at the last position when the vindex has weights, else
// the last token's embedding x embed_scale at every layer (no attention). Sets the title.
std::vector<std::vector<float>> walk_queries(Session& s, const std::string& prompt, const std::vector<int64_t>& layers,
                                             const std::string& what, Table& t) {
  std::vector<std::vector<float>> qs;
  if (s.runs_model()) {
    const ForwardRun run = run_forward(s, prompt, false, what);
    for (int64_t l : layers) qs.push_back(run.rows[static_cast<size_t>(l)].ffn_in);
    t.title = what + " \"" + prompt + "\": token " + quoted_token(s, run.tokens.back()) + " (last of " +
              std::to_string(run.tokens.size()) + "), query = the FFN input of the forward pass at each layer";
    return qs;
  }
  const auto ids = s.tokenizer().encode(prompt, true, false);
  if (ids.empty()) throw Error(ErrorKind::InvalidArgument, what + ": the prompt has no tokens");
  const TensorView e = s.embeddings();
  std::vector<float> q(static_cast<size_t>(e.cols));
  quant::dequantize_row(e.type, e.row(ids.back()), q.data(), e.cols);
  for (float& x : q) x *= static_cast<float>(s.index().embed_scale);
  qs.assign(layers.size(), q);
  t.title = what + " \"" + prompt + "\": token " + quoted_token(s, ids.back()) + " (last of " +
            std::to_string(ids.size()) + "), query = its embedding x embed_scale at every layer";
  t.notes.push_back("The vindex has no model weights: a pure vindex scan without attention. "
                    "A vindex extracted with --level inference walks the real residual.");
  return qs;
}

// A mixture of experts run by the model: per layer, the features of the experts the router does
// not choose for that layer's FFN input (skip[f] = 1; the shared expert's always stay), so WALK
// and EXPLAIN show the features that fire; a note per layer names the chosen experts and their
// weights. Empty when the vindex is dense or has no model weights (the embedding query has no
// routing).
std::vector<std::vector<uint8_t>> routed_skips(Session& s, const std::vector<int64_t>& layers,
                                               const std::vector<std::vector<float>>& qs, const std::string& what, Table& t) {
  if (!s.runs_model()) return {};
  auto model = s.model(what);
  const ModelConfig& c = model->config();
  if (c.n_experts == 0) return {};
  std::vector<std::vector<uint8_t>> out;
  std::vector<int32_t> chosen(static_cast<size_t>(c.n_experts_used));
  std::vector<float> weights(chosen.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerWeights& w = model->weights().layers[static_cast<size_t>(layers[i])];
    route_rows(s.pool(), c, w, qs[i].data(), 1, chosen.data(), weights.data());  // as the forward pass routes
    std::vector<uint8_t> skip(static_cast<size_t>(ffn_feature_count(c)), 0);
    for (int64_t f = 0; f < c.n_experts * c.expert_ffn; ++f)
      skip[static_cast<size_t>(f)] = std::find(chosen.begin(), chosen.end(), static_cast<int32_t>(f / c.expert_ffn)) == chosen.end();
    std::string note = "L" + std::to_string(layers[i]) + " routes to";
    for (size_t k = 0; k < chosen.size(); ++k) {
      char buf[48];
      std::snprintf(buf, sizeof buf, "%s E%d (%.2f)", k ? "," : "", chosen[k], weights[k]);
      note += buf;
    }
    if (c.shared_expert_ffn > 0) note += " + the shared expert";
    t.notes.push_back(note);
    out.push_back(std::move(skip));
  }
  t.notes.push_back("A mixture of experts: the features shown are those of the experts the router chose at each layer");
  return out;
}

}  // namespace

ForwardRun run_forward(Session& s, const std::string& prompt, bool all_positions, const std::string& what,
                       std::shared_ptr<const Model> model) {
  if (!model) model = s.model(what);
  ForwardRun out;
  out.tokens = s.tokenizer().encode(prompt, true, false);
  if (out.tokens.empty()) throw Error(ErrorKind::InvalidArgument, what + ": the prompt has no tokens");
  const int64_t n = static_cast<int64_t>(out.tokens.size());
  const auto& cfg = model->config();
  if (n > cfg.context_length && cfg.context_length > 0)
    throw Error(ErrorKind::ContextOverflow, what + ": " + std::to_string(n) + " tokens, the model's context holds " +
                                                std::to_string(cfg.context_length));
  Forward fwd(model, std::shared_ptr<ThreadPool>(std::shared_ptr<ThreadPool>{}, &s.pool()));
  KvCache cache(cfg);
  Capture cap(n - 1, all_positions);
  fwd.set_observer(&cap);
  fwd.set_cancel(s.cancel_flag());
  std::vector<float> x(static_cast<size_t>(n * cfg.hidden));
  fwd.forward(out.tokens.data(), n, cache, x.data());
  out.last_logits.resize(static_cast<size_t>(cfg.vocab));
  fwd.logits(x.data() + (n - 1) * cfg.hidden, 1, out.last_logits.data());
  out.rows = std::move(cap.rows);
  // Layer-major within each position (the forward reports layer by layer over all positions).
  std::stable_sort(out.rows.begin(), out.rows.end(),
                   [](const LayerRows& a, const LayerRows& b) { return a.pos != b.pos ? a.pos < b.pos : a.layer < b.layer; });
  return out;
}

// TOP n asks for n rows a layer (or prediction): 0 would answer an empty table that looks like "no
// feature fired", so it is an error in every statement that takes it.
namespace {
void check_top(const std::optional<int64_t>& top, const std::string& what, Pos pos) {
  if (top && *top < 1)
    throw Error(ErrorKind::InvalidArgument, what + " at " + pos.str() + ": TOP must be at least 1, got " + std::to_string(*top));
}
}  // namespace

Table exec_walk(Session& s, const WalkStmt& st, Pos pos) {
  check_top(st.top, "WALK", pos);
  if (st.compare)
    not_built("WALK ... COMPARE", pos,
              "INFER ... COMPARE compares the base and edited predictions, and DIFF CURRENT \"base.vindex\" the "
              "features an edit changed");
  Table t;
  const auto layers = layers_of(s, st.layers, pos);
  const auto qs = walk_queries(s, st.prompt, layers, "WALK", t);
  const auto skips = routed_skips(s, layers, qs, "WALK", t);
  Table h = hits_table(s, layers, qs, static_cast<int>(st.top.value_or(5)), skips.empty() ? nullptr : &skips);
  h.statement = "WALK";
  h.title = t.title;
  h.notes = t.notes;
  return h;
}

Table exec_explain(Session& s, const ExplainStmt& st, Pos pos) {
  const std::string what = st.infer ? "EXPLAIN INFER" : "EXPLAIN WALK";
  check_top(st.top, what, pos);
  if (st.relations_only) require_labels(s, what + " ... RELATIONS ONLY", pos);
  const auto layers = pick_layers(s, st.layers, st.band, pos);
  const int k = static_cast<int>(st.top.value_or(st.verbose ? 10 : st.infer ? 3 : 5));
  if (st.with_attention) return explain_attention(s, st, layers, k, pos);
  if (!st.infer) {
    Table t;
    const auto qs = walk_queries(s, st.prompt, layers, what, t);
    const auto skips = routed_skips(s, layers, qs, what, t);
    Table h = hits_table(s, layers, qs, k, skips.empty() ? nullptr : &skips);
    if (st.relations_only) keep_labelled_rows(h);
    h.statement = "EXPLAIN";
    h.title = t.title;
    h.notes = t.notes;
    return h;
  }
  const ForwardRun run = run_forward(s, st.prompt, false, what);
  std::vector<std::vector<float>> qs;
  for (int64_t l : layers) qs.push_back(run.rows[static_cast<size_t>(l)].ffn_in);
  Table routing;
  const auto skips = routed_skips(s, layers, qs, what, routing);
  Table h = hits_table(s, layers, qs, k, skips.empty() ? nullptr : &skips);
  if (st.relations_only) keep_labelled_rows(h);
  h.statement = "EXPLAIN";
  const auto p = softmax(run.last_logits);
  const int64_t best = top_ids(run.last_logits, 1)[0];
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100.0 * p[static_cast<size_t>(best)]);
  h.title = "Inference trace for \"" + st.prompt + "\": prediction " + quoted_token(s, best) + " (" + buf +
            "); features by the FFN input of each layer";
  h.notes.insert(h.notes.end(), routing.notes.begin(), routing.notes.end());
  return h;
}

namespace {

// One ranked prediction of INFER.
struct Pred {
  int64_t id = 0;
  double prob = 0;
  std::optional<double> logit;  ///< the model's; none for the KNN row (its rank is not the logit's)
  bool knn = false;             ///< the target of a matching KNN fact
};

// INFER's ranked top `top` of a run. Without a KNN answer: the model's softmax. With one (a fact
// of confidence c matches): one distribution, the fact mixed with the model —
// P(target) = c + (1 - c) p_model(target), P(other) = (1 - c) p_model(other) — ranked by it, the
// KNN row without a logit (docs/lql.md "What runs", INFER). Notes about the KNN store go to `notes`.
std::vector<Pred> predictions(Session& s, const ForwardRun& run, const std::string& prompt, size_t top, bool verify,
                              bool knn_store, std::vector<std::string>& notes) {
  const auto p = softmax(run.last_logits);
  std::vector<Pred> out;
  // The KNN store (INSERT ... MODE KNN).
  std::optional<KnnMatch> knn;
  if (knn_store) knn = knn_lookup(s, run, prompt, verify);
  double c = 0;
  int64_t target = -1;
  if (knn) {
    const KnnFact& f = s.edits().knn[knn->fact];
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.3f", knn->cosine);
    if (knn->refused) {
      notes.push_back("KNN fact " + f.entity + " -[" + f.relation + "]-> " + f.target + " matched (cosine " + buf +
                      ") but the prompt does not mention \"" + f.entity + "\": not used (VERIFY OFF uses it)");
    } else {
      c = std::clamp(f.confidence, 0.0, 1.0);
      target = f.target_id;
      const double pt = p[static_cast<size_t>(target)];
      char mix[256];
      std::snprintf(mix, sizeof mix,
                    "confidence %.4g) answers (source = knn): its probability = %.4g + %.4g x the model's %.4f; the model's "
                    "rows (source = model) are its probabilities x %.4g",
                    c, c, 1 - c, pt, 1 - c);
      notes.push_back("KNN store: " + f.entity + " -[" + f.relation + "]-> " + f.target + " (cosine " + buf + ", layer " +
                      std::to_string(f.layer) + ", " + mix);
      out.push_back({target, c + (1 - c) * pt, std::nullopt, true});
    }
  }
  for (int64_t id : top_ids(run.last_logits, top + 1)) {
    if (id == target) continue;
    out.push_back({id, (1 - c) * p[static_cast<size_t>(id)], static_cast<double>(run.last_logits[static_cast<size_t>(id)]), false});
  }
  // By probability; the KNN row first on a tie (c = 1 puts every model row at 0).
  std::stable_sort(out.begin(), out.end(), [](const Pred& a, const Pred& b) { return a.prob > b.prob; });
  if (out.size() > top) out.resize(top);
  return out;
}

// INFER ... COMPARE: the base model (the vindex as stored, no KNN store) beside the session's
// edited one, rank by rank.
Table infer_compare(Session& s, const InferStmt& st) {
  const size_t top = static_cast<size_t>(st.top.value_or(5));
  const EditState& ed = s.edits();
  const bool edited = ed.op_count() > 0;
  Table t;
  t.statement = "INFER";
  t.columns = {{"rank", Column::Type::Int},         Column{"base_token", Column::Type::Text, 4, true},  {"base_token_id", Column::Type::Int},
               {"base_prob", Column::Type::Float, 4}, Column{"edited_token", Column::Type::Text, 4, true}, {"edited_token_id", Column::Type::Int},
               {"edited_prob", Column::Type::Float, 4}};
  std::vector<std::string> base_notes;
  const ForwardRun run = run_forward(s, st.prompt, false, "INFER ... COMPARE");
  const std::vector<Pred> after = predictions(s, run, st.prompt, top, st.verify, true, t.notes);
  std::vector<Pred> before;
  if (!edited) {
    before = after;
    t.notes.push_back("no edits in this session (no patch applied or recorded): base and edited are the same model, "
                      "so both sides are the same");
  } else if (ed.overlay) {
    const ForwardRun base = run_forward(s, st.prompt, false, "INFER ... COMPARE", s.base_model("INFER ... COMPARE"));
    before = predictions(s, base, st.prompt, top, st.verify, false, base_notes);
  } else {
    before = predictions(s, run, st.prompt, top, st.verify, false, base_notes);  // KNN facts only: same weights
  }
  t.title = "Base vs edited predictions for \"" + st.prompt + "\" (" + std::to_string(run.tokens.size()) +
            " tokens; base = " + s.path() + " as stored, edited = with the session's " + std::to_string(ed.op_count()) +
            " edit(s))";
  for (size_t i = 0; i < std::max(before.size(), after.size()); ++i) {
    std::vector<Cell> row = {static_cast<int64_t>(i + 1)};
    for (const std::vector<Pred>* side : {static_cast<const std::vector<Pred>*>(&before), &after}) {
      if (i < side->size()) {
        const Pred& q = (*side)[i];
        row.insert(row.end(), {s.token_piece(q.id), q.id, q.prob});
      } else {
        row.insert(row.end(), {Cell{}, Cell{}, Cell{}});
      }
    }
    t.rows.push_back(std::move(row));
  }
  if (edited && !before.empty() && !after.empty()) {
    if (before[0].id != after[0].id)
      t.notes.push_back("top-1 changed: " + quoted_token(s, before[0].id) + " -> " + quoted_token(s, after[0].id));
    else
      t.notes.push_back("top-1 unchanged: " + quoted_token(s, after[0].id));
  }
  return t;
}

}  // namespace

Table exec_infer(Session& s, const InferStmt& st, Pos pos) {
  check_top(st.top, "INFER", pos);
  if (st.compare) return infer_compare(s, st);
  const ForwardRun run = run_forward(s, st.prompt, false, "INFER");
  Table t;
  t.statement = "INFER";
  const bool moe = !s.index().layers.empty() && s.index().layers[0].num_experts > 0;
  t.title = "Predictions for \"" + st.prompt + "\" (" + std::to_string(run.tokens.size()) + " tokens, " +
            (moe ? "forward pass, routed experts" : "dense forward") + ")";
  t.columns = {{"rank", Column::Type::Int}, Column{"token", Column::Type::Text, 4, true}, {"token_id", Column::Type::Int},
               {"probability", Column::Type::Float, 4}, {"logit", Column::Type::Float, 3}, {"source"}};
  int64_t rank = 1;
  for (const Pred& q : predictions(s, run, st.prompt, static_cast<size_t>(st.top.value_or(5)), st.verify, true, t.notes))
    t.rows.push_back({rank++, s.token_piece(q.id), q.id, q.prob, q.logit ? Cell{*q.logit} : Cell{},
                      std::string(q.knn ? "knn" : "model")});
  return t;
}

Table exec_trace(Session& s, const TraceStmt& st, Pos pos) {
  const ForwardRun run = run_forward(s, st.prompt, st.all_positions, "TRACE");
  auto model = s.model("TRACE");
  const auto& cfg = model->config();
  const int64_t hidden = cfg.hidden, vocab = cfg.vocab;
  int64_t target = top_ids(run.last_logits, 1)[0];
  std::string cut_note;
  if (st.target) {
    if (blank_value(*st.target))
      throw Error(ErrorKind::InvalidArgument, "TRACE ... FOR at " + pos.str() + ": the target is empty (FOR \"word\" names the token to trace)");
    const std::string text = st.target->front() == ' ' ? *st.target : " " + *st.target;
    auto ids = s.tokenizer().encode(text, false, false);
    if (ids.empty()) ids = s.tokenizer().encode(*st.target, false, false);
    if (ids.empty()) throw Error(ErrorKind::InvalidArgument, "TRACE ... FOR at " + pos.str() + ": the target has no tokens");
    target = ids[0];
    if (ids.size() > 1)
      cut_note = "the target \"" + *st.target + "\" is " + std::to_string(ids.size()) + " tokens; traced its first, " +
                 quote_string(s.tokenizer().token_to_piece(static_cast<int32_t>(target))) + " (id " + std::to_string(target) + ")";
  }
  std::vector<int64_t> layers = layers_of(s, st.layers, pos);
  // The logit lens at three points of each layer: x entering, h = x + attention, x leaving.
  std::vector<const LayerRows*> picked;
  for (const auto& r : run.rows)
    if (std::find(layers.begin(), layers.end(), r.layer) != layers.end()) picked.push_back(&r);
  // The rows to put through the lens: x entering a layer (the previous layer's x leaving, when
  // that layer was traced too), h = x + attention, and x leaving.
  std::vector<const float*> lens_rows;
  std::vector<std::vector<float>> hs(picked.size());
  std::vector<size_t> in_idx(picked.size()), h_idx(picked.size()), out_idx(picked.size());
  for (size_t i = 0; i < picked.size(); ++i) {
    const bool chained = i > 0 && picked[i - 1]->pos == picked[i]->pos && picked[i - 1]->layer + 1 == picked[i]->layer;
    if (chained) {
      in_idx[i] = out_idx[i - 1];
    } else {
      in_idx[i] = lens_rows.size();
      lens_rows.push_back(picked[i]->residual_in.data());
    }
    hs[i].resize(static_cast<size_t>(hidden));
    for (int64_t j = 0; j < hidden; ++j)
      hs[i][static_cast<size_t>(j)] = picked[i]->residual_in[static_cast<size_t>(j)] + picked[i]->attn_out[static_cast<size_t>(j)];
    h_idx[i] = lens_rows.size();
    lens_rows.push_back(hs[i].data());
    out_idx[i] = lens_rows.size();
    lens_rows.push_back(picked[i]->residual_out.data());
  }
  Forward fwd(model, std::shared_ptr<ThreadPool>(std::shared_ptr<ThreadPool>{}, &s.pool()));
  Table t;
  t.statement = "TRACE";
  t.title = "Trace of \"" + st.prompt + "\" for " + quoted_token(s, target) +
            ": attn / ffn = the change of the target's logit-lens logit across attention / the FFN";
  t.columns = {{"pos", Column::Type::Int},          {"layer", Column::Type::Int},        {"rank", Column::Type::Int},
               {"prob", Column::Type::Float, 4},    {"logit", Column::Type::Float, 3},   {"attn", Column::Type::Float, 3},
               {"ffn", Column::Type::Float, 3},     {"who"},
               Column{"top_token", Column::Type::Text, 4, true}, {"top_prob", Column::Type::Float, 4}};
  if (st.decompose) {
    t.columns.push_back({"attn_norm", Column::Type::Float, 2});
    t.columns.push_back({"ffn_norm", Column::Type::Float, 2});
    t.columns.push_back({"residual_norm", Column::Type::Float, 2});
    t.columns.push_back({"attn_share", Column::Type::Float, 3});
  }
  // The lens in batches of rows (lm_head is read once per batch): the target's logit, rank and
  // probability for each row.
  struct Lens {
    float logit = 0;
    int64_t rank = 1;
    double prob = 0;
    int64_t top = 0;      ///< the lens's own top-1 token at this row (the logit lens)
    double top_prob = 0;
  };
  std::vector<Lens> lens(lens_rows.size());
  constexpr size_t kBatch = 32;
  std::vector<float> xb(kBatch * static_cast<size_t>(hidden)), lg(kBatch * static_cast<size_t>(vocab));
  for (size_t b = 0; b < lens_rows.size(); b += kBatch) {
    s.check_cancel();
    const size_t n = std::min(kBatch, lens_rows.size() - b);
    for (size_t r = 0; r < n; ++r) std::copy(lens_rows[b + r], lens_rows[b + r] + hidden, xb.data() + r * static_cast<size_t>(hidden));
    fwd.logits(xb.data(), static_cast<int64_t>(n), lg.data());
    for (size_t r = 0; r < n; ++r) {
      const float* row = lg.data() + r * static_cast<size_t>(vocab);
      Lens& l = lens[b + r];
      l.logit = row[target];
      double mx = -INFINITY, sum = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        l.rank += row[v] > l.logit;
        if (static_cast<double>(row[v]) > mx) {
          mx = row[v];
          l.top = v;
        }
      }
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      l.prob = std::exp(static_cast<double>(l.logit) - mx) / sum;
      l.top_prob = 1.0 / sum;
    }
  }
  auto norm = [](const std::vector<float>& v) {
    double s2 = 0;
    for (float x : v) s2 += static_cast<double>(x) * x;
    return std::sqrt(s2);
  };
  for (size_t i = 0; i < picked.size(); ++i) {
    const Lens& out = lens[out_idx[i]];
    const double attn = static_cast<double>(lens[h_idx[i]].logit) - lens[in_idx[i]].logit;
    const double ffn = static_cast<double>(out.logit) - lens[h_idx[i]].logit;
    // Both moved it the same way by more than the threshold: BOTH up / both down; else the larger
    // |change| names the part, with its sign (attention -187.9 and the FFN +60.4: "attn down").
    const bool attn_big = std::fabs(attn) >= std::fabs(ffn);
    const double big = attn_big ? attn : ffn;
    const char* who = attn > 0.5 && ffn > 0.5     ? "BOTH up"
                      : attn < -0.5 && ffn < -0.5 ? "both down"
                      : std::fabs(big) <= 0.5     ? "~"
                      : big > 0                   ? (attn_big ? "ATTN up" : "FFN up")
                                                  : (attn_big ? "attn down" : "ffn down");
    std::vector<Cell> row = {picked[i]->pos, picked[i]->layer, out.rank, out.prob, static_cast<double>(out.logit),
                             attn, ffn, std::string(who), s.token_piece(out.top), out.top_prob};
    if (st.decompose) {
      const double an = norm(picked[i]->attn_out), fn = norm(picked[i]->ffn_out);
      row.push_back(an);
      row.push_back(fn);
      row.push_back(norm(picked[i]->residual_out));
      row.push_back(an + fn > 0 ? an / (an + fn) : 0.0);
    }
    t.rows.push_back(std::move(row));
  }
  if (!cut_note.empty()) t.notes.push_back(cut_note);
  return t;
}

}  // namespace larql::lql::detail
