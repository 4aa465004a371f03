// Knowledge edits: INSERT (MODE COMPOSE / KNN), UPDATE, DELETE, BEGIN / SAVE / APPLY / REMOVE
// PATCH, SHOW PATCHES, and the KNN store INFER consults (docs/lql.md "Knowledge edits").
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>

#include <functional>
#include <set>
#include "compute/ops.h"
#include "lql/edits.h"
#include "lql/exec_internal.h"
#include "inference/ffn.h"
#include "model/ffn_features.h"
#include "model/model.h"
#include "model/overlay_source.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "util/half.h"
#include <cstring>
#include "util/clock.h"
#include "util/error.h"

namespace larql::lql::detail {

namespace {

namespace fs = std::filesystem;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

double norm(const std::vector<float>& v) { return std::sqrt(dot(v.data(), v.data(), static_cast<int64_t>(v.size()))); }

// Decoys: prompts whose FFN input a COMPOSE gate must not fire on. Generic text, and the
// canonical template over real entities (the fact's own relation and others), so that the gate
// keeps what is particular to the new entity.
const char* const kDecoys[] = {
    "Once upon a time",         "The quick brown fox",        "To be or not to be",       "Water is a",
    "A long time ago",          "In the beginning",           "The weather today is",     "She opened the door and",
    "He looked at the sky",     "The children played in the", "The capital of France is", "The language of Japan is",
    "The currency of Mexico is", "The author of Hamlet is",   "The color of the sky is",  "My favourite food is",
    "The president of the United States is", "The largest planet is", "I went to the store to buy", "The answer is",
    "Last night I dreamed that",  "The recipe for pancakes needs", "return x + y; }",          "Hello, how are you",
    "The population of the city grew", "My dog likes to",     "The first thing you should do is", "According to the report,",
    "The temperature dropped below", "She sang a song about",  "The best movie of the year was", "We drove through the mountains and",
    "The number after seven is",  "In 1492, Columbus",         "The price of bread has",   "Please send me the",
    "The teacher asked the students to", "The river flows into", "Scientists believe that the", "His favourite sport is",
};
const char* const kEntities[] = {"France", "Germany", "Japan", "Brazil", "Italy", "Canada", "Egypt", "India"};

// Whether two patch names name one file: equal, or the same path once made absolute and
// normalised (REMOVE PATCH "x.vlp" finds the patch BEGIN PATCH "./x.vlp" recorded; over HTTP both
// are resolved inside --lql-allow-files first).
bool same_patch(const std::string& a, const std::string& b) {
  if (a == b) return true;
  if (a.empty() || b.empty()) return false;
  std::error_code ec;
  const fs::path pa = fs::weakly_canonical(fs::absolute(a), ec);
  if (ec) return false;
  const fs::path pb = fs::weakly_canonical(fs::absolute(b), ec);
  return !ec && pa == pb;
}

// A patch file is never written over: COMPILE's rule (LQL has no --force).
void refuse_existing_patch(const std::string& what, const std::string& name, Pos pos) {
  std::error_code ec;
  if (fs::exists(fs::path(name), ec))
    throw Error(ErrorKind::InvalidArgument, what + " at " + pos.str() + ": " + name +
                                                " already exists; remove it first or choose another name (a patch file is "
                                                "never written over)");
}

// Before APPLY PATCH: an insert of `p` into a slot an applied patch, the recording or the
// vindex's compiled edits already inserted into would overwrite that fact. A feature MODE SUBJECT
// appended has no meaning of its own (every fresh session's first fact at layer 3 is feature
// 2050), so such an insert and the later ops of `p` on its slot move to the next free appended
// feature of the layer (a note says so); a clash on one of the model's own features stays, with a
// warning naming it.
void relocate_appended(Session& s, const std::string& name, Patch& p, std::vector<std::string>* notes) {
  const EditState& ed = s.edits();
  const int64_t f0 = s.index().intermediate_size;
  std::set<std::pair<int64_t, int64_t>> taken;
  auto note_ops = [&](const Patch& q) {
    for (const auto& o : q.ops)
      if (o.kind == PatchOp::Kind::Insert || o.kind == PatchOp::Kind::Update) taken.insert({o.layer, o.feature});
  };
  for (const auto& a : ed.applied) note_ops(a.patch);
  if (ed.recording) note_ops(ed.recording->patch);
  for (const auto& e : s.compiled_edits()) taken.insert({e.layer, e.feature});
  std::set<std::pair<int64_t, int64_t>> own;  // this patch's slots, as named in the file
  for (const auto& o : p.ops) own.insert({o.layer, o.feature});
  std::map<std::pair<int64_t, int64_t>, int64_t> moved;
  int64_t clashes = 0;
  for (auto& o : p.ops) {
    const std::pair<int64_t, int64_t> key{o.layer, o.feature};
    if (auto m = moved.find(key); m != moved.end()) {
      o.feature = m->second;
      continue;
    }
    if (o.kind != PatchOp::Kind::Insert || !taken.count(key)) continue;
    if (o.feature < f0) {
      ++clashes;
      continue;
    }
    int64_t f = f0;
    while (ffn_append_range_column(f, f0) || taken.count({o.layer, f}) || own.count({o.layer, f})) ++f;
    moved[key] = f;
    taken.insert({o.layer, f});
    o.feature = f;
  }
  if (!moved.empty())
    notes->push_back(name + ": " + std::to_string(moved.size()) +
                     " appended feature(s) held by earlier edits moved to free ones (e.g. layer " +
                     std::to_string(moved.begin()->first.first) + " feature " + std::to_string(moved.begin()->first.second) + " -> " +
                     std::to_string(moved.begin()->second) + ")");
  if (clashes > 0)
    notes->push_back("warning: " + name + " inserts into " + std::to_string(clashes) +
                     " feature(s) an earlier patch or edit already holds; its ops overwrite them");
}

PatchLimits limits(Session& s) {
  const auto& ix = s.index();
  bool moe = false;
  for (const auto& l : ix.layers) moe |= l.num_experts > 0;
  return PatchLimits{ix.num_layers, ix.intermediate_size, ix.hidden_size, ix.vocab_size, moe ? 0 : ix.intermediate_size};
}

void publish(Session& s) {
  EditState& e = s.edits();
  s.set_weights(e.overlay, e.gate_rows);
}

void record(Session& s, PatchOp op, std::vector<std::string>* notes) {
  std::vector<PatchOp> ops;
  ops.push_back(std::move(op));
  record_edits(s, std::move(ops), notes);
}

// The knowledge band's last layer (13 of Gemma 3 270M's 18): the last layer before the output
// band, where one feature still moves the answer (layer 12 of 18 did not on that model: the
// post-FFN norm caps what one layer's FFN adds, and later layers wash it out).
int64_t default_layer(Session& s) {
  const auto bands = s.bands();
  auto it = bands.find("knowledge");
  const int64_t n = s.index().num_layers;
  if (it == bands.end()) return std::max<int64_t>(0, n - 5 * n / 18 - 1);
  return it->second.last;
}

// The FFN input at `layer`, last position, of `prompt` under the current (edited) model.
std::vector<float> ffn_in(Session& s, const std::string& prompt, int64_t layer) {
  ForwardRun run = run_forward(s, prompt, false, "INSERT");
  return std::move(run.rows.at(static_cast<size_t>(layer)).ffn_in);
}

double target_prob(Session& s, const std::string& prompt, int64_t target, bool* top1) {
  const ForwardRun run = run_forward(s, prompt, false, "INSERT");
  const auto& lg = run.last_logits;
  double mx = -INFINITY, sum = 0;
  for (float x : lg) mx = std::max(mx, static_cast<double>(x));
  for (float x : lg) sum += std::exp(static_cast<double>(x) - mx);
  *top1 = std::max_element(lg.begin(), lg.end()) - lg.begin() == target;
  return std::exp(static_cast<double>(lg[static_cast<size_t>(target)]) - mx) / sum;
}

// " of expert E3" for a mixture-of-experts vindex's feature; "" for a dense one.
std::string expert_suffix(Session& s, int64_t layer, int64_t feature) {
  const int64_t e = vindex::expert_of(s.index().layers.at(static_cast<size_t>(layer)), feature);
  return e == -1 ? std::string() : " of expert " + ffn_feature_expert_label(e);
}

// The activation of a gate pre-activation under the model's FFN (GELU-tanh or SiLU).
double act(const ModelConfig& c, double a) {
  if (c.activation == Activation::Silu) return a / (1.0 + std::exp(-a));
  return 0.5 * a * (1.0 + std::tanh(0.7978845608 * (a + 0.044715 * a * a * a)));
}

// A mixture of experts: per expert, the weight its output gets for FFN input x (0 when the
// router does not choose it), as the forward pass routes (inference/ffn.h route_rows).
std::vector<double> expert_weights(Session& s, const ModelConfig& c, const LayerWeights& w, const std::vector<float>& x) {
  std::vector<int32_t> chosen(static_cast<size_t>(c.n_experts_used));
  std::vector<float> weights(chosen.size());
  route_rows(s.pool(), c, w, x.data(), 1, chosen.data(), weights.data());
  std::vector<double> out(static_cast<size_t>(c.n_experts), 0.0);
  for (size_t i = 0; i < chosen.size(); ++i) out[static_cast<size_t>(chosen[i])] = weights[i];
  return out;
}

// The feature of `layer` that matters least: the smallest mean |activation| x |down column| over
// the decoy prompts' FFN inputs (what replacing it takes away from ordinary text), among those
// no edit has written. In a mixture of experts only the features of the expert the router
// weighs most for the fact's own FFN input `x0` are candidates (a feature fires only when its
// expert is chosen, and its output is scaled by that weight), and a decoy counts for an expert's
// feature by the weight the router gives that expert on the decoy (0 when not chosen).
int64_t pick_slot(Session& s, int64_t layer, const std::vector<std::vector<float>>& xs, const std::vector<float>& x0) {
  auto model = s.model("INSERT");
  const ModelConfig& c = model->config();
  const LayerWeights& w = model->weights().layers[static_cast<size_t>(layer)];
  const int64_t hidden = c.hidden;
  int64_t f0 = 0, nf = ffn_feature_count(c);
  // The model's own features only: those MODE SUBJECT appended past it are its (a range column
  // there holds no feature).
  if (c.n_experts == 0) nf = std::min<int64_t>(nf, s.index().intermediate_size);
  std::vector<double> decoy_weight(xs.size(), 1.0);
  if (c.n_experts > 0) {
    const std::vector<double> mine = expert_weights(s, c, w, x0);
    const int64_t e = std::max_element(mine.begin(), mine.end()) - mine.begin();
    f0 = e * c.expert_ffn;
    nf = c.expert_ffn;
    for (size_t i = 0; i < xs.size(); ++i) decoy_weight[i] = expert_weights(s, c, w, xs[i])[static_cast<size_t>(e)];
  }
  const FfnFeatureViews v = ffn_feature_views(c, w, f0);
  const int64_t r0 = v.row;  // the candidates' first row in *v.gate / *v.up, first column in *v.down
  std::vector<double> use(static_cast<size_t>(nf), 0.0), d(static_cast<size_t>(nf), 0.0);
  // A feature whose gate row is all zeros never fires: in a vindex extracted from a model MODE
  // SUBJECT widened, an appended one (a range column, or a free column sharing its blocks with the
  // facts already there); writing it would re-quantise those blocks. Never a candidate.
  std::vector<char> dead(static_cast<size_t>(nf), 0);
  std::vector<float> row(static_cast<size_t>(v.down->cols));
  {
    // The candidates' gate and up rows in f32 [nf][hidden], every row of xs against them at once
    // (compute::gemm_f32_nt: [xs][nf]).
    std::vector<float> gw(static_cast<size_t>(nf * hidden)), uw(static_cast<size_t>(nf * hidden)), xm;
    for (int64_t f = 0; f < nf; ++f) {
      quant::dequantize_row(v.gate->type, v.gate->row(r0 + f), gw.data() + f * hidden, hidden);
      quant::dequantize_row(v.up->type, v.up->row(r0 + f), uw.data() + f * hidden, hidden);
      dead[static_cast<size_t>(f)] = std::all_of(gw.begin() + f * hidden, gw.begin() + (f + 1) * hidden, [](float x) { return x == 0.0f; });
    }
    for (size_t i = 0; i < xs.size(); ++i)
      if (decoy_weight[i] != 0.0) xm.insert(xm.end(), xs[i].begin(), xs[i].end());
    const int64_t n = static_cast<int64_t>(xm.size()) / hidden;
    std::vector<float> ga(static_cast<size_t>(n * nf)), ua(static_cast<size_t>(n * nf));
    compute::gemm_f32_nt(s.pool(), xm.data(), n, gw.data(), nf, hidden, ga.data());
    compute::gemm_f32_nt(s.pool(), xm.data(), n, uw.data(), nf, hidden, ua.data());
    int64_t t = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (decoy_weight[i] == 0.0) continue;
      for (int64_t f = 0; f < nf; ++f)
        use[static_cast<size_t>(f)] +=
            decoy_weight[i] * std::fabs(act(c, ga[static_cast<size_t>(t * nf + f)]) * ua[static_cast<size_t>(t * nf + f)]);
      ++t;
    }
  }
  for (int64_t r = 0; r < v.down->rows; ++r) {
    quant::dequantize_row(v.down->type, v.down->row(r), row.data(), v.down->cols);
    for (int64_t f = 0; f < nf; ++f) {
      const double x = row[static_cast<size_t>(r0 + f)];
      d[static_cast<size_t>(f)] += x * x;
    }
  }
  // Slots the session's edits wrote, and those edits compiled into this vindex wrote (edits.json).
  std::set<std::pair<int64_t, int64_t>> taken = s.edits().touched;
  for (const auto& e : s.compiled_edits()) taken.insert({e.layer, e.feature});
  int64_t best = -1;
  double best_v = INFINITY;
  for (int64_t f = 0; f < nf; ++f) {
    if (taken.count({layer, f0 + f}) || dead[static_cast<size_t>(f)]) continue;
    const double val = use[static_cast<size_t>(f)] * std::sqrt(d[static_cast<size_t>(f)]);
    if (val < best_v) best_v = val, best = f0 + f;
  }
  if (best < 0)
    throw Error(ErrorKind::InvalidArgument, "INSERT: every feature of layer " + std::to_string(layer) +
                                                (c.n_experts > 0 ? " in expert E" + std::to_string(f0 / c.expert_ffn) +
                                                                       " (the one the router picks for this prompt)"
                                                                 : std::string()) +
                                                " is already edited");
  return best;
}

// Per down row, the largest |value| the column can hold without touching the rest of its block:
// for Q6_K, 31 steps of its 16-value sub-block's scale (OverlaySource keeps every scale); else the
// block's largest |value|.
std::vector<float> down_range(Session& s, int64_t layer, int64_t feature) {
  auto model = s.model("INSERT");
  const FfnFeatureViews v = ffn_feature_views(model->config(), model->weights().layers[static_cast<size_t>(layer)], feature);
  const TensorView& dn = *v.down;
  const int64_t col = v.col;
  const DTypeInfo& info = dtype_info(dn.type);
  const int64_t bs = info.block_size, blk = col / bs;
  std::vector<float> vals(static_cast<size_t>(bs)), out(static_cast<size_t>(dn.rows));
  for (int64_t r = 0; r < dn.rows; ++r) {
    const uint8_t* b = dn.row(r) + static_cast<size_t>(blk) * info.type_size;
    if (dn.type == DType::Q6_K) {
      quant::detail::BlockQ6K q;
      std::memcpy(&q, b, sizeof q);
      const int64_t j = col - blk * bs, k = j % 128;
      const int si = static_cast<int>((j / 128) * 8 + (k % 32) / 16 + 2 * (k / 32));
      out[static_cast<size_t>(r)] = 31.0f * std::fabs(f16_to_f32(q.d) * static_cast<float>(q.scales[si]));
      continue;
    }
    quant::dequantize_row(dn.type, b, vals.data(), bs);
    float m = 0;
    for (float x : vals) m = std::max(m, std::fabs(x));
    out[static_cast<size_t>(r)] = m;
  }
  return out;
}

// The down column of an inserted feature: the target's lm_head row (the direction that raises
// its logit; the embedding row when the model ties them, as Gemma does — an untied model's
// embedding row need not point there), as large as every row's stored block can hold. Its scale
// c is the 30th percentile over rows of what each can hold / |dir|, so 30% of the rows are
// clamped at their limit (the direction keeps its signs and most of its shape) and the rest keep
// a useful number of quantisation steps; the up row carries the magnitude. [hidden] floats.
std::vector<float> down_column(Session& s, int64_t layer, int64_t feature, int64_t target) {
  auto model = s.model("INSERT");
  const int64_t hidden = model->config().hidden;
  const TensorView& emb = model->weights().lm_head;
  std::vector<float> dir(static_cast<size_t>(hidden));
  quant::dequantize_row(emb.type, emb.row(target), dir.data(), hidden);
  const std::vector<float> range = down_range(s, layer, feature);
  std::vector<double> ratios;
  for (int64_t i = 0; i < hidden; ++i)
    if (dir[static_cast<size_t>(i)] != 0.0f && range[static_cast<size_t>(i)] > 0)
      ratios.push_back(range[static_cast<size_t>(i)] / std::fabs(dir[static_cast<size_t>(i)]));
  double c = 1.0;
  if (!ratios.empty()) {
    std::nth_element(ratios.begin(), ratios.begin() + static_cast<std::ptrdiff_t>(ratios.size() * 3 / 10), ratios.end());
    c = ratios[ratios.size() * 3 / 10];
  }
  std::vector<float> down(static_cast<size_t>(hidden));
  for (int64_t i = 0; i < hidden; ++i) down[static_cast<size_t>(i)] = static_cast<float>(c * dir[static_cast<size_t>(i)]);
  return down;
}

// The FFN-input coordinate steadiest over `xs` (relative spread below 5%, the same sign as and
// not ~0 in `x0`), which a gate weight can use as a bias (Gemma's FFN has none); -1 if none.
int64_t steady_coordinate(const std::vector<const std::vector<float>*>& xs, const std::vector<float>& x0) {
  int64_t k = -1;
  double best_cv = 0.05;
  for (size_t i = 0; i < x0.size(); ++i) {
    double mu = 0, var = 0;
    for (const auto* d : xs) mu += (*d)[i];
    mu /= static_cast<double>(xs.size());
    for (const auto* d : xs) var += ((*d)[i] - mu) * ((*d)[i] - mu);
    const double cv = std::sqrt(var / static_cast<double>(xs.size())) / std::max(1e-12, std::fabs(mu));
    if (cv < best_cv && std::fabs(x0[i]) > 1e-3 && (x0[i] > 0) == (mu > 0)) best_cv = cv, k = static_cast<int64_t>(i);
  }
  return k;
}

}  // namespace

