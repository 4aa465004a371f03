// `larql compare VINDEX_A VINDEX_B`: an A/B of two vindexes of one model (docs/cli.md "compare") —
// which FFN features differ (per layer: gate rows from gate_vectors.bin, and with model weights on
// both sides up rows and down columns, with the largest |Δ| and the cosine), which edges differ
// (down_meta's top tokens) and which relation labels, the other tensors that differ, and the
// knowledge edits compiled into either side (edits.json, knn_facts.vlp). Two vindexes of
// different models (index.json's shape or model_config, or the source fingerprint) are refused.
// LQL's DIFF (src/lql/exec_diff.cc) is the per-feature table inside a session; this verb is the
// whole-vindex report for scripts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/progress.h"
#include "lql/patch.h"
#include "model/ffn_features.h"
#include "model/vindex_source.h"
#include "quant/quant.h"
#include "tokenizer/hf_json.h"
#include "util/error.h"
#include "util/half.h"
#include "util/mmap.h"
#include "vindex/down_meta_file.h"
#include "vindex/edited_slots.h"
#include "vindex/index.h"
#include "vindex/labels.h"

namespace larql::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct CompareArgs {
  std::string a, b;
  int64_t limit = 50;
  double tolerance = 0;
  bool json = false, force = false;
};

/// One vindex, opened for comparison.
struct Side {
  std::string path;
  vindex::VindexIndex ix;
  MappedFile gate;
  std::unique_ptr<vindex::DownMetaFile> dm;
  std::unique_ptr<vindex::FeatureLabels> labels;
  std::vector<vindex::EditedSlot> edits;
  int64_t knn_facts = 0;
  std::shared_ptr<const Model> model;  ///< level inference and above
};

Side open_side(const std::string& name, const char* which) {
  Side s;
  s.path = resolve_model(name);
  std::error_code ec;
  if (!fs::is_directory(s.path, ec) || !fs::exists(fs::path(s.path) / "index.json", ec))
    throw Error(ErrorKind::InvalidArgument, std::string("compare: ") + which + " " + s.path +
                                                " is not a vindex (a directory with index.json); make one with `larql extract MODEL -o X.vindex`");
  s.ix = vindex::read_index(s.path);
  const fs::path d(s.path);
  if (s.ix.checksums.count("gate_vectors.bin")) s.gate = MappedFile::open((d / "gate_vectors.bin").string());
  if (s.ix.checksums.count("down_meta.bin")) s.dm = std::make_unique<vindex::DownMetaFile>(vindex::DownMetaFile::open((d / "down_meta.bin").string()));
  if (fs::exists(d / "feature_labels.json", ec))
    s.labels = std::make_unique<vindex::FeatureLabels>(vindex::read_feature_labels(s.path));
  s.edits = vindex::read_edited_slots(s.path);
  if (fs::exists(d / "knn_facts.vlp", ec)) {
    lql::PatchLimits lim{s.ix.num_layers, s.ix.intermediate_size, s.ix.hidden_size, s.ix.vocab_size};
    s.knn_facts = static_cast<int64_t>(lql::load_patch((d / "knn_facts.vlp").string(), lim).ops.size());
  }
  if (s.ix.has_model_weights && s.ix.extract_level >= vindex::ExtractLevel::Inference)
    s.model = Model::load(std::shared_ptr<const WeightSource>(VindexSource::open(s.path)));
  register_input(s.path, "the vindex");
  return s;
}

[[noreturn]] void different(const Side& a, const Side& b, const std::string& what) {
  throw Error(ErrorKind::InvalidArgument, "compare: " + a.path + " and " + b.path + " are not two vindexes of one model: " + what +
                                              " (compare is an A/B of one model; to compare two models' outputs use `larql parity`)");
}

