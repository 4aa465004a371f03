// INSERT ... MODE ROBUST: a COMPOSE feature keyed on the entity rather than on one prompt, so that
// the fact answers paraphrases, and built from a fixed number of forward passes, so that a patch
// of 1,000 facts costs no more per INSERT than one of 10 (docs/lql.md "Knowledge edits").
//
// 1. The fact's FFN input at the install layer (last position) under several templates of
//    (relation, entity): x_t. The same templates over 16 decoy entities (8 real, 8 made up) on the
//    base model: their mean b_t (memoised per relation and layer). The key k = mean_t (x_t - b_t):
//    what the entity adds to a statement about it, whatever the wording.
// 2. The gate direction r = k minus its projection on the span of the 40 generic decoy prompts,
//    the decoy entities' template inputs, and the keys of the (at most 32) earlier robust facts
//    most like this one (memoised keys: no forward pass for them). Decoys score 0 on r.
// 3. The gate fires where r.x exceeds a threshold tau, half the fact's weakest template score,
//    through a bias direction b (b . x ~ 1 on any prompt: ordinary text's minimum-variance
//    functional); the up row reads the relation (q = whitened mean of the decoys' inputs minus
//    ordinary text's, 1 at the templates' mean), so the output is an AND of entity and relation;
//    the down column is COMPOSE's (the target's lm_head row as large as the stored blocks hold);
//    the slot COMPOSE's least-used free feature.
// 4. Balance the up row's scale on the canonical prompt and the weakest template: doubled from
//    the relation's last scale / 4 until the target is top-1 on both with P >= 0.5 on the
//    canonical prompt, bisected 3 times, then doubled (COMPOSE's margin). ALPHA multiplies it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "lql/edits.h"
#include "lql/exec_internal.h"
#include "model/model.h"
#include "model/overlay_source.h"
#include "quant/quant.h"
#include "util/error.h"