// What exec_insert_robust.cc shares with COMPOSE (exec_internal.h).
int64_t insert_default_layer(Session& s) { return default_layer(s); }
std::vector<float> insert_ffn_in(Session& s, const std::string& prompt, int64_t layer) { return ffn_in(s, prompt, layer); }
double insert_target_prob(Session& s, const std::string& prompt, int64_t target, bool* top1) {
  return target_prob(s, prompt, target, top1);
}
int64_t insert_pick_slot(Session& s, int64_t layer, const std::vector<std::vector<float>>& xs, const std::vector<float>& x0) {
  return pick_slot(s, layer, xs, x0);
}
std::vector<float> insert_down_column(Session& s, int64_t layer, int64_t feature, int64_t target) {
  return down_column(s, layer, feature, target);
}
int64_t insert_steady_coordinate(const std::vector<const std::vector<float>*>& xs, const std::vector<float>& x0) {
  return steady_coordinate(xs, x0);
}
std::string insert_lower(std::string s) { return lower(std::move(s)); }
std::vector<std::string> insert_decoy_prompts() { return {std::begin(kDecoys), std::end(kDecoys)}; }
std::vector<std::string> insert_decoy_entities() { return {std::begin(kEntities), std::end(kEntities)}; }
std::string insert_expert_suffix(Session& s, int64_t layer, int64_t feature) { return expert_suffix(s, layer, feature); }

