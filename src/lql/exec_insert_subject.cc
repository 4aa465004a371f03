// INSERT ... MODE SUBJECT: one FFN feature at an early layer that fires on the subject's last
// token, whose down column is learned by gradient descent through the layers after it, as ROME
// and MEMIT place their edits (Meng et al. 2022, "Locating and Editing Factual Associations in
// GPT", section 3; the value v* of eq. 4, here without the essence term). docs/lql.md
// "Knowledge edits".
//
// 1. The fact's prompts: ROBUST's 6 templates, each alone and after the prefix "According to the
//    records, " (12). Each is run on the session's model; at the install layer L the FFN input at
//    the subject's last token is kept (x_i), with the residual there and every position's
//    residual leaving L.
// 2. The key k = mean_i x_i - the decoy entities' mean under the same templates (base model,
//    memoised); the gate direction r = P (C + lambda I)^-1 P k, P the projection off the decoys'
//    subject rows and off those of the entities the session inserted before, at any layer (their
//    template mean at L) that r would otherwise score above a quarter of the threshold, C ordinary text's
//    second moment at L (ROBUST's whitening). At the subject's
//    token the fact's rows score far above ordinary text (Gemma 3 270M, layer 3: 8-15 against at
//    most 0.6-2.2; ROBUST's last-position key scores 0.3 against 0.26 for some facts).
// 3. Threshold tau = max(half the weakest prompt's score, 1.5 x the highest of ordinary text and the
//    earlier entities), the bias
//    ROBUST's minimum-variance functional b (b . x ~ 1), the gate G (r - tau b) with pre-activation
//    kPreActivation at the mean score, the up row r / (s_mean kPreActivation): the feature's
//    activation is ~1 on the fact's subject token and 0 elsewhere.
//    P also projects off BOS's input (the attention sink every prompt shares), and the gate is
//    moved against it until its pre-activation there is -kBosPreActivation: any activation at BOS
//    moves every logit of every prompt.
// 4. The down column d: L-BFGS (minimize_lbfgs; steps of at most kStep) on the mean over the 12
//    prompts of -log P(target) at the last position, plus kDecay |d|^2, the gradient through the
//    layers after L by EditTail (the post-FFN norm of L included), at most kSteps evaluations,
//    stopping once the prompts' geometric mean P(target) passes kStopP. Adam (lr 0.5) took 10-25
//    evaluations where L-BFGS takes 5-9 (docs/BENCHMARKS.md "MODE SUBJECT"). It starts from the
//    value last learned for the same target at the same layer (1-2 evaluations when that carries).
//    ALPHA multiplies d.
// 5. The slot: a feature appended past the model's width (append_slot; OverlaySource::widen_ffn
//    widens every layer by 256 when none is free), so no feature of the model is overwritten.
// 6. The scale: the learned d is ~100x larger than the down matrix's entries, and a quantised
//    down matrix stores the column inside blocks it shares with other features (Q4_K: 256 columns
//    of a row, scales per 32). So the up row is multiplied by A and d divided by it, A the
//    smallest scale at which every |d_r| is at most 0.9 R, R the span the appended block's range
//    columns give its scales (append_fit_scale): the same product, written as the column's own
//    codes, no other feature's value moving (docs/BENCHMARKS.md "MODE SUBJECT").
// Without AT LAYER, a refusal at the default layer (2.-4.: the entity does not stand out there, or
// its value does not take) is tried once more at the layer before it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <set>

#include "compute/ops.h"
#include "quant/quant.h"
#include "lql/edit_tail.h"
#include "lql/edits.h"
#include "lql/exec_internal.h"
#include "lql/minimize.h"
#include "model/model.h"
#include "model/overlay_source.h"
#include "util/error.h"

