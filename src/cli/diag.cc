// `larql diag MODEL`: a model's health (docs/cli.md "diag"). Every stored tensor is dequantised
// and checked for NaN / Inf (naming the tensor and its layer) with its largest |value|; then a
// prompt runs and each layer reports the L2 norms of the residual leaving it and of what attention
// and the FFN added (mean and max over positions), and the first non-finite activation (layer,
// position, which row) is named. Any non-finite weight, activation or logit exits 1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "model/vindex_source.h"
#include "quant/quant.h"
#include "util/error.h"

namespace larql::cli {
namespace {

struct DiagArgs {
  std::string model, prompt = "The quick brown fox jumps over the lazy dog. The capital of France is";
  int threads = 0;
  bool json = false;
};

struct LayerStats {
  double res_sum = 0, res_max = 0, attn_sum = 0, attn_max = 0, ffn_sum = 0, ffn_max = 0;
  int64_t rows = 0;
};

double l2(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return std::sqrt(s);
}

// The larger of the two, NaN when either is: a layer whose norm was NaN at any position has a NaN
// max (std::max would keep the finite one and hide it).
double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b); }

// A table cell: "nan" for any NaN (no sign: "-nan" and "nan" are the same report), else %.4g.
std::string cell(double v) {
  if (std::isnan(v)) return "nan";
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

bool finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

class Norms final : public LayerObserver {
 public:
  explicit Norms(int64_t layers) : stats(static_cast<size_t>(layers)) {}
  void on_layer(const LayerTrace& t) override {
    LayerStats& s = stats[static_cast<size_t>(t.layer)];
    const double r = l2(t.residual_out, t.hidden), a = l2(t.attn_out, t.hidden), f = l2(t.ffn_out, t.hidden);
    s.res_sum += r, s.attn_sum += a, s.ffn_sum += f, ++s.rows;
    s.res_max = nan_max(s.res_max, r), s.attn_max = nan_max(s.attn_max, a), s.ffn_max = nan_max(s.ffn_max, f);
    if (first_bad.is_null()) {
      const char* which = !finite(t.attn_out, t.hidden)       ? "attn_out"
                          : !finite(t.ffn_in, t.hidden)       ? "ffn_in"
                          : !finite(t.ffn_out, t.hidden)      ? "ffn_out"
                          : !finite(t.residual_out, t.hidden) ? "residual_out"
                                                              : nullptr;
      if (which) first_bad = {{"layer", t.layer}, {"position", t.pos}, {"row", which}};
    }
  }
  std::vector<LayerStats> stats;
  nlohmann::json first_bad;
};

void run(const DiagArgs& a) {
  const Loaded l = load(a.model, a.threads, "diag");
  const ModelConfig& c = l.model->config();
  const WeightSource& src = l.model->source();
  // Weights: every (role, layer) tensor the source has, row by row.
  nlohmann::json bad_weights = nlohmann::json::array();
  double max_abs = 0;
  std::string max_abs_at;
  int64_t checked = 0;
  for (int64_t layer = -1; layer < c.n_layers; ++layer)
    for (TensorRole role : all_tensor_roles()) {
      if (is_layer_role(role) != (layer >= 0)) continue;
      const auto t = src.tensor(role, layer);
      if (!t) continue;
      const int64_t cols = static_cast<int64_t>(t->dims.empty() ? 1 : t->dims[0]);
      const auto rb = row_bytes(t->type, static_cast<uint64_t>(cols));
      if (!rb || *rb == 0) continue;
      const int64_t rows = static_cast<int64_t>(t->nbytes / *rb);
      std::vector<float> row(static_cast<size_t>(cols));
      int64_t nonfinite = 0, first_row = -1;
      double tmax = 0;
      for (int64_t r = 0; r < rows; ++r) {
        quant::dequantize_row(t->type, t->data + static_cast<size_t>(r) * *rb, row.data(), cols);
        for (float v : row) {
          if (!std::isfinite(v)) {
            if (first_row < 0) first_row = r;
            ++nonfinite;
          } else {
            tmax = std::max(tmax, static_cast<double>(std::fabs(v)));
          }
        }
      }
      ++checked;
      if (tmax > max_abs) max_abs = tmax, max_abs_at = t->name;
      if (nonfinite > 0)
        bad_weights.push_back({{"tensor", t->name}, {"layer", layer >= 0 ? nlohmann::json(layer) : nlohmann::json()},
                               {"non_finite", nonfinite}, {"first_row", first_row}});
    }
  // Activations on the prompt.
  const auto ids = l.tokenizer.encode(a.prompt, l.tokenizer.add_bos(), false);
  Norms norms(c.n_layers);
  bool logits_finite = true;
  l.handle->logit_rows(ids, [&](int64_t, int64_t rows, const float* lg) { logits_finite &= finite(lg, rows * c.vocab); }, &norms);
  nlohmann::json layers = nlohmann::json::array();
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const LayerStats& s = norms.stats[static_cast<size_t>(i)];
    const double n = std::max<int64_t>(1, s.rows);
    layers.push_back({{"layer", i}, {"residual_mean", s.res_sum / n}, {"residual_max", s.res_max}, {"attn_mean", s.attn_sum / n},
                      {"ffn_mean", s.ffn_sum / n}});
  }
  const bool ok = bad_weights.empty() && norms.first_bad.is_null() && logits_finite;
  const nlohmann::json j = {{"model", l.model->path()},     {"ok", ok},
                            {"tensors_checked", checked},   {"non_finite_weights", bad_weights},
                            {"max_abs_weight", max_abs},    {"max_abs_weight_tensor", max_abs_at},
                            {"prompt_tokens", ids.size()},  {"first_non_finite_activation", norms.first_bad},
                            {"logits_finite", logits_finite}, {"layers", layers}};
  if (a.json) {
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("model    %s\n", l.model->path().c_str());
    std::printf("weights  %s, largest |w| %.4g (%s); %s\n", count_of(checked, "tensor").c_str(), max_abs, max_abs_at.c_str(),
                bad_weights.empty() ? "all finite" : (std::to_string(bad_weights.size()) + " with NaN/Inf").c_str());
    for (const auto& b : bad_weights)
      std::printf("  NaN/Inf: %s (layer %s): %s, first in row %lld\n", b["tensor"].get<std::string>().c_str(),
                  b["layer"].is_null() ? "-" : std::to_string(b["layer"].get<int64_t>()).c_str(),
                  count_of(b["non_finite"].get<long long>(), "value").c_str(),
                  b["first_row"].get<long long>());
    std::printf("prompt   %s; %s\n", count_of(static_cast<long long>(ids.size()), "token").c_str(),
                norms.first_bad.is_null() ? (logits_finite ? "activations and logits finite" : "logits NOT finite")
                                          : ("first non-finite activation: layer " + std::to_string(norms.first_bad["layer"].get<int64_t>()) +
                                             ", position " + std::to_string(norms.first_bad["position"].get<int64_t>()) + ", " +
                                             norms.first_bad["row"].get<std::string>())
                                                .c_str());
    std::printf("layer  |residual| mean       max   |attn| mean  |ffn| mean\n");
    for (const auto& r : layers)
      std::printf("%5lld  %14s %9s %13s %11s\n", r["layer"].get<long long>(), cell(r["residual_mean"].get<double>()).c_str(),
                  cell(r["residual_max"].get<double>()).c_str(), cell(r["attn_mean"].get<double>()).c_str(),
                  cell(r["ffn_mean"].get<double>()).c_str());
  }
  if (!ok)
    throw Error(ErrorKind::Format, l.model->path() + ": " +
                                       (!bad_weights.empty() ? "non-finite weights in " + bad_weights[0]["tensor"].get<std::string>()
                                        : !norms.first_bad.is_null()
                                            ? "a non-finite activation at layer " + std::to_string(norms.first_bad["layer"].get<int64_t>())
                                            : std::string("non-finite logits")));
}

}  // namespace

void register_diag(CLI::App& app) {
  auto a = std::make_shared<DiagArgs>();
  CLI::App* s = app.add_subcommand("diag", "check a model: NaN/Inf in weights and activations, per-layer residual norms");
  s->add_option("model", a->model, kModelHelp)->required();
  s->add_option("--prompt", a->prompt, "the text run to measure the activations");
  add_threads_flag(s, a->threads);
  s->add_flag("--json", a->json, "print one JSON object");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