void need_weights(Session& s, const std::string& what, Pos pos) {
  if (!s.runs_model())
    throw Error(ErrorKind::Unsupported, what + " at " + pos.str() + " needs a vindex with model weights; " + s.path() +
                                            " was extracted at level " + vindex::extract_level_name(s.index().extract_level) +
                                            " (larql extract MODEL -o X.vindex --level inference)");
}

void record_edits(Session& s, std::vector<PatchOp> ops, std::vector<std::string>* notes) {
  if (ops.empty()) return;
  // A value beyond f16's range would be inf in the stored weights, and the patch could not be read
  // back (patch_from_json refuses it): refused here, before anything is applied.
  for (const auto& op : ops)
    for (const auto* v : {&op.gate, &op.up, &op.down, &op.key})
      if (const int64_t i = out_of_range_value(*v); i >= 0)
        throw Error(ErrorKind::InvalidArgument, "the edit of layer " + std::to_string(op.layer) + " holds the value " +
                                                    std::to_string((*v)[static_cast<size_t>(i)]) +
                                                    ", beyond +-65504 (the f16 range edits are held to); nothing was installed: "
                                                    "try a smaller ALPHA or another layer");
  EditState& e = s.edits();
  if (!e.recording) {
    e.recording = NamedPatch{"", Patch{}};
    e.anonymous = true;
    notes->push_back("Auto-patch started: the edits live in this session only (BEGIN PATCH \"file.vlp\" then SAVE PATCH "
                     "writes them to a file)");
  }
  const EditState saved = e;
  try {
    for (auto& op : ops) {
      e.apply(s.base_source("an edit"), op);
      e.recording->patch.ops.push_back(std::move(op));
    }
  } catch (...) {
    e = saved;  // all of the statement's ops or none
    throw;
  }
  publish(s);
}