namespace larql::lql::detail {

namespace {

// Templates of a (relation, entity) statement whose next token is the answer. The first is the
// canonical prompt. Written for this mode, not taken from any evaluation set.
const char* const kTemplates[] = {
    "The {r} of {e} is",
    "{e}'s {r} is",
    "The {r} of {e} is called",
    "Q: What is the {r} of {e}?\nA:",
    "In {e}, the {r} is",
    "Speaking of {e}, its {r} is",
};
// Invented names (checked against data/edit_eval's entities: none is one of them or inside one).
const char* const kInvented[] = {"Drovania", "Kelmistra", "Ulvaren", "Pashkoria", "Tessimund", "Borvathi", "Quillomar", "Yendrabia"};
// Ordinary text the gate must stay off on, at every position (with the decoy prompts'): written
// for this mode.
const char* const kBackground =
    "The village sat at the edge of a wide valley. Every morning the farmers walked to their fields, and the children "
    "ran to the small school by the river. In the evening people gathered in the square to talk about the weather, the "
    "harvest and the news from the city. Prices had risen that year, but most families still had enough bread, and the "
    "old bridge over the river had finally been repaired.";
constexpr size_t kNearest = 32;      // earlier facts the gate is made orthogonal to
constexpr double kThreshold = 0.5;   // tau >= this x the weakest template's score
constexpr double kBackgroundMargin = 1.5;  // tau >= this x the highest background score
constexpr double kMargin = 2.0;      // COMPOSE's margin over the least balanced scale
// The gate's pre-activation at the mean template score. Steep (COMPOSE's is 6): GELU is -0.17 at
// -0.75 and -0.05 near -2, so a gentle gate adds a wrong-signed output at every position that scores
// a little under tau; at 36 those positions read ~0 (docs/BENCHMARKS.md "Knowledge edits (edit-eval)":
// 6 -> 36 took the 100-fact subset from 96 / 72.7 / 85.8% to 97 / 75.7 / 90.6%).
constexpr double kPreActivation = 36.0;

std::string lower(std::string s) { return insert_lower(std::move(s)); }

std::string fill(const char* tmpl, const std::string& relation, const std::string& entity) {
  return insert_fill(tmpl, relation, entity);
}

double dotd(const std::vector<double>& a, const std::vector<float>& b) { return insert_dot(a, b); }

// The element-wise mean of `rows` ([n][hidden] -> [hidden]).
std::vector<double> mean_rows(const std::vector<std::vector<float>>& rows, int64_t hidden) {
  std::vector<double> m(static_cast<size_t>(hidden), 0.0);
  for (const auto& x : rows)
    for (int64_t i = 0; i < hidden; ++i) m[static_cast<size_t>(i)] += x[static_cast<size_t>(i)] / static_cast<double>(rows.size());
  return m;
}

// The FFN input of a fixed prompt on the base model, memoised.
const std::vector<float>& base_in(Session& s, const std::string& prompt, int64_t layer) {
  auto& memo = s.edits().memo->base_ffn_in;
  const std::string key = std::to_string(layer) + "|" + prompt;
  auto it = memo.find(key);
  if (it != memo.end()) return it->second;
  ForwardRun run = run_forward(s, prompt, false, "INSERT", s.base_model("INSERT"));
  return memo[key] = std::move(run.rows.at(static_cast<size_t>(layer)).ffn_in);
}

// The FFN inputs at every position but the first (BOS) of the background text and the decoy
// prompts, on the base model, memoised.
const std::vector<std::vector<float>>& background(Session& s, int64_t layer) {
  auto& memo = s.edits().memo->background;
  auto it = memo.find(layer);
  if (it != memo.end()) return it->second;
  std::vector<std::vector<float>> out;
  std::vector<std::string> texts = insert_decoy_prompts();
  texts.emplace_back(kBackground);
  for (const auto& t : texts) {
    ForwardRun run = run_forward(s, t, true, "INSERT", s.base_model("INSERT"));
    for (auto& r : run.rows) {
      if (r.layer != layer) continue;
      if (r.pos > 0)
        out.push_back(std::move(r.ffn_in));
      else if (!s.edits().memo->bos.count(layer))  // the same row in every text
        s.edits().memo->bos[layer] = std::move(r.ffn_in);
    }
  }
  return memo[layer] = std::move(out);
}

// (C + lambda I)^-1 v, C the background inputs' second moment, lambda = kRidge x its mean
// eigenvalue; the Cholesky factor memoised per layer.
constexpr double kRidge = 0.05;
std::vector<double> whiten(Session& s, int64_t layer, const std::vector<double>& v, double ridge = kRidge) {
  auto& memo = s.edits().memo->whitener;
  const size_t n = v.size();
  const std::pair<int64_t, double> mk{layer, ridge};
  auto it = memo.find(mk);
  if (it == memo.end()) {
    const auto& bg = background(s, layer);
    std::vector<double> c(n * n, 0.0);
    for (const auto& x : bg)
      for (size_t i = 0; i < n; ++i) {
        const double xi = x[i] / static_cast<double>(bg.size());
        for (size_t j = 0; j <= i; ++j) c[i * n + j] += xi * x[j];
      }
    double tr = 0;
    for (size_t i = 0; i < n; ++i) tr += c[i * n + i];
    for (size_t i = 0; i < n; ++i) c[i * n + i] += ridge * tr / static_cast<double>(n);
    // Cholesky, lower triangle in place: C = L L^T.
    for (size_t j = 0; j < n; ++j) {
      double d = c[j * n + j];
      for (size_t k = 0; k < j; ++k) d -= c[j * n + k] * c[j * n + k];
      d = std::sqrt(std::max(d, 1e-30));
      c[j * n + j] = d;
      for (size_t i = j + 1; i < n; ++i) {
        double x = c[i * n + j];
        for (size_t k = 0; k < j; ++k) x -= c[i * n + k] * c[j * n + k];
        c[i * n + j] = x / d;
      }
    }
    it = memo.emplace(mk, std::move(c)).first;
  }
  const std::vector<double>& l = it->second;
  std::vector<double> y(v);
  for (size_t i = 0; i < n; ++i) {  // L y = v
    for (size_t k = 0; k < i; ++k) y[i] -= l[i * n + k] * y[k];
    y[i] /= l[i * n + i];
  }
  for (size_t i = n; i-- > 0;) {  // L^T x = y
    for (size_t k = i + 1; k < n; ++k) y[i] -= l[k * n + i] * y[k];
    y[i] /= l[i * n + i];
  }
  return y;
}

// Per template, the decoy entities' FFN inputs (template-major) for this relation.
std::vector<std::vector<float>> decoy_inputs(Session& s, const std::string& relation, const std::string& entity, int64_t layer) {
  std::vector<std::string> names = insert_decoy_entities();
  for (const char* n : kInvented) names.emplace_back(n);
  std::erase_if(names, [&](const std::string& n) { return lower(n) == lower(entity); });
  std::vector<std::vector<float>> out;
  for (const char* t : kTemplates)
    for (const auto& n : names) out.push_back(base_in(s, fill(t, relation, n), layer));
  return out;
}

// The key of (relation, entity): mean over templates of its input minus the decoys' mean there.
// The canonical template (the prompt INSERT installs the fact on) counts kCanonicalWeight times.
constexpr double kCanonicalWeight = 3.0;
std::vector<double> fact_key(const std::vector<std::vector<float>>& xs, const std::vector<std::vector<float>>& decoys, int64_t hidden,
                             bool canonical_only = false) {
  const size_t nt = xs.size(), per = decoys.size() / nt;
  const double wsum = canonical_only ? 1.0 : kCanonicalWeight + static_cast<double>(nt - 1);
  std::vector<double> k(static_cast<size_t>(hidden), 0.0);
  for (size_t t = 0; t < nt; ++t) {
    const double w = (t == 0 ? (canonical_only ? 1.0 : kCanonicalWeight) : canonical_only ? 0.0 : 1.0) / wsum;
    for (int64_t i = 0; i < hidden; ++i) {
      double b = 0;
      for (size_t d = 0; d < per; ++d) b += decoys[t * per + d][static_cast<size_t>(i)];
      k[static_cast<size_t>(i)] += w * (xs[t][static_cast<size_t>(i)] - b / static_cast<double>(per));
    }
  }
  return k;
}

std::string fact_memo_key(int64_t layer, const std::string& entity, const std::string& relation) {
  return std::to_string(layer) + "|" + lower(entity) + "|" + lower(relation);
}

}  // namespace

std::vector<double> insert_mean_rows(const std::vector<std::vector<float>>& rows, int64_t hidden) { return mean_rows(rows, hidden); }
const std::vector<std::vector<float>>& insert_background(Session& s, int64_t layer) { return background(s, layer); }
const std::vector<float>& insert_bos_row(Session& s, int64_t layer) {
  background(s, layer);
  return s.edits().memo->bos.at(layer);
}
std::vector<double> insert_whiten(Session& s, int64_t layer, const std::vector<double>& v) { return whiten(s, layer, v); }
std::vector<std::string> insert_invented_entities() { return {std::begin(kInvented), std::end(kInvented)}; }
std::string insert_fill(const std::string& tmpl, const std::string& relation, const std::string& entity, size_t* entity_end) {
  std::string r = relation;
  for (char& c : r)
    if (c == '-' || c == '_') c = ' ';
  std::string out;
  size_t end = std::string::npos;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] == '{' && i + 2 < tmpl.size() && tmpl[i + 2] == '}') {
      out += tmpl[i + 1] == 'r' ? r : entity;
      if (tmpl[i + 1] == 'e') end = out.size();
      i += 2;
    } else {
      out += tmpl[i];
    }
  }
  if (entity_end) *entity_end = end;
  return out;
}