/// Refuses two different models, naming the first thing that differs.
void check_same_model(const Side& a, const Side& b, bool force) {
  auto num = [&](const char* what, int64_t x, int64_t y) {
    if (x != y) different(a, b, std::string(what) + " " + std::to_string(x) + " vs " + std::to_string(y));
  };
  if (a.ix.family != b.ix.family) different(a, b, "family " + a.ix.family + " vs " + b.ix.family);
  num("layers", a.ix.num_layers, b.ix.num_layers);
  num("hidden size", a.ix.hidden_size, b.ix.hidden_size);
  num("FFN features", a.ix.intermediate_size, b.ix.intermediate_size);
  num("vocabulary", a.ix.vocab_size, b.ix.vocab_size);
  json ca = json::parse(a.ix.model_config_json), cb = json::parse(b.ix.model_config_json);
  ca.erase("name"), cb.erase("name");
  for (auto it = ca.begin(); it != ca.end(); ++it)
    if (!cb.contains(it.key()) || cb[it.key()] != it.value()) different(a, b, "model_config." + it.key() + " differs");
  for (auto it = cb.begin(); it != cb.end(); ++it)
    if (!ca.contains(it.key())) different(a, b, "model_config." + it.key() + " differs");
  const std::string &fa = a.ix.source.fingerprint, &fb = b.ix.source.fingerprint;
  if (!force && !fa.empty() && !fb.empty() && fa != fb)
    different(a, b, "they were extracted from different sources (fingerprints " + fa + " and " + fb +
                        "; --force compares them anyway when they are builds of one model)");
}

/// Row r of a layer's gate vectors as floats.
void gate_row(const Side& s, int64_t layer, int64_t f, std::vector<float>& out) {
  const auto& slot = s.ix.layers[static_cast<size_t>(layer)];
  const int64_t h = s.ix.hidden_size;
  const int es = vindex::dtype_size(s.ix.dtype);
  const uint8_t* p = s.gate.data() + slot.offset + static_cast<uint64_t>(f * h * es);
  out.resize(static_cast<size_t>(h));
  for (int64_t i = 0; i < h; ++i) {
    if (es == 4) std::memcpy(&out[static_cast<size_t>(i)], p + 4 * i, 4);
    else {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[static_cast<size_t>(i)] = s.ix.dtype == "f16" ? f16_to_f32(v) : bf16_to_f32(v);
    }
  }
}

/// Every feature's down column of a layer, feature-major [features, hidden].
std::vector<float> down_columns(const Model& m, int64_t layer) {
  const ModelConfig& c = m.config();
  std::vector<float> out(static_cast<size_t>(ffn_feature_count(c) * c.hidden)), row;
  int64_t f0 = 0;
  for (const TensorView* d : ffn_down_matrices(c, m.weights().layers[static_cast<size_t>(layer)])) {
    row.resize(static_cast<size_t>(d->cols));
    for (int64_t r = 0; r < d->rows; ++r) {
      quant::dequantize_row(d->type, d->row(r), row.data(), d->cols);
      for (int64_t f = 0; f < d->cols; ++f) out[static_cast<size_t>((f0 + f) * c.hidden + r)] = row[static_cast<size_t>(f)];
    }
    f0 += d->cols;
  }
  return out;
}

/// How two vectors differ.
struct Delta {
  bool changed = false;
  double max_abs = 0, cosine = 1;
};

Delta delta(const float* a, const float* b, int64_t n, double tol) {
  Delta d;
  double ab = 0, aa = 0, bb = 0;
  const bool bits_differ = std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) != 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[i], y = b[i];
    d.max_abs = std::max(d.max_abs, std::fabs(x - y));
    ab += x * y, aa += x * x, bb += y * y;
  }
  d.cosine = aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
  d.changed = tol > 0 ? d.max_abs > tol : bits_differ;
  return d;
}

json delta_json(const Delta& d) { return {{"max_abs", d.max_abs}, {"cosine", d.cosine}}; }

/// Per layer: how many features changed in each part, the largest |Δ| and the lowest cosine.
struct LayerSum {
  int64_t features = 0, changed = 0, gate = 0, up = 0, down = 0, edges = 0, labels = 0;
  double gate_max = 0, up_max = 0, down_max = 0, gate_cos = 1, up_cos = 1, down_cos = 1;
};