std::string canonical_prompt(const std::string& relation, const std::string& entity) {
  std::string r = relation;
  for (char& c : r)
    if (c == '-' || c == '_') c = ' ';
  return "The " + r + " of " + entity + " is";
}

int64_t target_token(Session& s, const std::string& target, Pos pos, const char* what, size_t* n_tokens) {
  const std::string text = (!target.empty() && target.front() == ' ') ? target : " " + target;
  auto ids = s.tokenizer().encode(text, false, false);
  if (ids.empty()) ids = s.tokenizer().encode(target, false, false);
  if (ids.empty()) throw Error(ErrorKind::InvalidArgument, std::string(what) + " at " + pos.str() + ": the target has no tokens");
  // The first token is the one taught: one that is only a blank (an emoji's byte pieces follow a
  // lone "▁") would carry nothing of the target.
  if (ids.size() > 1 && blank_value(s.tokenizer().decode({ids[0]})))
    throw Error(ErrorKind::InvalidArgument, std::string(what) + " at " + pos.str() + ": the target \"" + target +
                                                "\" starts with a token that is only a blank (id " + std::to_string(ids[0]) +
                                                "), and the first token is the one taught: use a target that starts with a word");
  if (n_tokens) *n_tokens = ids.size();
  return ids[0];
}