namespace larql::lql::detail {

namespace {

const char* const kPrefixes[] = {"", "According to the records, "};
constexpr double kThreshold = 0.5, kBackgroundMargin = 1.5;  // as ROBUST's
constexpr double kPreActivation = 8.0;
// The gate's pre-activation at BOS is made at most minus this (gelu_tanh(-20) underflows to 0).
constexpr double kBosPreActivation = 20.0;
// An earlier inserted entity scoring above this fraction of the threshold is projected off the
// gate (at most kEarlierRounds times the direction is made again).
constexpr double kEarlierNear = 0.25;
constexpr int kEarlierRounds = 4;
constexpr int kSteps = 25;
constexpr double kStep = 20.0, kStopP = 0.9, kDecay = 1e-4;
constexpr double kMinP = 0.1;  // below it after kSteps: refused (AT LAYER 16 of the default model ends near 1e-6)
constexpr int64_t kMaxPromptTokens = 48;

// A template filled in, and where the entity ends in it (bytes).
std::pair<std::string, size_t> fill_at(const std::string& tmpl, const std::string& relation, const std::string& entity) {
  size_t end = std::string::npos;
  std::string text = insert_fill(tmpl, relation, entity, &end);
  return {std::move(text), end};
}

// One prompt's rows at the install layer.
struct SubjectRun {
  std::string prompt;
  int64_t n = 0, pos = 0;      // tokens, the subject's last token
  std::vector<float> x;        // FFN input at pos [hidden]
  std::vector<float> mid;      // residual_in + attn_out at pos
  std::vector<float> m;        // the FFN's output at pos before the post-FFN norm
  std::vector<float> rows;     // residual leaving the layer, every position [n][hidden]
};

// `near` (non-null, base runs only) receives the FFN input at the subject's token at layers
// layer - 1 and layer + 1 (empty where there is no such layer).
SubjectRun subject_run(Session& s, const std::string& prompt, size_t entity_end, int64_t layer, bool base,
                       std::vector<float>* near = nullptr) {
  SubjectRun r;
  r.prompt = prompt;
  auto model = base ? s.base_model("INSERT") : s.model("INSERT");
  ForwardRun run = run_forward(s, prompt, true, "INSERT", model);
  const auto pre = s.tokenizer().encode(std::string_view(prompt).substr(0, entity_end), true, false);
  r.n = static_cast<int64_t>(run.tokens.size());
  r.pos = static_cast<int64_t>(pre.size()) - 1;
  if (r.pos < 1 || r.pos >= r.n || !std::equal(pre.begin(), pre.end(), run.tokens.begin()))
    throw Error(ErrorKind::InvalidArgument, "INSERT ... MODE SUBJECT: the entity's tokens in \"" + prompt +
                                                "\" merge with the text after it, so it has no last token of its own");
  const int64_t H = s.index().hidden_size;
  r.rows.assign(static_cast<size_t>(r.n * H), 0.0f);
  for (const auto& row : run.rows) {
    if (near && row.pos == r.pos && (row.layer == layer - 1 || row.layer == layer + 1)) near[row.layer == layer + 1] = row.ffn_in;
    if (row.layer != layer) continue;
    std::copy(row.residual_out.begin(), row.residual_out.end(), r.rows.begin() + row.pos * H);
    if (row.pos == r.pos) {
      r.x = row.ffn_in;
      r.mid = row.residual_in;
      for (int64_t i = 0; i < H; ++i) r.mid[static_cast<size_t>(i)] += row.attn_out[static_cast<size_t>(i)];
    }
  }
  if (base) return r;
  // The FFN's own output there, before the post-FFN norm (the row only has it after).
  const ModelConfig& c = model->config();
  const LayerWeights& w = model->weights().layers[static_cast<size_t>(layer)];
  std::vector<float> g(static_cast<size_t>(c.ffn)), u(static_cast<size_t>(c.ffn)), a(static_cast<size_t>(c.ffn));
  compute::matmul(s.pool(), w.w_gate, r.x.data(), 1, g.data());
  compute::matmul(s.pool(), w.w_up, r.x.data(), 1, u.data());
  for (int64_t i = 0; i < c.ffn; ++i)
    a[static_cast<size_t>(i)] = (c.activation == Activation::Silu ? compute::silu(g[static_cast<size_t>(i)]) : compute::gelu_tanh(g[static_cast<size_t>(i)])) *
                                u[static_cast<size_t>(i)];
  r.m.resize(static_cast<size_t>(H));
  compute::matmul(s.pool(), w.w_down, a.data(), 1, r.m.data());
  return r;
}

// The base model's FFN input at `layer` at the entity's last token of `tmpl` filled with
// (relation, entity), memoised in the session (decoys and earlier entities are asked again by
// every INSERT); the same run's inputs at the layers either side are memoised with it (the layer
// before is where a refused INSERT goes next, and each layer's gates are kept off the entities
// inserted at the other). Errors: subject_run's.
const std::vector<float>& base_subject_row(Session& s, const std::string& tmpl, const std::string& relation,
                                           const std::string& entity, int64_t layer) {
  auto& memo = s.edits().memo->base_ffn_in;
  const auto filled = fill_at(tmpl, relation, entity);
  const std::string& text = filled.first;
  const size_t end = filled.second;
  auto key = [&](int64_t l) { return "subject|" + std::to_string(l) + "|" + std::to_string(end) + "|" + text; };
  auto it = memo.find(key(layer));
  if (it == memo.end()) {
    std::vector<float> near[2];
    it = memo.emplace(key(layer), subject_run(s, text, end, layer, true, near).x).first;
    for (int side = 0; side < 2; ++side)
      if (!near[side].empty()) memo.emplace(key(side ? layer + 1 : layer - 1), std::move(near[side]));
  }
  return it->second;
}


// The first appended feature of `layer` (past the vindex's own width) that no edit holds and that
// is not a range column, in the session model of FFN width `width`; `width` or past it when every
// appended one is taken (the next block).
int64_t append_slot(Session& s, int64_t layer, int64_t width) {
  const int64_t f0 = s.index().intermediate_size;
  std::set<std::pair<int64_t, int64_t>> taken = s.edits().touched;
  for (const auto& e : s.compiled_edits()) taken.insert({e.layer, e.feature});
  int64_t f = f0;
  while (f < width && (ffn_append_range_column(f, f0) || taken.count({layer, f}))) ++f;
  if (f >= width) f = std::max(width, f0);
  while (ffn_append_range_column(f, f0)) ++f;
  return f;
}

// The smallest A >= 1 such that every |d_r| / A is at most 0.9 R, R the base down matrix's
// largest |value| at `layer`: an appended block's range columns hold +-R in every row
// (OverlaySource::widen_ffn), so the column then lies inside its group's scales and is written as
// its own codes, never re-quantising the block its neighbours (earlier facts) share.
double append_fit_scale(Session& s, int64_t layer, const std::vector<float>& d) {
  const TensorView& down = s.base_model("INSERT")->weights().layers[static_cast<size_t>(layer)].w_down;
  std::vector<float> row(static_cast<size_t>(down.cols));
  double R = 0;
  for (int64_t r = 0; r < down.rows; ++r) {
    quant::dequantize_row(down.type, down.row(r), row.data(), down.cols);
    for (float v : row) R = std::max(R, static_cast<double>(std::fabs(v)));
  }
  double m = 0;
  for (float v : d) m = std::max(m, static_cast<double>(std::fabs(v)));
  return R > 0 ? std::max(1.0, m / (0.9 * R)) : 1.0;
}

// The default layer: a sixth of the way in (3 of Gemma 3 270M's 18), where the prototype measured
// paraphrase 78% against 50% at layer 6 and 58% at layer 1 (docs/BENCHMARKS.md "MODE SUBJECT").
int64_t subject_default_layer(Session& s) { return std::max<int64_t>(1, s.index().num_layers / 6); }

// A refusal that another layer may not give (the entity does not stand out from ordinary text
// and the entities inserted before it there, or the value learned there is too weak): without
// AT LAYER the INSERT tries the layer before the default.
struct SubjectRefused : Error {
  using Error::Error;
};

// The INSERT at `layer`. Errors: SubjectRefused (above), InvalidArgument / Unsupported for the
// rest.
Table insert_subject_at(Session& s, const InsertStmt& st, PatchOp op, Table t, std::chrono::steady_clock::time_point t0,
                        const int64_t layer) {
  const int64_t H = s.index().hidden_size, target = op.target_id;
  auto model = s.model("INSERT");
  const ModelConfig& c = model->config();
  if (c.n_experts > 0)
    throw Error(ErrorKind::Unsupported, "INSERT ... MODE SUBJECT: a mixture-of-experts model is not supported (MODE COMPOSE or ROBUST are)");
  if (layer > c.n_layers - 2)
    throw Error(ErrorKind::InvalidArgument, "INSERT ... MODE SUBJECT at layer " + std::to_string(layer) +
                                                ": the value is learned through the layers after it, so the layer must be at most " +
                                                std::to_string(c.n_layers - 2));
  op.layer = layer;
  // 1. The fact's prompts.
  const std::vector<std::string> templates = insert_templates();
  std::vector<SubjectRun> runs;
  for (const char* pre : kPrefixes)
    for (const auto& tp : templates) {
      auto [text, end] = fill_at(std::string(pre) + tp, st.relation, st.entity);
      runs.push_back(subject_run(s, text, end, layer, false));
      // The gradient keeps every layer's activations of all 12 prompts (~0.8 MB a token for the
      // default model): a bound before it is allocated.
      if (runs.back().n > kMaxPromptTokens)
        throw Error(ErrorKind::InvalidArgument, "INSERT ... MODE SUBJECT: \"" + text.substr(0, 80) + (text.size() > 80 ? "..." : "") +
                                                    "\" is " + std::to_string(runs.back().n) + " tokens; the mode's prompts may be at most " +
                                                    std::to_string(kMaxPromptTokens) + " (a shorter entity or relation)");
    }
  // 2. The decoys' subject rows (base model, memoised per relation and layer, first prefix only).
  std::vector<std::string> names = insert_decoy_entities();
  for (const auto& n : insert_invented_entities()) names.push_back(n);
  std::erase_if(names, [&](const std::string& n) { return insert_lower(n) == insert_lower(st.entity); });
  std::vector<std::vector<float>> decoys;
  for (const auto& tp : templates)
    for (const auto& n : names) decoys.push_back(base_subject_row(s, tp, st.relation, n, layer));
  std::vector<double> k(static_cast<size_t>(H), 0.0);
  for (const auto& r : runs)
    for (int64_t i = 0; i < H; ++i) k[static_cast<size_t>(i)] += r.x[static_cast<size_t>(i)] / static_cast<double>(runs.size());
  for (const auto& d : decoys)
    for (int64_t i = 0; i < H; ++i) k[static_cast<size_t>(i)] -= d[static_cast<size_t>(i)] / static_cast<double>(decoys.size());
  // The subject rows at this layer of the entities the session's edits already inserted (base
  // model, the same templates, memoised): the new gate is kept off them as off the decoys, or a
  // name sharing its last token with an earlier one ("Feldrouvova", "Krotrindova") opens both
  // features and undoes the earlier fact. Those inserted at other layers too: a feature here that
  // opens on their subject's token writes its value over theirs (when refused INSERTs went to the
  // layer before without it, efficacy at 800 facts fell from 99.2% to 92.0%).
  std::vector<std::vector<float>> earlier;
  {
    auto add_op = [&](const PatchOp& o) {
      if (o.kind != PatchOp::Kind::Insert || o.entity.empty()) return;
      if (insert_lower(o.entity) == insert_lower(st.entity)) {
        if (insert_lower(o.relation) == insert_lower(st.relation))
          t.notes.push_back("\"" + o.entity + "\" -[" + o.relation + "]-> \"" + o.target + "\" is already inserted at L" +
                            std::to_string(o.layer) + " (feature " + std::to_string(o.feature) +
                            "); this INSERT adds a second feature for the same subject and relation (REMOVE PATCH undoes both)");
        return;
      }
      std::vector<std::vector<float>> rows;
      for (const auto& tp : templates) {
        try {
          rows.push_back(base_subject_row(s, tp, o.relation, o.entity, layer));
        } catch (const Error&) {
          // an entity without a last token of its own under this template
        }
      }
      if (rows.empty()) return;
      const std::vector<double> mean = insert_mean_rows(rows, H);
      earlier.emplace_back(mean.begin(), mean.end());
    };
    for (const auto& p : s.edits().applied)
      for (const auto& o : p.patch.ops) add_op(o);
    if (s.edits().recording)
      for (const auto& o : s.edits().recording->patch.ops) add_op(o);
  }
  // P: off the decoys' span, and off the earlier entities this gate would open on: those whose
  // row scores above kEarlierNear of the provisional threshold are added and r made again, until
  // none is left above it (projecting every earlier entity fills the 640-dimensional space after
  // a few hundred facts at a layer and leaves no direction).
  SpanBasis basis;
  for (const auto& d : decoys) basis.add(std::vector<double>(d.begin(), d.end()));
  const std::vector<float>& bos = insert_bos_row(s, layer);
  basis.add(std::vector<double>(bos.begin(), bos.end()));
  std::vector<double> r;
  std::vector<char> projected(earlier.size(), 0);
  const std::vector<std::vector<float>>& background = insert_background(s, layer);
  for (int round = 0;; ++round) {
    r = k;
    basis.project_out(r);
    r = insert_whiten(s, layer, r);
    basis.project_out(r);
    const double rn = std::sqrt(std::inner_product(r.begin(), r.end(), r.begin(), 0.0));
    if (!(rn > 1e-9))
      throw SubjectRefused(ErrorKind::InvalidArgument, "INSERT: \"" + st.entity + "\" is indistinguishable from the decoy entities" +
                                                  (round > 0 ? std::string(" and the entities inserted before it") : std::string()) +
                                                  " at layer " + std::to_string(layer));
    for (double& v : r) v /= rn;
    if (round == kEarlierRounds) break;
    double lo = INFINITY, bg = -INFINITY;
    for (const auto& run : runs) lo = std::min(lo, insert_dot(r, run.x));
    for (const auto& x : background) bg = std::max(bg, insert_dot(r, x));
    const double tau0 = std::max(kThreshold * lo, kBackgroundMargin * bg);
    bool added = false;
    for (size_t e = 0; e < earlier.size(); ++e)
      if (!projected[e] && insert_dot(r, earlier[e]) > kEarlierNear * tau0) {
        basis.add(std::vector<double>(earlier[e].begin(), earlier[e].end()));
        projected[e] = 1, added = true;
      }
    if (!added) break;
  }
  // 3. Threshold, bias, gate and up rows.
  double s_min = INFINITY, s_max = -INFINITY, s_mean = 0, bg_max = -INFINITY;
  for (const auto& run : runs) {
    const double v = insert_dot(r, run.x);
    s_min = std::min(s_min, v);
    s_max = std::max(s_max, v);
    s_mean += v / static_cast<double>(runs.size());
  }
  for (const auto& x : background) bg_max = std::max(bg_max, insert_dot(r, x));
  for (const auto& x : earlier) bg_max = std::max(bg_max, insert_dot(r, x));
  const double tau = std::max(kThreshold * s_min, kBackgroundMargin * bg_max);
  if (!(s_mean > 1.05 * tau) || !(tau > 0)) {
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "\" does not stand out from ordinary text at its last token at layer %lld: its prompts' mean key score %.3g "
                  "does not clear the threshold %.3g by 5%% (the threshold: the larger of half its weakest prompt's score, %.3g, and "
                  "1.5 x ordinary text's highest, %.3g); a real entity the model knows often does not — MODE ROBUST or COMPOSE, or "
                  "another AT LAYER",
                  static_cast<long long>(layer), s_mean, tau, kThreshold * s_min, kBackgroundMargin * bg_max);
    throw SubjectRefused(ErrorKind::InvalidArgument, "INSERT ... MODE SUBJECT: \"" + st.entity + buf);
  }
  std::vector<double> bias;
  {
    bias = insert_whiten(s, layer, insert_mean_rows(insert_background(s, layer), H));
    std::vector<float> xm(static_cast<size_t>(H), 0.0f);
    for (const auto& run : runs)
      for (int64_t i = 0; i < H; ++i) xm[static_cast<size_t>(i)] += run.x[static_cast<size_t>(i)] / static_cast<float>(runs.size());
    const double b_x = insert_dot(bias, xm);
    if (!(b_x > 0))
      throw Error(ErrorKind::Unsupported, "INSERT ... MODE SUBJECT: the subject's FFN input at layer " + std::to_string(layer) +
                                              " is opposite to ordinary text's mean, so the gate has no bias to use");
    for (double& v : bias) v /= b_x;
  }
  const double G = kPreActivation / (s_mean - tau);
  op.kind = PatchOp::Kind::Insert;
  op.gate.resize(static_cast<size_t>(H));
  op.up.resize(static_cast<size_t>(H));
  for (int64_t i = 0; i < H; ++i) {
    op.gate[static_cast<size_t>(i)] = static_cast<float>(G * (r[static_cast<size_t>(i)] - tau * bias[static_cast<size_t>(i)]));
    op.up[static_cast<size_t>(i)] = static_cast<float>(r[static_cast<size_t>(i)] / (s_mean * kPreActivation));
  }
  // BOS. Its row is the same in every prompt and every position attends to it (the attention
  // sink): any nonzero activation there moves every later position of every prompt (one edit, in
  // the default model: 2.5% of the residual at the last layer). r is kept off it (P above), so
  // the up row's value there is only its quantisation's; the gate is made to shut there too, at
  // most -kBosPreActivation, where the activation underflows to 0: the gate moves against the BOS
  // row taken off the fact's own rows (their pre-activations unchanged). Ordinary text's rows
  // share a positive part with BOS's, so they move down with it (the first fact of the set:
  // ordinary text's highest pre-activation -7.4 -> -11.2), where the whitened BOS row raised some
  // (-5.0), and the unrelated text's logits are the base's bit for bit.
  {
    const double g_bos = compute::dot_f32(op.gate.data(), bos.data(), H);
    if (g_bos > -kBosPreActivation) {
      SpanBasis own;
      for (const auto& run : runs) own.add(std::vector<double>(run.x.begin(), run.x.end()));
      std::vector<double> w(bos.begin(), bos.end());
      own.project_out(w);
      const double wb = insert_dot(w, bos);
      if (wb > 0) {
        const double kappa = (g_bos + kBosPreActivation) / wb;
        for (int64_t i = 0; i < H; ++i) op.gate[static_cast<size_t>(i)] -= static_cast<float>(kappa * w[static_cast<size_t>(i)]);
      }
    }
  }
  // The slot: a feature appended past the model's width (the first free one; EditState::apply
  // widens the FFN when there is none), so no feature of the model is overwritten. Overwriting the
  // feature ordinary text and the decoys used least (the other modes' slot) took what those
  // features did from every prompt: deleting the 300 chosen for 300 facts alone kept 86.7% of the
  // neighbourhood prompts, and the ~1,000 for 1,000 facts cost +22% perplexity
  // (docs/BENCHMARKS.md "MODE SUBJECT").
  op.feature = append_slot(s, layer, c.ffn);
  // 4. The down column.
  std::vector<double> act(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    const double g = compute::dot_f32(op.gate.data(), runs[i].x.data(), H), u = compute::dot_f32(op.up.data(), runs[i].x.data(), H);
    act[i] = (c.activation == Activation::Silu ? compute::silu(static_cast<float>(g)) : compute::gelu_tanh(static_cast<float>(g))) * u;
  }
  const LayerWeights& lw = model->weights().layers[static_cast<size_t>(layer)];
  const float* post = c.post_norms ? lw.post_ffn_norm.data() : nullptr;
  // The layers after L: the memo's copy of the base model's while no edit touches them (they are
  // then the session model's too), else dequantised for this INSERT.
  std::shared_ptr<const EditTail> tail_ptr;
  {
    bool edited_after = false;
    for (const auto& [l, f] : s.edits().touched) edited_after |= l > layer;
    for (const auto& [l, cols] : s.edits().down_changed) edited_after |= l > layer && !cols.empty();
    InsertMemo& memo = *s.edits().memo;
    if (edited_after) {
      tail_ptr = std::make_shared<const EditTail>(*model, layer + 1, s.pool());
    } else {
      if (!memo.tail || memo.tail->first() != layer + 1) {
        memo.tail.reset();  // one copy at a time
        memo.tail_model = s.base_model("INSERT");
        memo.tail = std::make_shared<const EditTail>(*memo.tail_model, layer + 1, s.pool());
      }
      tail_ptr = memo.tail;
    }
  }
  const EditTail& tail = *tail_ptr;
  std::vector<float> d(static_cast<size_t>(H), 0.0f), dy(static_cast<size_t>(H));
  double mean_lp = -INFINITY;
  int steps = 0;
  std::vector<std::vector<float>> rows(runs.size()), grads;
  std::vector<std::vector<float>> ys(runs.size(), std::vector<float>(static_cast<size_t>(H)));
  // Positions before each subject token do not change with d: their keys and values are kept.
  std::vector<EditTail::Prefix> prefix;
  {
    std::vector<EditTail::TailSeq> batch;
    for (const SubjectRun& run : runs) batch.push_back({&run.rows, run.n, target, run.pos});
    prefix = tail.prefixes(batch);
  }
  // f(d) = -mean lp + decay |d|^2 and its gradient.
  auto eval = [&](const std::vector<float>& dv, std::vector<double>& g) -> double {
    std::fill(g.begin(), g.end(), 0.0);
    std::vector<EditTail::TailSeq> batch;
    for (size_t i = 0; i < runs.size(); ++i) {
      const SubjectRun& run = runs[i];
      std::vector<float>& yi = ys[i];
      for (int64_t j = 0; j < H; ++j) yi[static_cast<size_t>(j)] = run.m[static_cast<size_t>(j)] + static_cast<float>(act[i]) * dv[static_cast<size_t>(j)];
      rows[i] = run.rows;
      float* hp = rows[i].data() + run.pos * H;
      if (post) compute::rmsnorm(yi.data(), post, hp, H, c.norm_eps);
      else std::copy(yi.begin(), yi.end(), hp);
      for (int64_t j = 0; j < H; ++j) hp[j] += run.mid[static_cast<size_t>(j)];
      batch.push_back({&rows[i], run.n, target, run.pos});
    }
    const std::vector<double> lps = tail.logprobs(batch, &grads, nullptr, &prefix);
    mean_lp = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      const SubjectRun& run = runs[i];
      mean_lp += lps[i] / static_cast<double>(runs.size());
      if (post) rmsnorm_backward(ys[i].data(), post, grads[i].data() + run.pos * H, dy.data(), H, c.norm_eps);
      else std::copy(grads[i].begin() + run.pos * H, grads[i].begin() + (run.pos + 1) * H, dy.begin());
      for (int64_t j = 0; j < H; ++j) g[static_cast<size_t>(j)] -= act[i] * dy[static_cast<size_t>(j)] / static_cast<double>(runs.size());
    }
    double f = -mean_lp;
    for (int64_t j = 0; j < H; ++j) {
      f += kDecay * dv[static_cast<size_t>(j)] * dv[static_cast<size_t>(j)];
      g[static_cast<size_t>(j)] += 2 * kDecay * dv[static_cast<size_t>(j)];
    }
    return f;
  };
  // The last value learned for the same target at this layer is the start (another subject's,
  // through other prompts, but the same token to raise): 1-2 evaluations instead of 5-9 when it
  // already carries (docs/BENCHMARKS.md "MODE SUBJECT"). One that ends below kMinP is run again
  // from 0, so a start can never be what refuses.
  auto& values = s.edits().memo->subject_value;
  const auto known = values.find({layer, target});
  const bool warm = known != values.end() && known->second.size() == d.size();
  MinimizeOptions mo;
  mo.first_step = mo.max_step = kStep;
  mo.max_evals = kSteps;
  for (int attempt = warm ? 0 : 1; attempt < 2; ++attempt) {
    if (attempt == 0) d = known->second;
    else std::fill(d.begin(), d.end(), 0.0f);
    const MinimizeResult res = minimize_lbfgs(d, eval, [&] { return std::exp(mean_lp) > kStopP; }, mo);
    steps += res.evals;
    double dd = 0;
    for (float v : d) dd += static_cast<double>(v) * v;
    mean_lp = -(res.f - kDecay * dd);  // the prompts' mean log-probability at the d returned
    if (std::exp(mean_lp) >= kMinP) break;
  }
  // A value that did not make the target likely (too few layers after L to carry it: AT LAYER
  // n_layers - 2 ends near 1e-6) is refused, as ROBUST refuses; nothing is installed.
  if (!(std::exp(mean_lp) >= kMinP)) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "INSERT ... MODE SUBJECT at layer %lld: the learned value did not make the target likely (P(target) %.3g over the "
                  "%zu prompts after %d steps, below %.2g); nothing is installed — an earlier AT LAYER leaves more layers to carry it",
                  static_cast<long long>(layer), std::exp(mean_lp), runs.size(), steps, kMinP);
    throw SubjectRefused(ErrorKind::InvalidArgument, buf);
  }
  const double alpha = st.alpha.value_or(1.0);
  op.down.resize(static_cast<size_t>(H));
  for (int64_t j = 0; j < H; ++j) op.down[static_cast<size_t>(j)] = static_cast<float>(alpha * d[static_cast<size_t>(j)]);
  // 5. The scale.
  const double scale = append_fit_scale(s, layer, op.down);
  for (float& v : op.down) v = static_cast<float>(v / scale);
  for (float& v : op.up) v = static_cast<float>(v * scale);
  {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "key scores at the subject's token: %.3g to %.3g (mean %.3g), ordinary text up to %.3g; threshold %.3g; value: "
                  "%d steps, P(target) %.3g over the %zu prompts%s; scale %.3g",
                  s_min, s_max, s_mean, bg_max, tau, steps, std::exp(mean_lp), runs.size(), alpha != 1.0 ? " before ALPHA" : "", scale);
    t.notes.push_back(buf);
  }
  record_edits(s, {op}, &t.notes);
  values[{layer, target}] = d;
  bool top1 = false;
  const double p = insert_target_prob(s, runs[0].prompt, target, &top1);
  if (!top1) t.notes.push_back("the target is not the top prediction of \"" + runs[0].prompt + "\"");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  t.title = "Inserted: " + st.entity + " -[" + st.relation + "]-> " + st.target + " at L" + std::to_string(layer) + ", feature " +
            std::to_string(op.feature) + insert_expert_suffix(s, layer, op.feature) + " (subject)";
  t.rows.push_back({st.entity, st.relation, st.target, target, std::string("subject"), layer, op.feature, p,
                    static_cast<int64_t>(steps), ms});
  return t;
}

}  // namespace

