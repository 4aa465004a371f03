// `larql parity A B FILE`: where two models, sources or engines part on a text (docs/cli.md
// "parity"). Both sides score the same token ids (A's tokenizer; B must tokenize the text the
// same); per position KL(P_A || P_B) in nats, top-1 agreement, the first position whose top-1
// differs and, at that position, the cosine of the two residuals leaving each layer — so the
// layer where they part is named. A side given an engine (--engine-a / --engine-b) is scored
// teacher-forced through it (BOS alone, then one decode step per token, as `larql perplexity
// --engine`); its layers are not observed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/progress.h"
#include "kv/registry.h"
#include "util/error.h"

namespace larql::cli {
namespace {

struct ParityArgs {
  std::string a, b, file, engine_a, engine_b;
  int64_t max_tokens = 256;
  uint64_t max_input_bytes = kDefaultMaxInputBytes;
  double kl_threshold = 0.0;
  int threads = 0;
  bool json = false;
};

// The residual leaving every layer at every position: [layers, positions, hidden].
class AllResiduals final : public LayerObserver {
 public:
  AllResiduals(int64_t layers, int64_t n, int64_t hidden) : n_(n), hidden_(hidden) {
    rows.assign(static_cast<size_t>(layers * n * hidden), 0.0f);
  }
  void on_layer(const LayerTrace& t) override {
    if (t.pos < 0 || t.pos >= n_) return;
    const size_t at = static_cast<size_t>((t.layer * n_ + t.pos) * hidden_);
    std::copy(t.residual_out, t.residual_out + hidden_, rows.begin() + static_cast<std::ptrdiff_t>(at));
  }
  const float* at(int64_t layer, int64_t pos) const { return rows.data() + (layer * n_ + pos) * hidden_; }
  std::vector<float> rows;