Table exec_insert(Session& s, const InsertStmt& st, Pos pos) {
  const auto t0 = std::chrono::steady_clock::now();
  need_weights(s, "INSERT", pos);
  const InsertMode mode = st.mode.value_or(InsertMode::Compose);
  const int64_t hidden = s.index().hidden_size;
  const int64_t layer = st.layer.value_or(default_layer(s));
  check_layer(s, layer, st.layer ? st.layer_pos : pos);
  if (blank_value(st.entity)) throw Error(ErrorKind::InvalidArgument, "INSERT at " + pos.str() + ": the entity is empty");
  if (blank_value(st.relation)) throw Error(ErrorKind::InvalidArgument, "INSERT at " + pos.str() + ": the relation is empty");
  if (blank_value(st.target)) throw Error(ErrorKind::InvalidArgument, "INSERT at " + pos.str() + ": the target is empty");
  if (st.confidence && !(*st.confidence >= 0 && *st.confidence <= 1))
    throw Error(ErrorKind::InvalidArgument, "INSERT at " + st.confidence_pos.str() + ": CONFIDENCE must be in [0, 1]");
  if (st.alpha && !(*st.alpha > 0 && *st.alpha <= 100))
    throw Error(ErrorKind::InvalidArgument, "INSERT at " + st.alpha_pos.str() + ": ALPHA must be in (0, 100]");
  // Each option belongs to one mode: refused in the other rather than parsed and ignored.
  if (mode != InsertMode::Knn && st.confidence)
    throw Error(ErrorKind::InvalidArgument,
                "INSERT at " + st.confidence_pos.str() +
                    ": CONFIDENCE weighs a KNN fact against the model (MODE KNN); a " +
                    std::string(mode == InsertMode::Robust ? "ROBUST" : mode == InsertMode::Subject ? "SUBJECT" : "COMPOSE") +
                    " fact is written into the weights, its strength is ALPHA");
  if (mode == InsertMode::Knn && st.alpha)
    throw Error(ErrorKind::InvalidArgument,
                "INSERT at " + st.alpha_pos.str() +
                    ": ALPHA scales a COMPOSE feature's output; a KNN fact has none (its weight is CONFIDENCE)");
  const std::string prompt = canonical_prompt(st.relation, st.entity);
  size_t target_tokens = 1;
  const int64_t target = target_token(s, st.target, pos, "INSERT", &target_tokens);
  const double conf = st.confidence.value_or(1.0);
  Table t;
  t.statement = "INSERT";
  if (target_tokens > 1)
    t.notes.push_back("the target is " + std::to_string(target_tokens) + " tokens; only the first, \"" +
                      s.tokenizer().decode({static_cast<int>(target)}) + "\", is taught: it becomes the next token, the rest of the target does not follow");
  t.columns = {{"entity"}, {"relation"}, {"target"}, {"target_id", Column::Type::Int}, {"mode"}, {"layer", Column::Type::Int},
               {"feature", Column::Type::Int}, {"probability", Column::Type::Float, 4}, {"probes", Column::Type::Int},
               {"ms", Column::Type::Float, 1}};
  PatchOp op;
  op.entity = st.entity;
  op.relation = st.relation;
  op.target = st.target;
  op.target_id = target;
  op.confidence = conf;
  op.layer = layer;
  if (mode == InsertMode::Knn) {
    op.kind = PatchOp::Kind::InsertKnn;
    op.key = ffn_in(s, prompt, layer);
    record(s, op, &t.notes);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    t.title = "Inserted: " + st.entity + " -[" + st.relation + "]-> " + st.target + " at L" + std::to_string(layer) +
              " (KNN store: " + std::to_string(s.edits().knn.size()) + " facts)";
    t.rows.push_back({st.entity, st.relation, st.target, target, std::string("knn"), layer, Cell{}, Cell{}, int64_t{0}, ms});
    return t;
  }
  if (mode == InsertMode::Robust) return exec_insert_robust(s, st, std::move(op), std::move(t), t0);
  if (mode == InsertMode::Subject) return exec_insert_subject(s, st, std::move(op), std::move(t), t0);
  // COMPOSE: one FFN feature whose gate fires on this prompt's FFN input and whose down column
  // writes the target's output direction (its lm_head row).
  const std::vector<float> x0 = ffn_in(s, prompt, layer);
  std::vector<std::vector<float>> decoys;
  for (const char* p : kDecoys) decoys.push_back(ffn_in(s, p, layer));
  for (const char* e : kEntities)
    if (lower(e) != lower(st.entity)) decoys.push_back(ffn_in(s, canonical_prompt(st.relation, e), layer));
  // Earlier facts of this session: a new gate must not fire on their prompts either.
  EditState& ed = s.edits();
  auto each_insert = [&](auto fn) {
    for (const auto& p : ed.applied)
      for (const auto& o : p.patch.ops) fn(o);
    if (ed.recording)
      for (const auto& o : ed.recording->patch.ops) fn(o);
  };
  each_insert([&](const PatchOp& o) {
    if (o.kind == PatchOp::Kind::Insert && o.layer == layer && lower(o.entity) != lower(st.entity))
      decoys.push_back(ffn_in(s, canonical_prompt(o.relation, o.entity), layer));
  });
  // ... nor on the prompts of facts compiled into this vindex (edits.json).
  for (const auto& e : s.compiled_edits())
    if (e.op == "insert" && e.layer == layer && !e.entity.empty() && lower(e.entity) != lower(st.entity))
      decoys.push_back(ffn_in(s, canonical_prompt(e.relation, e.entity), layer));
  // Modified Gram-Schmidt: r = x0 minus its projection on span(decoys).
  std::vector<std::vector<double>> basis;
  // v minus its projection on each basis vector in turn (modified Gram-Schmidt).
  auto project_out = [&](std::vector<double>& v) {
    for (const auto& b : basis) {
      double p = 0;
      for (int64_t i = 0; i < hidden; ++i) p += v[static_cast<size_t>(i)] * b[static_cast<size_t>(i)];
      for (int64_t i = 0; i < hidden; ++i) v[static_cast<size_t>(i)] -= p * b[static_cast<size_t>(i)];
    }
  };
  std::vector<double> mean(static_cast<size_t>(hidden), 0.0);
  for (const auto& d : decoys) {
    std::vector<double> q(d.begin(), d.end());
    for (int64_t i = 0; i < hidden; ++i) mean[static_cast<size_t>(i)] += d[static_cast<size_t>(i)] / static_cast<double>(decoys.size());
    project_out(q);
    double n = 0;
    for (double v : q) n += v * v;
    n = std::sqrt(n);
    if (n < 1e-6 * (1.0 + norm(d))) continue;
    for (double& v : q) v /= n;
    basis.push_back(std::move(q));
  }
  std::vector<double> r(x0.begin(), x0.end());
  project_out(r);
  double s0 = 0;
  for (double v : r) s0 += v * v;
  s0 = std::sqrt(s0);
  if (s0 < 1e-6) throw Error(ErrorKind::InvalidArgument, "INSERT at " + pos.str() + ": the prompt \"" + prompt +
                                                             "\" is indistinguishable from the decoy prompts at layer " +
                                                             std::to_string(layer));
  for (double& v : r) v /= s0;
  // A threshold without a bias: Gemma's FFN has none, but some coordinate k of the FFN input is
  // nearly constant over prompts (the RMS norm keeps a few dimensions fixed; on Gemma 3 270M
  // layer 13 one varies by 2% across the decoys). A gate weight on it acts as a bias, so
  // gate = G (r - (theta s0 / x0[k]) e_k) fires only where x . r exceeds theta = 0.8 of the fact's
  // own s0 (a decoy's is 0); GELU keeps it near zero elsewhere. Without such a coordinate, the
  // decoys' mean direction m stands in (less steady: m . x varies more across prompts).
  constexpr double kTheta = 0.8;
  std::vector<const std::vector<float>*> decoy_ptrs;
  for (const auto& d : decoys) decoy_ptrs.push_back(&d);
  const int64_t k = steady_coordinate(decoy_ptrs, x0);
  std::vector<double> bias_dir(static_cast<size_t>(hidden), 0.0);  // b with b . x0 = 1
  if (k >= 0) {
    bias_dir[static_cast<size_t>(k)] = 1.0 / x0[static_cast<size_t>(k)];
  } else {
    double m_x0 = 0;
    for (int64_t i = 0; i < hidden; ++i) m_x0 += mean[static_cast<size_t>(i)] * x0[static_cast<size_t>(i)];
    if (m_x0 > 0)
      for (int64_t i = 0; i < hidden; ++i) bias_dir[static_cast<size_t>(i)] = mean[static_cast<size_t>(i)] / m_x0;
  }
  const double pre = 6.0;  // the gate's pre-activation on the fact's prompt
  const double G = pre / ((1.0 - kTheta) * s0);
  op.kind = PatchOp::Kind::Insert;
  op.feature = pick_slot(s, layer, decoys, x0);
  op.gate.resize(static_cast<size_t>(hidden));
  op.up.resize(static_cast<size_t>(hidden));
  for (int64_t i = 0; i < hidden; ++i)
    op.gate[static_cast<size_t>(i)] = static_cast<float>(G * (r[static_cast<size_t>(i)] - kTheta * s0 * bias_dir[static_cast<size_t>(i)]));
  op.down = down_column(s, layer, op.feature, target);
  // Balance: the up row's scale A (the feature's activation on the prompt is about pre x A) is
  // doubled until the target is top-1 with probability >= 0.5, then bisected down to the least
  // A that still does it (a smaller edit disturbs other prompts less), then doubled (kMargin):
  // the least A sits at the edge in larql's arithmetic, and another engine's rounding of the
  // steep gate's input could put the fact on either side (docs/lql.md "COMPILE INTO MODEL and
  // llama.cpp": on the 10 test facts llama.cpp answered 8 at the least A, 9 at 1.5x, 2x and 3x,
  // and the unrelated prompts kept their top-1 alike, 193 of 200). ALPHA multiplies the result.
  const EditState saved = ed;
  auto probe = [&](double a, bool* top1) {
    for (int64_t i = 0; i < hidden; ++i) op.up[static_cast<size_t>(i)] = static_cast<float>(a * r[static_cast<size_t>(i)] / s0);
    EditState trial = saved;
    trial.apply(s.base_source("INSERT"), op);
    s.set_weights(trial.overlay, trial.gate_rows);
    return target_prob(s, prompt, target, top1);
  };
  constexpr double kMargin = 2.0;
  int probes = 0;
  double lo = 0, hi = -1, a = 1.0, best_p = -1, best_a = 1.0;
  bool top1 = false;
  try {
    for (; a <= 65536.0; a *= 2.0) {
      const double p = probe(a, &top1);
      ++probes;
      if (p > best_p) best_p = p, best_a = a;
      if (top1 && p >= 0.5) {
        hi = a;
        break;
      }
      lo = a;
    }
    if (hi > 0) {
      for (int k = 0; k < 4; ++k) {
        const double mid = 0.5 * (lo + hi);
        const double p = probe(mid, &top1);
        ++probes;
        if (top1 && p >= 0.5) hi = mid;
        else lo = mid;
      }
      best_a = hi * kMargin;
    }
  } catch (...) {
    ed = saved;
    publish(s);
    throw;
  }
  const double final_a = best_a * st.alpha.value_or(1.0);
  for (int64_t i = 0; i < hidden; ++i) op.up[static_cast<size_t>(i)] = static_cast<float>(final_a * r[static_cast<size_t>(i)] / s0);
  ed = saved;
  record(s, op, &t.notes);
  const double p = target_prob(s, prompt, target, &top1);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  t.title = "Inserted: " + st.entity + " -[" + st.relation + "]-> " + st.target + " at L" + std::to_string(layer) +
            ", feature " + std::to_string(op.feature) + expert_suffix(s, layer, op.feature) + " (compose)";
  if (!top1) t.notes.push_back("the target is not the top prediction of \"" + prompt + "\" after balancing");
  t.rows.push_back({st.entity, st.relation, st.target, target, std::string("compose"), layer, op.feature, p,
                    static_cast<int64_t>(probes), ms});
  add_expert_column(s, t);
  return t;
}