Table exec_insert_subject(Session& s, const InsertStmt& st, PatchOp op, Table t, std::chrono::steady_clock::time_point t0) {
  const int64_t layer = st.layer ? *st.layer : subject_default_layer(s);
  if (st.layer || layer < 2) return insert_subject_at(s, st, std::move(op), std::move(t), t0, layer);
  // Without AT LAYER, a refusal at the default layer tries the layer before it: after ~750
  // inserts at one layer the earlier entities' rows fill its space and the new ones stop standing
  // out, where the layer before has room (docs/BENCHMARKS.md "MODE SUBJECT"). Not the layer
  // after: an edit there would make every later INSERT at the default layer dequantise its tail
  // again.
  try {
    return insert_subject_at(s, st, op, t, t0, layer);
  } catch (const SubjectRefused& e) {
    t.notes.push_back("layer " + std::to_string(layer) + " refused it (" + e.what() + "); installed at layer " +
                      std::to_string(layer - 1));
    try {
      return insert_subject_at(s, st, std::move(op), std::move(t), t0, layer - 1);
    } catch (const SubjectRefused& e2) {
      // The second reason without its "INSERT ...: " head (the first one's names the statement).
      std::string why = e2.what();
      if (why.rfind("INSERT", 0) == 0 && why.find(": ") != std::string::npos) why.erase(0, why.find(": ") + 2);
      throw Error(ErrorKind::InvalidArgument, std::string(e.what()) + "; at layer " + std::to_string(layer - 1) + " too: " + why);
    }
  }
}

}  // namespace larql::lql::detail