json slot_json(const vindex::EditedSlot& e) {
  json j = {{"layer", e.layer}, {"feature", e.feature}, {"op", e.op}};
  if (!e.entity.empty()) j.update({{"entity", e.entity}, {"relation", e.relation}, {"target", e.target}});
  return j;
}

json tensors_json(const Side& a, const Side& b, double tol, int64_t& compared) {
  json out = json::array();
  const WeightSource &sa = a.model->source(), &sb = b.model->source();
  const ModelConfig& c = a.model->config();
  for (TensorRole role : all_tensor_roles()) {
    const bool ffn = role == TensorRole::FfnGate || role == TensorRole::FfnUp || role == TensorRole::FfnDown ||
                     role == TensorRole::FfnGateExps || role == TensorRole::FfnUpExps || role == TensorRole::FfnDownExps ||
                     role == TensorRole::FfnGateShexp || role == TensorRole::FfnUpShexp || role == TensorRole::FfnDownShexp;
    if (ffn) continue;  // compared feature by feature
    const bool per_layer = is_layer_role(role);
    for (int64_t l = per_layer ? 0 : -1; l < (per_layer ? c.n_layers : 0); ++l) {
      const auto ta = sa.tensor(role, l), tb = sb.tensor(role, l);
      if (!ta && !tb) continue;
      ++compared;
      json row = {{"tensor", tensor_role_name(role)}, {"layer", l >= 0 ? json(l) : json()}};
      if (!ta || !tb) {
        row["only_in"] = ta ? "a" : "b";
        out.push_back(row);
        continue;
      }
      if (ta->type == tb->type && ta->nbytes == tb->nbytes && std::memcmp(ta->data, tb->data, ta->nbytes) == 0) continue;
      const uint64_t cols = ta->dims.empty() ? 1 : ta->dims[0];
      const auto ra = row_bytes(ta->type, cols), rb = row_bytes(tb->type, cols);
      if (ta->dims != tb->dims || !ra || !rb) {
        row["shape_differs"] = true;
        out.push_back(row);
        continue;
      }
      const int64_t rows = static_cast<int64_t>(ta->nbytes / *ra);
      std::vector<float> x(cols), y(cols);
      Delta worst;
      double ab = 0, aa = 0, bb = 0;
      for (int64_t r = 0; r < rows; ++r) {
        quant::dequantize_row(ta->type, ta->data + static_cast<uint64_t>(r) * *ra, x.data(), static_cast<int64_t>(cols));
        quant::dequantize_row(tb->type, tb->data + static_cast<uint64_t>(r) * *rb, y.data(), static_cast<int64_t>(cols));
        const Delta d = delta(x.data(), y.data(), static_cast<int64_t>(cols), tol);
        worst.changed |= d.changed;
        worst.max_abs = std::max(worst.max_abs, d.max_abs);
        for (uint64_t i = 0; i < cols; ++i) ab += double(x[i]) * y[i], aa += double(x[i]) * x[i], bb += double(y[i]) * y[i];
      }
      if (!worst.changed) continue;  // same values (within the tolerance), another storage
      worst.cosine = aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 1.0;
      row.update(delta_json(worst));
      out.push_back(row);
    }
  }
  return out;
}