Table exec_patch(Session& s, const PatchStmt& st, Pos pos) {
  EditState& ed = s.edits();
  Table t;
  t.statement = "PATCH";
  static constexpr const char* kOpName[] = {"BEGIN PATCH", "SAVE PATCH", "APPLY PATCH", "REMOVE PATCH"};
  const char* what = kOpName[static_cast<int>(st.op)];
  // BEGIN / SAVE record and write; APPLY and REMOVE rebuild the weights, which need the model.
  auto base = [&] {
    need_weights(s, what, pos);
    return s.base_source("PATCH");
  };
  if (st.op != PatchStmt::Op::Save && blank_value(st.name))
    throw Error(ErrorKind::InvalidArgument, std::string(what) + " at " + pos.str() + ": the patch path is empty");
  switch (st.op) {
    case PatchStmt::Op::Begin:
      if (ed.recording && !ed.anonymous)
        throw Error(ErrorKind::InvalidArgument, "BEGIN PATCH at " + pos.str() + ": patch \"" + ed.recording->name +
                                                    "\" is being recorded (SAVE PATCH first)");
      {
        // The file SAVE PATCH will write: checked now, before any edit is recorded. A patch file
        // ends in .vlp (so SAVE never replaces another kind of file), lives in an existing
        // directory, and never inside the vindex in use.
        namespace fs = std::filesystem;
        std::error_code ec;
        const fs::path path = fs::weakly_canonical(fs::absolute(st.name));
        if (path.extension() != ".vlp")
          throw Error(ErrorKind::InvalidArgument, "BEGIN PATCH at " + pos.str() + ": a patch file's name ends in .vlp, got \"" + st.name + "\"");
        if (!fs::is_directory(path.parent_path(), ec))
          throw Error(ErrorKind::NotFound, "BEGIN PATCH at " + pos.str() + ": no directory " + path.parent_path().string());
        const auto rel = path.lexically_relative(fs::weakly_canonical(fs::absolute(s.path())));
        if (!rel.empty() && *rel.begin() != "..")
          throw Error(ErrorKind::InvalidArgument, "BEGIN PATCH at " + pos.str() + ": " + st.name + " is inside the vindex in use");
        if (fs::exists(path, ec) && !fs::is_regular_file(path, ec))
          throw Error(ErrorKind::InvalidArgument, "BEGIN PATCH at " + pos.str() + ": " + st.name + " exists and is not a file");
        refuse_existing_patch("BEGIN PATCH", st.name, pos);
      }
      if (!ed.recording) ed.recording = NamedPatch{st.name, Patch{}};
      ed.recording->name = st.name;
      ed.anonymous = false;
      t.title = "Patch session started: " + st.name;
      return t;
    case PatchStmt::Op::Save: {
      if (!ed.recording) throw Error(ErrorKind::InvalidArgument, "SAVE PATCH at " + pos.str() + ": no patch is being recorded");
      if (ed.anonymous)
        throw Error(ErrorKind::InvalidArgument, "SAVE PATCH at " + pos.str() +
                                                    ": the edits so far have no file; BEGIN PATCH \"name.vlp\" names it, then SAVE PATCH");
      NamedPatch p = *ed.recording;
      p.patch.base_model = s.index().model;
      p.patch.base_fingerprint = base()->fingerprint();
      p.patch.created_at = utc_timestamp();
      p.patch.description = p.name;
      refuse_existing_patch("SAVE PATCH", p.name, pos);  // it may have appeared since BEGIN PATCH
      save_patch(p.name, p.patch, /*replace=*/false);
      // The recorded ops stay live, now as an applied patch.
      ed.applied.push_back(std::move(p));
      ed.recording.reset();
      t.title = "Saved: " + ed.applied.back().name + " (" + std::to_string(ed.applied.back().patch.ops.size()) + " operations)";
      return t;
    }
    case PatchStmt::Op::Apply: {
      for (const auto& p : ed.applied)
        if (same_patch(p.name, st.name)) throw Error(ErrorKind::InvalidArgument, "APPLY PATCH at " + pos.str() + ": \"" + st.name + "\" is already applied");
      const std::string fp = base()->fingerprint();
      Patch p;
      try {
        p = load_patch(st.name, limits(s));
      } catch (const Error& e) {  // the file's own error ("x.vlp: operations[1]...") with the statement's place
        throw Error(e.kind(), std::string(what) + " at " + pos.str() + ": " + e.what());
      }
      if (p.base_model != s.index().model)
        throw Error(ErrorKind::InvalidArgument, "APPLY PATCH at " + pos.str() + ": " + st.name + " was made for model \"" +
                                                    p.base_model + "\", the vindex in use holds \"" + s.index().model + "\"");
      if (p.base_fingerprint != fp)
        t.notes.push_back("warning: " + st.name + " was made on another build of \"" + p.base_model + "\" (fingerprint " +
                          p.base_fingerprint + "; this vindex: " + fp + "); applied anyway");
      relocate_appended(s, st.name, p, &t.notes);
      ed.applied.push_back(NamedPatch{st.name, std::move(p)});
      try {
        ed.rebuild(base());
      } catch (...) {
        ed.applied.pop_back();
        ed.rebuild(base());
        throw;
      }
      publish(s);
      t.title = "Applied: " + st.name + " (" + std::to_string(ed.applied.back().patch.ops.size()) + " operations)";
      return t;
    }
    case PatchStmt::Op::Remove: {
      auto it = std::find_if(ed.applied.begin(), ed.applied.end(), [&](const NamedPatch& p) { return same_patch(p.name, st.name); });
      if (it == ed.applied.end()) {
        if (ed.recording && !st.name.empty() && same_patch(ed.recording->name, st.name)) {
          ed.recording.reset();
        } else {
          std::string names;
          for (const auto& p : ed.applied) names += (names.empty() ? "" : ", ") + p.name;
          throw Error(ErrorKind::NotFound, "REMOVE PATCH at " + pos.str() + ": no patch \"" + st.name + "\" (applied: " +
                                               (names.empty() ? "none" : names) + ")");
        }
      } else {
        ed.applied.erase(it);
      }
      ed.rebuild(base());
      publish(s);
      t.title = "Removed: " + st.name;
      return t;
    }
  }
  return t;
}