double insert_dot(const std::vector<double>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

std::vector<std::string> insert_templates() { return {std::begin(kTemplates), std::end(kTemplates)}; }

Table exec_insert_robust(Session& s, const InsertStmt& st, PatchOp op, Table t, std::chrono::steady_clock::time_point t0) {
  EditState& ed = s.edits();
  const int64_t hidden = s.index().hidden_size, layer = op.layer, target = op.target_id;
  const std::string prompt = canonical_prompt(st.relation, st.entity);
  // 1. The fact's inputs under the templates (the session's model), the decoys' (base, memoised).
  std::vector<std::vector<float>> xs;
  std::vector<std::string> prompts;
  for (const char* tp : kTemplates) {
    prompts.push_back(fill(tp, st.relation, st.entity));
    xs.push_back(insert_ffn_in(s, prompts.back(), layer));
  }
  const std::vector<std::vector<float>> dec = decoy_inputs(s, st.relation, st.entity, layer);
  std::vector<double> k = fact_key(xs, dec, hidden);
  // Earlier robust facts' keys (memoised; a fact applied from a file is keyed on first need).
  std::vector<std::pair<double, std::vector<double>>> earlier;
  auto consider = [&](const PatchOp& o) {
    if (o.kind != PatchOp::Kind::Insert || o.layer != layer || o.entity.empty() || lower(o.entity) == lower(st.entity)) return;
    const std::string mk = fact_memo_key(layer, o.entity, o.relation);
    auto& keys = ed.memo->fact_keys;
    if (!keys.count(mk)) {
      std::vector<std::vector<float>> oxs;
      for (const char* tp : kTemplates) oxs.push_back(base_in(s, fill(tp, o.relation, o.entity), layer));
      const auto kk = fact_key(oxs, decoy_inputs(s, o.relation, o.entity, layer), hidden);
      keys[mk] = std::vector<float>(kk.begin(), kk.end());
    }
    const auto& v = keys[mk];
    double kv = 0, vv = 0, kk = 0;
    for (int64_t i = 0; i < hidden; ++i) {
      kv += k[static_cast<size_t>(i)] * v[static_cast<size_t>(i)];
      vv += static_cast<double>(v[static_cast<size_t>(i)]) * v[static_cast<size_t>(i)];
      kk += k[static_cast<size_t>(i)] * k[static_cast<size_t>(i)];
    }
    earlier.push_back({std::fabs(kv) / std::sqrt(std::max(1e-30, vv * kk)), std::vector<double>(v.begin(), v.end())});
  };
  for (const auto& p : ed.applied)
    for (const auto& o : p.patch.ops) consider(o);
  if (ed.recording)
    for (const auto& o : ed.recording->patch.ops) consider(o);
  std::sort(earlier.begin(), earlier.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (earlier.size() > kNearest) earlier.resize(kNearest);
  // 2. r = k minus its projection on the decoys' span (modified Gram-Schmidt).
  std::vector<std::vector<float>> generic;
  for (const auto& p : insert_decoy_prompts()) generic.push_back(base_in(s, p, layer));
  SpanBasis basis;
  auto project_out = [&](std::vector<double>& v) { basis.project_out(v); };
  auto add_basis = [&](std::vector<double> q) { basis.add(std::move(q)); };
  for (const auto& d : generic) add_basis(std::vector<double>(d.begin(), d.end()));
  for (const auto& d : dec) add_basis(std::vector<double>(d.begin(), d.end()));
  for (auto& e : earlier) add_basis(std::move(e.second));
  // Whitened against ordinary text: r = P (C + lambda I)^-1 P k, P the projection off the decoys'
  // span, C the second moment of the background inputs: the direction on which ordinary text
  // scores least for what the fact scores (Fisher's discriminant, as MEMIT's key covariance).
  // A key that the canonical prompt does not stand out on (its template weighs little against
  // the others') is retried from the canonical prompt alone: a COMPOSE key, whitened.
  bool canonical_only = false;
  double ridge = kRidge;
retry:
  std::vector<double> r = k;
  project_out(r);
  r = whiten(s, layer, r, ridge);
  project_out(r);
  const double rn = std::sqrt(std::inner_product(r.begin(), r.end(), r.begin(), 0.0));
  if (rn < 1e-6)
    throw Error(ErrorKind::InvalidArgument, "INSERT: \"" + st.entity + "\" is indistinguishable from the decoy entities at layer " +
                                                std::to_string(layer));
  for (double& v : r) v /= rn;
  std::vector<double> score(xs.size());
  double s_mean = 0, s_min = INFINITY;
  size_t weakest = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    score[i] = dotd(r, xs[i]);
    s_mean += score[i] / static_cast<double>(xs.size());
    if (score[i] < s_min) s_min = score[i], weakest = i;
  }
  // 3. The gate's bias (Gemma's FFN has none): a direction b with b . x ~ 1 on every prompt, so that
  //    G (r - tau b) . x = G (r . x - tau). b is the minimum-variance linear functional with mean 1
  //    over ordinary text: b ~ C^-1 mu (mu the background inputs' mean, C their second moment plus
  //    the ridge; C^-1 mu ~ Sigma^-1 mu by Sherman-Morrison), scaled to 1 on the canonical prompt.
  //    It varies 3-4% over the decoy prompts at layers 13-16, where COMPOSE's steadiest single
  //    coordinate varies 2-20% (and 12-20% everywhere but layer 13): docs/BENCHMARKS.md.
  const std::vector<float>& x0 = xs[0];
  const std::vector<double> mu = mean_rows(background(s, layer), hidden);  // ordinary text's mean input
  std::vector<double> bias_dir = whiten(s, layer, mu);
  {
    const double b_x0 = dotd(bias_dir, x0);
    if (!(b_x0 > 0))
      throw Error(ErrorKind::Unsupported, "INSERT ... MODE ROBUST: the canonical prompt's FFN input at layer " + std::to_string(layer) +
                                              " is opposite to ordinary text's mean, so the gate has no bias to use (MODE COMPOSE has a fallback)");
    for (double& v : bias_dir) v /= b_x0;
  }
  // The threshold: above the background text's highest score (every position), and above half
  // the weakest template's; templates below it (or close) are not balanced on.
  double bg_max = -INFINITY;
  for (const auto& x : background(s, layer)) bg_max = std::max(bg_max, dotd(r, x));
  double tau = std::max(kThreshold * s_min, kBackgroundMargin * bg_max);
  if (tau > 0.75 * score[0]) tau = std::max(1.1 * bg_max, 0.75 * score[0]);  // the canonical prompt must fire
  // The reference score: the mean of the templates that fire.
  {
    double sum = 0;
    int n = 0;
    for (double v : score)
      if (v > tau) sum += v, ++n;
    if (n > 0) s_mean = sum / n;
  }
  if (!canonical_only && !(score[0] > tau * 1.05)) {
    canonical_only = true;
    k = fact_key(xs, dec, hidden, true);
    t.notes.push_back("the entity's templates do not fire together above ordinary text: keyed on the canonical prompt");
    goto retry;
  }
  if (!(score[0] > tau * 1.05) && ridge == kRidge) {  // less ridge: the sharper discriminant
    ridge = kRidge / 10;
    goto retry;
  }
  if (!(score[0] > tau * 1.05) && score[0] > 0) {
    tau = 0.8 * score[0];  // COMPOSE's threshold: this fact's gate also fires on some ordinary text
    s_mean = score[0];
    t.notes.push_back("warning: \"" + st.entity + "\" does not stand out from ordinary text at layer " + std::to_string(layer) +
                      "; its feature may fire on other text");
  }
  if (!(s_mean > tau * 1.05) || !(score[0] > tau * 1.05))
    throw Error(ErrorKind::InvalidArgument, "INSERT: \"" + st.entity + "\" does not stand out from ordinary text at layer " +
                                                std::to_string(layer) + " (templates' mean score " + std::to_string(s_mean) +
                                                ", ordinary text's up to " + std::to_string(bg_max) + "); MODE COMPOSE keys on the canonical prompt alone");
  weakest = 0;
  for (size_t i = 1; i < xs.size(); ++i)
    if (score[i] >= tau + 0.3 * (s_mean - tau) && score[i] < score[weakest]) weakest = i;
  const double G = kPreActivation / (s_mean - tau);
  {
    char buf[200];
    std::snprintf(buf, sizeof buf, "key scores: templates %.3g to %.3g (mean %.3g), ordinary text up to %.3g; threshold %.3g",
                  s_min, *std::max_element(score.begin(), score.end()), s_mean, bg_max, tau);
    t.notes.push_back(buf);
  }
  op.kind = PatchOp::Kind::Insert;
  {
    std::vector<std::vector<float>> slot_xs = generic;
    const size_t per = dec.size() / xs.size();
    for (size_t d = 0; d < per; ++d) slot_xs.push_back(dec[d]);  // the canonical template's decoys
    op.feature = insert_pick_slot(s, layer, slot_xs, x0);
  }
  op.gate.resize(static_cast<size_t>(hidden));
  op.up.resize(static_cast<size_t>(hidden));
  for (int64_t i = 0; i < hidden; ++i)
    op.gate[static_cast<size_t>(i)] =
        static_cast<float>(G * (r[static_cast<size_t>(i)] - tau * bias_dir[static_cast<size_t>(i)]));
  // The down column: COMPOSE's step 4.
  op.down = insert_down_column(s, layer, op.feature, target);
  // The up row reads the relation: q = (C + lambda I)^-1 (the decoy entities' mean input under the
  // templates - ordinary text's mean), scaled to 1 at the mean of the templates that fire. The
  // output GELU(gate . x) (up . x) is then an AND of "this entity" (the gate) and "a statement of
  // this relation" (the up row). The gate alone opens on text its fit never saw: on data/edit_eval's
  // held-out text at ~67 of 416 positions per fact (24 facts), scoring up to 1.8x the templates'
  // mean; q reads 120-400 there against 250-3,000 on the templates (docs/BENCHMARKS.md "The up row
  // reads the relation"). Where a template that fires reads q <= 0, the up row is the gate's r / s.
  std::vector<double> up_dir(r);
  double up_at = s_mean;  // up_dir . x at the templates' mean
  {
    std::vector<double> q = mean_rows(dec, hidden);
    for (int64_t i = 0; i < hidden; ++i) q[static_cast<size_t>(i)] -= mu[static_cast<size_t>(i)];
    q = whiten(s, layer, q);
    double q_min = INFINITY, q_sum = 0;
    int n = 0;
    for (size_t i = 0; i < xs.size(); ++i)
      if (score[i] > tau) {
        const double v = dotd(q, xs[i]);
        q_min = std::min(q_min, v), q_sum += v, ++n;
      }
    if (n > 0 && q_min > 0) up_dir = std::move(q), up_at = q_sum / n;
    else t.notes.push_back("the relation's direction reads <= 0 on a template of the fact: the up row is the entity's key");
  }
  // 4. Balance on the canonical prompt and the weakest template.
  const EditState saved = ed;
  auto restore = [&] {  // the session's weights as before this INSERT
    ed = saved;
    s.set_weights(ed.overlay, ed.gate_rows);
  };
  auto set_up = [&](double a) {
    for (int64_t i = 0; i < hidden; ++i) op.up[static_cast<size_t>(i)] = static_cast<float>(a * up_dir[static_cast<size_t>(i)] / up_at);
  };
  double p_canon = 0, p_best = 0;
  double first_top1 = -1;  // the smallest scale probed at which the target is the canonical prompt's top-1
  auto probe = [&](double a) {
    set_up(a);
    EditState trial = saved;
    trial.apply(s.base_source("INSERT"), op);
    s.set_weights(trial.overlay, trial.gate_rows);
    bool top1 = false;
    p_canon = insert_target_prob(s, prompt, target, &top1);
    p_best = std::max(p_best, p_canon);
    if (top1 && (first_top1 < 0 || a < first_top1)) first_top1 = a;
    if (!top1 || p_canon < 0.5) return false;
    if (weakest == 0) return true;
    insert_target_prob(s, prompts[weakest], target, &top1);
    return top1;
  };
  const std::string scale_key = std::to_string(layer) + "|" + lower(st.relation);
  double a = 1.0;
  if (auto it = ed.memo->scale.find(scale_key); it != ed.memo->scale.end()) a = std::max(1.0, it->second / 4.0);
  int probes = 0;
  double lo = 0, hi = -1;
  try {
    for (; a <= 65536.0; a *= 2.0) {
      ++probes;
      if (probe(a)) {
        hi = a;
        break;
      }
      lo = a;
    }
    if (hi > 0)
      for (int i = 0; i < 3; ++i) {
        const double mid = 0.5 * (lo + hi);
        ++probes;
        if (probe(mid)) hi = mid;
        else lo = mid;
      }
  } catch (...) {
    restore();
    throw;
  }
  // Unbalanced: the feature at the smallest scale that made the target top-1 (with the margin),
  // not at the largest tried, which writes the most into every other prompt; where no scale
  // did, nothing is installed (at layer 0, say, such a feature only broke the model).
  const bool balanced = hi > 0;
  if (!balanced && first_top1 < 0) {
    restore();
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3g", p_best);
    throw Error(ErrorKind::InvalidArgument, "INSERT ... MODE ROBUST: \"" + st.target + "\" did not become the top prediction of \"" +
                                                prompt + "\" at any scale of the feature at layer " + std::to_string(layer) +
                                                " (best probability " + buf + "); nothing was installed: try another layer (AT LAYER)");
  }
  const double least = balanced ? hi : first_top1;
  if (balanced) ed.memo->scale[scale_key] = least;
  set_up(least * kMargin * st.alpha.value_or(1.0));
  ed = saved;
  {
    std::vector<float> kf(k.begin(), k.end());
    ed.memo->fact_keys[fact_memo_key(layer, st.entity, st.relation)] = std::move(kf);
  }
  record_edits(s, {op}, &t.notes);
  bool top1 = false;
  const double p = insert_target_prob(s, prompt, target, &top1);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  t.title = "Inserted: " + st.entity + " -[" + st.relation + "]-> " + st.target + " at L" + std::to_string(layer) + ", feature " +
            std::to_string(op.feature) + insert_expert_suffix(s, layer, op.feature) + " (robust)";
  if (!balanced)
    t.notes.push_back("not balanced: no scale made the target top-1 with P >= 0.5 on \"" + prompt + "\"" +
                      (weakest == 0 ? std::string() : " and top-1 on \"" + prompts[weakest] + "\"") +
                      "; installed at the smallest scale that made it top-1 on the first");
  t.rows.push_back({st.entity, st.relation, st.target, target, std::string("robust"), layer, op.feature, p,
                    static_cast<int64_t>(probes), ms});
  add_expert_column(s, t);
  return t;
}

}  // namespace larql::lql::detail