void run(const CompareArgs& args) {
  const Side a = open_side(args.a, "A");
  const Side b = open_side(args.b, "B");
  check_same_model(a, b, args.force);
  const bool weights = a.model && b.model;
  const bool edges = a.dm && b.dm;
  const bool gates = a.gate.size() > 0 && b.gate.size() > 0 && !a.ix.layers.empty() && !b.ix.layers.empty();
  const Tokenizer tok(vocab_from_directory(a.path));
  auto piece = [&](uint32_t id) -> json {
    return static_cast<int32_t>(id) < tok.vocab_size() ? json(tok.decode({static_cast<int32_t>(id)})) : json(id);
  };
  const int64_t L = a.ix.num_layers;
  std::vector<LayerSum> sums(static_cast<size_t>(L));
  json features = json::array();
  int64_t total_changed = 0, compared = 0;
  Progress bar("compare (layers)", L);
  std::vector<float> ga, gb, ua, ub;
  for (int64_t l = 0; l < L; ++l) {
    LayerSum& s = sums[static_cast<size_t>(l)];
    const int64_t nf = gates ? a.ix.layers[static_cast<size_t>(l)].num_features : a.ix.intermediate_size;
    s.features = nf;
    std::vector<float> da, db;
    if (weights) da = down_columns(*a.model, l), db = down_columns(*b.model, l);
    const int64_t h = a.ix.hidden_size;
    for (int64_t f = 0; f < nf; ++f) {
      json changed = json::array();
      json row = {{"layer", l}, {"feature", f}};
      if (a.ix.layers.size() > static_cast<size_t>(l) && a.ix.layers[static_cast<size_t>(l)].num_experts > 0)
        row["expert"] = ffn_feature_expert_label(vindex::expert_of(a.ix.layers[static_cast<size_t>(l)], f));
      if (gates) {
        gate_row(a, l, f, ga);
        gate_row(b, l, f, gb);
        const Delta d = delta(ga.data(), gb.data(), h, args.tolerance);
        if (d.changed) {
          changed.push_back("gate"), row["gate"] = delta_json(d), ++s.gate;
          s.gate_max = std::max(s.gate_max, d.max_abs), s.gate_cos = std::min(s.gate_cos, d.cosine);
        }
      }
      if (weights) {
        const FfnFeatureViews va = ffn_feature_views(a.model->config(), a.model->weights().layers[static_cast<size_t>(l)], f);
        const FfnFeatureViews vb = ffn_feature_views(b.model->config(), b.model->weights().layers[static_cast<size_t>(l)], f);
        ua.resize(static_cast<size_t>(va.up->cols)), ub.resize(static_cast<size_t>(vb.up->cols));
        quant::dequantize_row(va.up->type, va.up->row(va.row), ua.data(), va.up->cols);
        quant::dequantize_row(vb.up->type, vb.up->row(vb.row), ub.data(), vb.up->cols);
        const Delta du = delta(ua.data(), ub.data(), va.up->cols, args.tolerance);
        if (du.changed) {
          changed.push_back("up"), row["up"] = delta_json(du), ++s.up;
          s.up_max = std::max(s.up_max, du.max_abs), s.up_cos = std::min(s.up_cos, du.cosine);
        }
        const Delta dd = delta(&da[static_cast<size_t>(f * h)], &db[static_cast<size_t>(f * h)], h, args.tolerance);
        if (dd.changed) {
          changed.push_back("down"), row["down"] = delta_json(dd), ++s.down;
          s.down_max = std::max(s.down_max, dd.max_abs), s.down_cos = std::min(s.down_cos, dd.cosine);
        }
      }
      if (edges && l < a.dm->num_layers() && f < a.dm->num_features(static_cast<uint32_t>(l)) &&
          f < b.dm->num_features(static_cast<uint32_t>(l))) {
        bool differ = false;
        for (uint32_t k = 0; k < std::min(a.dm->top_k(), b.dm->top_k()); ++k)
          differ |= a.dm->entry(static_cast<uint32_t>(l), static_cast<uint32_t>(f), k).token !=
                    b.dm->entry(static_cast<uint32_t>(l), static_cast<uint32_t>(f), k).token;
        if (differ) {
          changed.push_back("edges"), ++s.edges;
          row["top_a"] = piece(a.dm->entry(static_cast<uint32_t>(l), static_cast<uint32_t>(f), 0).token);
          row["top_b"] = piece(b.dm->entry(static_cast<uint32_t>(l), static_cast<uint32_t>(f), 0).token);
        }
      }
      const auto* la = a.labels ? a.labels->find(l, f) : nullptr;
      const auto* lb = b.labels ? b.labels->find(l, f) : nullptr;
      if ((la != nullptr) != (lb != nullptr) || (la && la->relation != lb->relation)) {
        changed.push_back("label"), ++s.labels;
        row["label_a"] = la ? json(la->relation) : json();
        row["label_b"] = lb ? json(lb->relation) : json();
      }
      ++compared;
      if (changed.empty()) continue;
      ++s.changed, ++total_changed;
      row["changed"] = changed;
      if (static_cast<int64_t>(features.size()) < args.limit) features.push_back(row);
    }
    bar.update(l + 1);
  }
  int64_t tensors_compared = 0;
  const json tensors = weights ? tensors_json(a, b, args.tolerance, tensors_compared) : json::array();
  json layers = json::array();
  for (int64_t l = 0; l < L; ++l) {
    const LayerSum& s = sums[static_cast<size_t>(l)];
    json j = {{"layer", l}, {"features", s.features}, {"changed", s.changed}, {"gate", s.gate}, {"up", s.up},
              {"down", s.down}, {"edges", s.edges}, {"labels", s.labels}};
    if (s.gate) j["gate_max_abs"] = s.gate_max, j["gate_min_cosine"] = s.gate_cos;
    if (s.up) j["up_max_abs"] = s.up_max, j["up_min_cosine"] = s.up_cos;
    if (s.down) j["down_max_abs"] = s.down_max, j["down_min_cosine"] = s.down_cos;
    layers.push_back(j);
  }
  auto side_json = [](const Side& s) {
    json slots = json::array();
    for (const auto& e : s.edits) slots.push_back(slot_json(e));
    return json{{"path", s.path}, {"model", s.ix.model}, {"quant", s.ix.quant}, {"dtype", s.ix.dtype},
                {"level", vindex::extract_level_name(s.ix.extract_level)}, {"fingerprint", s.ix.source.fingerprint},
                {"edited_slots", slots}, {"knn_facts", s.knn_facts}};
  };
  int64_t by[5] = {0, 0, 0, 0, 0};
  for (const auto& s : sums) by[0] += s.gate, by[1] += s.up, by[2] += s.down, by[3] += s.edges, by[4] += s.labels;
  const bool identical = total_changed == 0 && tensors.empty() && a.knn_facts == b.knn_facts;
  std::vector<std::string> compared_parts;
  if (gates) compared_parts.push_back("gate");
  if (weights) compared_parts.push_back("up"), compared_parts.push_back("down"), compared_parts.push_back("other tensors");
  if (edges) compared_parts.push_back("edges");
  compared_parts.push_back("labels");
  const json j = {{"a", side_json(a)},
                  {"b", side_json(b)},
                  {"tolerance", args.tolerance},
                  {"compared", compared_parts},
                  {"summary", {{"identical", identical}, {"features_compared", compared}, {"features_changed", total_changed},
                               {"gate", by[0]}, {"up", by[1]}, {"down", by[2]}, {"edges", by[3]}, {"labels", by[4]},
                               {"tensors_compared", tensors_compared}, {"tensors_changed", tensors.size()}}},
                  {"layers", layers},
                  {"features", features},
                  {"features_shown", features.size()},
                  {"tensors", tensors}};
  if (args.json) {
    std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    return;
  }
  for (const Side* s : {&a, &b}) {
    std::printf("%s  %s (%s, %s, quant %s, %s)\n", s == &a ? "A" : "B", s->path.c_str(), s->ix.model.c_str(),
                vindex::extract_level_name(s->ix.extract_level), s->ix.quant.c_str(), s->ix.dtype.c_str());
    std::printf("   compiled edits: %zu slot%s", s->edits.size(), s->edits.size() == 1 ? "" : "s");
    for (size_t i = 0; i < s->edits.size() && i < 8; ++i) {
      const auto& e = s->edits[i];
      std::printf("%s L%lld F%lld %s%s", i ? "," : ":", (long long)e.layer, (long long)e.feature, e.op.c_str(),
                  e.entity.empty() ? "" : (" (" + e.entity + ", " + e.relation + ", " + e.target + ")").c_str());
    }
    std::printf("%s; KNN facts: %lld\n", s->edits.size() > 8 ? " ..." : "", (long long)s->knn_facts);
  }
  std::printf("compared: ");
  for (size_t i = 0; i < compared_parts.size(); ++i) std::printf("%s%s", i ? ", " : "", compared_parts[i].c_str());
  if (args.tolerance > 0) std::printf(" (a part differs where some |a - b| > %g)\n", args.tolerance);
  else std::printf(" (bit for bit)\n");
  if (identical) {
    std::printf("no differences: %lld features and %lld other tensors are the same\n", (long long)compared, (long long)tensors_compared);
    return;
  }
  std::printf("%lld of %lld features differ (gate %lld, up %lld, down %lld, edges %lld, labels %lld); %zu of %lld other tensors differ\n",
              (long long)total_changed, (long long)compared, (long long)by[0], (long long)by[1], (long long)by[2], (long long)by[3],
              (long long)by[4], tensors.size(), (long long)tensors_compared);
  std::printf("\nlayer  changed  gate    up  down edges   max|dgate| min cos    max|dup|  max|ddown| min cos\n");
  for (const LayerSum& s : sums) {
    if (!s.changed) continue;
    std::printf("L%-5lld %7lld %5lld %5lld %5lld %5lld %12.4g %8.5f %11.4g %11.4g %8.5f\n", (long long)(&s - sums.data()),
                (long long)s.changed, (long long)s.gate, (long long)s.up, (long long)s.down, (long long)s.edges, s.gate_max, s.gate_cos,
                s.up_max, s.down_max, s.down_cos);
  }
  std::printf("\nfeatures (%zu of %lld shown; --limit):\n", features.size(), (long long)total_changed);
  for (const auto& f : features) {
    std::string parts;
    for (const auto& p : f["changed"]) parts += (parts.empty() ? "" : ",") + p.get<std::string>();
    std::printf("  L%lld F%lld%s  %-22s", f["layer"].get<long long>(), f["feature"].get<long long>(),
                f.contains("expert") ? (" " + f["expert"].get<std::string>()).c_str() : "", parts.c_str());
    for (const char* part : {"gate", "up", "down"})
      if (f.contains(part)) std::printf("  %s |d| %.4g cos %.5f", part, f[part]["max_abs"].get<double>(), f[part]["cosine"].get<double>());
    if (f.contains("top_a"))
      std::printf("  top %s -> %s", f["top_a"].dump(-1, ' ', false, json::error_handler_t::replace).c_str(),
                  f["top_b"].dump(-1, ' ', false, json::error_handler_t::replace).c_str());
    std::printf("\n");
  }
  if (!tensors.empty()) {
    std::printf("\nother tensors that differ:\n");
    for (const auto& t : tensors)
      std::printf("  %s%s%s\n", t["tensor"].get<std::string>().c_str(),
                  t["layer"].is_null() ? "" : (" L" + std::to_string(t["layer"].get<int64_t>())).c_str(),
                  t.contains("max_abs") ? ("  |d| " + std::to_string(t["max_abs"].get<double>())).c_str()
                                        : t.contains("only_in") ? ("  only in " + t["only_in"].get<std::string>()).c_str() : "  shape differs");
  }
}

}  // namespace

void register_compare(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* s = app.add_subcommand("compare", "A/B of two vindexes of one model: the features, edges, labels and tensors that differ");
  s->footer(
      "Examples:\n"
      "  larql compare gemma.vindex edited.vindex            # what an INSERT / COMPILE changed\n"
      "  larql compare f16.vindex f32.vindex --tolerance 1e-3 --force\n"
      "  larql compare a.vindex b.vindex --json --limit 1000");
  s->add_option("a", a->a, "vindex A (a directory with index.json, or a name in models/)")->required();
  s->add_option("b", a->b, "vindex B, of the same model")->required();
  add_int_flag(s, "--limit", a->limit, 0, INT32_MAX, "list at most N differing features (the counts cover all),");
  add_float_flag(s, "--tolerance", a->tolerance, FloatRange{0.0, 1e30},
                 "a part differs when some |a - b| exceeds this (0: when any bit differs),");
  s->add_flag("--force", a->force, "compare even when the two were extracted from sources with different fingerprints");
  s->add_flag("--json", a->json, "print one JSON object");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