Table exec_show_patches(Session& s) {
  EditState& ed = s.edits();
  Table t;
  t.statement = "SHOW";
  t.title = "Patches on " + s.path();
  t.columns = {{"n", Column::Type::Int}, {"name"}, {"state"}, {"ops", Column::Type::Int}, {"inserts", Column::Type::Int},
               {"knn", Column::Type::Int}, {"updates", Column::Type::Int}, {"deletes", Column::Type::Int}};
  int64_t n = 1;
  auto add = [&](const NamedPatch& p, const std::string& state) {
    int64_t c[5] = {0, 0, 0, 0, 0};
    for (const auto& o : p.patch.ops) ++c[static_cast<int>(o.kind)];
    t.rows.push_back({n++, p.name.empty() ? std::string("(anonymous)") : p.name, state, static_cast<int64_t>(p.patch.ops.size()),
                      c[0], c[3], c[1], c[2] + c[4]});
  };
  for (const auto& p : ed.applied) add(p, "applied");
  if (ed.recording) add(*ed.recording, "recording");
  if (t.rows.empty()) t.notes.push_back("(no patches)");
  return t;
}

std::optional<KnnMatch> knn_lookup(Session& s, const ForwardRun& run, const std::string& prompt, bool verify) {
  if (!s.has_vindex()) return std::nullopt;
  const EditState& ed = s.edits();
  std::optional<KnnMatch> best;
  const std::string lp = lower(prompt);
  for (size_t i = 0; i < ed.knn.size(); ++i) {
    const KnnFact& f = ed.knn[i];
    if (f.layer < 0 || static_cast<size_t>(f.layer) >= run.rows.size()) continue;
    const auto& x = run.rows[static_cast<size_t>(f.layer)].ffn_in;
    const double n = norm(x);
    if (n == 0) continue;
    const double cos = dot(x.data(), f.key.data(), static_cast<int64_t>(x.size())) / n;
    if (cos < kKnnThreshold) continue;
    const bool mentioned = lp.find(lower(f.entity)) != std::string::npos;
    if (verify && !mentioned) {
      if (!best || (best->refused && cos > best->cosine)) best = KnnMatch{i, cos, true};
      continue;
    }
    if (!best || best->refused || cos > best->cosine) best = KnnMatch{i, cos, false};
  }
  return best;
}

}  // namespace larql::lql::detail