 private:
  int64_t n_, hidden_;
};

// One side's logits [n, vocab] (and residuals when batched).
struct Side {
  const Loaded* l = nullptr;
  std::string name;
  std::unique_ptr<EngineSpec> spec;
  std::vector<float> logits;
  std::unique_ptr<AllResiduals> res;
};

void score(Side& s, const std::vector<int32_t>& ids, const char* label) {
  const ModelConfig& c = s.l->model->config();
  const int64_t n = static_cast<int64_t>(ids.size());
  s.logits.assign(static_cast<size_t>(n * c.vocab), 0.0f);
  Progress bar(label, n);
  if (!s.spec) {
    s.res = std::make_unique<AllResiduals>(c.n_layers, n, c.hidden);
    s.l->handle->logit_rows(ids, [&](int64_t row0, int64_t rows, const float* lg) {
      std::copy(lg, lg + rows * c.vocab, s.logits.begin() + static_cast<std::ptrdiff_t>(row0 * c.vocab));
      bar.update(row0 + rows);
    }, s.res.get());
    return;
  }
  auto engine = make_engine(*s.spec, s.l->forward);
  for (int64_t pos = 0; pos < n; ++pos) {
    const auto h = pos == 0 ? engine->prefill({ids[0]}) : engine->decode_step(ids[static_cast<size_t>(pos)]);
    s.l->forward->logits(h.data(), 1, s.logits.data() + pos * c.vocab);
    bar.update(pos + 1);
  }
}

// log-softmax in double.
void log_softmax(const float* x, int64_t n, std::vector<double>& out) {
  out.resize(static_cast<size_t>(n));
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<double>(x[i]) - lse;
}

int64_t argmax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

void run(const ParityArgs& a) {
  Side A, B;
  if (!a.engine_a.empty()) A.spec = std::make_unique<EngineSpec>(parse_cli_engine_spec(a.engine_a));  // fail before loading
  if (!a.engine_b.empty()) B.spec = std::make_unique<EngineSpec>(parse_cli_engine_spec(a.engine_b));
  const std::string text = read_text_file(a.file, "the text file", a.max_input_bytes);
  // Same path twice (two engines of one model): one load.
  const Loaded la = load(a.a, a.threads, "parity");
  const Loaded lb_loaded = resolve_model(a.a) == resolve_model(a.b) ? la : load(a.b, a.threads, "parity");
  const Loaded lb{lb_loaded.handle, lb_loaded.model, lb_loaded.handle->forward(), lb_loaded.tokenizer};  // its own Forward
  A.l = &la;
  B.l = &lb;
  A.name = a.a + (a.engine_a.empty() ? "" : " [" + A.spec->to_string() + "]");
  B.name = a.b + (a.engine_b.empty() ? "" : " [" + B.spec->to_string() + "]");
  const ModelConfig& ca = A.l->model->config();
  const ModelConfig& cb = B.l->model->config();
  if (ca.vocab != cb.vocab)
    throw Error(ErrorKind::InvalidArgument, "parity: " + a.a + " has a vocabulary of " + std::to_string(ca.vocab) + ", " + a.b +
                                                " of " + std::to_string(cb.vocab) + ": only models of one vocabulary compare");
  auto ids = A.l->tokenizer.encode(text, A.l->tokenizer.add_bos(), false);
  auto ids_b = B.l->tokenizer.encode(text, B.l->tokenizer.add_bos(), false);
  if (ids.size() <= (A.l->tokenizer.add_bos() ? 1u : 0u))  // as shannon: BOS alone compares nothing of the text
    throw Error(ErrorKind::EmptyPrompt, a.file + ": the text has no token after BOS to compare");
  if (a.max_tokens > 0) {
    if (static_cast<int64_t>(ids.size()) > a.max_tokens) ids.resize(static_cast<size_t>(a.max_tokens));
    if (static_cast<int64_t>(ids_b.size()) > a.max_tokens) ids_b.resize(static_cast<size_t>(a.max_tokens));
  }
  if (ids != ids_b) {
    size_t i = 0;
    while (i < ids.size() && i < ids_b.size() && ids[i] == ids_b[i]) ++i;
    throw Error(ErrorKind::InvalidArgument, "parity: the two tokenize " + a.file + " differently (first at token " +
                                                std::to_string(i) + "): only models of one tokenizer compare");
  }
  const int64_t n = static_cast<int64_t>(ids.size()), vocab = ca.vocab;
  if (n < 1) throw Error(ErrorKind::EmptyPrompt, a.file + ": the text has no tokens");
  for (const ModelConfig* c : {&ca, &cb})
    if (n > c->context_length)
      throw Error(ErrorKind::ContextOverflow, a.file + ": " + std::to_string(n) + " tokens exceed a context of " +
                                                  std::to_string(c->context_length) + " (use --max-tokens)");
  score(A, ids, "A");
  score(B, ids, "B");

  std::vector<double> pa, pb;
  std::vector<double> kl(static_cast<size_t>(n));
  int64_t agree = 0, first_div = -1, max_at = 0;
  for (int64_t p = 0; p < n; ++p) {
    const float* la_ = A.logits.data() + p * vocab;
    const float* lb_ = B.logits.data() + p * vocab;
    log_softmax(la_, vocab, pa);
    log_softmax(lb_, vocab, pb);
    double k = 0;
    for (int64_t v = 0; v < vocab; ++v) k += std::exp(pa[static_cast<size_t>(v)]) * (pa[static_cast<size_t>(v)] - pb[static_cast<size_t>(v)]);
    kl[static_cast<size_t>(p)] = std::max(0.0, k);
    const bool same_top = argmax(la_, vocab) == argmax(lb_, vocab);
    agree += same_top;
    if (first_div < 0 && (!same_top || kl[static_cast<size_t>(p)] > a.kl_threshold && a.kl_threshold > 0)) first_div = p;
    if (kl[static_cast<size_t>(p)] > kl[static_cast<size_t>(max_at)]) max_at = p;
  }
  double mean = 0;
  for (double k : kl) mean += k / static_cast<double>(n);
  // Per layer: the residual cosine at the first divergent position (or the last position), and
  // the lowest over all positions; the first layer below 0.99 at that position.
  nlohmann::json layers = nlohmann::json::array();
  int64_t first_layer = -1;
  const bool have_layers = A.res && B.res && ca.n_layers == cb.n_layers && ca.hidden == cb.hidden;
  const int64_t at = first_div >= 0 ? first_div : n - 1;
  if (have_layers) {
    for (int64_t l = 0; l < ca.n_layers; ++l) {
      const double c_at = cosine(A.res->at(l, at), B.res->at(l, at), ca.hidden);
      double c_min = 1.0;
      for (int64_t p = 0; p < n; ++p) c_min = std::min(c_min, cosine(A.res->at(l, p), B.res->at(l, p), ca.hidden));
      if (first_layer < 0 && c_at < 0.99) first_layer = l;
      layers.push_back({{"layer", l}, {"cosine_at", c_at}, {"cosine_min", c_min}});
    }
  }
  nlohmann::json j = {{"a", A.name},
                      {"b", B.name},
                      {"tokens", n},
                      {"kl_mean", mean},
                      {"kl_max", kl[static_cast<size_t>(max_at)]},
                      {"kl_max_position", max_at},
                      {"top1_agreement", static_cast<double>(agree) / static_cast<double>(n)},
                      {"first_divergence", first_div >= 0 ? nlohmann::json(first_div) : nlohmann::json()},
                      {"layers_at", at},
                      {"first_divergent_layer", first_layer >= 0 ? nlohmann::json(first_layer) : nlohmann::json()},
                      {"layers", layers}};
  if (a.json) {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("A  %s\nB  %s\n", A.name.c_str(), B.name.c_str());
  std::printf("%s: mean KL(A||B) %.3g nats, max %.3g at position %lld, top-1 agreement %.2f%%\n", count_of(n, "token").c_str(), mean,
              kl[static_cast<size_t>(max_at)], (long long)max_at, 100.0 * static_cast<double>(agree) / static_cast<double>(n));
  if (first_div < 0) std::printf("no divergence: the top-1 token agrees at every position\n");
  else std::printf("first divergence at position %lld (token %d)\n", (long long)first_div, ids[static_cast<size_t>(first_div)]);
  if (!have_layers) {
    std::printf("(residuals not compared: %s)\n", A.res && B.res ? "the two have different shapes" : "a side runs through an engine");
    return;
  }
  std::printf("residual cosine per layer at position %lld (and the lowest over all positions):\n", (long long)at);
  for (const auto& l : layers)
    std::printf("  L%-3lld %.6f  (min %.6f)%s\n", l["layer"].get<long long>(), l["cosine_at"].get<double>(),
                l["cosine_min"].get<double>(), l["layer"].get<int64_t>() == first_layer ? "  <- first below 0.99" : "");
}

}  // namespace

void register_parity(CLI::App& app) {
  auto a = std::make_shared<ParityArgs>();
  CLI::App* s = app.add_subcommand("parity", "where two models, sources or engines first diverge on a text (KL, top-1, layer)");
  s->add_option("a", a->a, std::string("side A: ") + kModelHelp)->required();
  s->add_option("b", a->b, "side B (the same path with --engine-b compares two engines)")->required();
  s->add_option("file", a->file, "UTF-8 text file both sides score")->required();
  s->add_option("--engine-a", a->engine_a, "score A teacher-forced through this engine spec (see `larql engines`)");
  s->add_option("--engine-b", a->engine_b, "score B teacher-forced through this engine spec");
  add_int_flag(s, "--max-tokens", a->max_tokens, 1, INT32_MAX, "score the first N tokens (BOS included),");
  add_float_flag(s, "--kl-threshold", a->kl_threshold, FloatRange{0.0, 1e6},
                 "also count a position whose KL exceeds this as divergent (0: only a top-1 change),");
  add_max_input_flag(s, a->max_input_bytes);
  add_threads_flag(s, a->threads);
  s->add_flag("--json", a->json, "print one JSON object");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
