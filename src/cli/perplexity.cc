// `larql perplexity MODEL FILE`: perplexity of a text, optionally writing every position's
// logits as .npy [positions, vocab] f32 for comparison with other tools.
// Perplexity = exp(mean_{i=1..n-1} -log p(x_i | x_<i)), nats inside (BOS is not predicted).
// Without --engine: one batched forward pass (Forward::forward, chunked). With --engine SPEC:
// teacher-forced through that engine from the first token (prefill of BOS alone, then one
// decode_step per later token), so every K/V row the engine stores is in the loop as in generation.
// --residuals-out writes the residual leaving each chosen layer (--layers) at every position, as
// the forward pass's LayerObserver reports it: [layers, positions, hidden] f32 .npy (what the
// Python package's Model.trace returns; docs/python.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/common.h"
#include "cli/scoring.h"
#include "kv/registry.h"
#include "util/error.h"

namespace larql::cli {
namespace {

struct PplArgs {
  FfnArgs ffn;
  std::string model, file, logits_out, engine, residuals_out, layers;
  int64_t max_tokens = 0;
  uint64_t max_input_bytes = kDefaultMaxInputBytes;
  int threads = 0;
  bool json = false;
};

/// The residual leaving each wanted layer at every position: [layers, positions, hidden].
class ResidualCapture final : public LayerObserver {
 public:
  ResidualCapture(std::vector<int64_t> layers, int64_t n, int64_t hidden) : layers_(std::move(layers)), n_(n), hidden_(hidden) {
    rows.assign(layers_.size() * static_cast<size_t>(n * hidden), 0.0f);
  }
  void on_layer(const LayerTrace& t) override {
    const auto it = std::find(layers_.begin(), layers_.end(), t.layer);
    if (it == layers_.end() || t.pos < 0 || t.pos >= n_) return;
    const size_t at = (static_cast<size_t>(it - layers_.begin()) * static_cast<size_t>(n_) + static_cast<size_t>(t.pos)) *
                      static_cast<size_t>(hidden_);
    std::copy(t.residual_out, t.residual_out + hidden_, rows.begin() + static_cast<std::ptrdiff_t>(at));
  }
  std::vector<float> rows;

 private:
  std::vector<int64_t> layers_;
  int64_t n_, hidden_;
};

/// "3,7,9" or "all" -> layer numbers in [0, n_layers), in the order given, each once.
std::vector<int64_t> parse_layers(const std::string& s, int64_t n_layers) {
  std::vector<int64_t> out;
  if (s.empty() || s == "all") {
    for (int64_t l = 0; l < n_layers; ++l) out.push_back(l);
    return out;
  }
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const int64_t l = parse_int(item, 0, n_layers - 1, "--layers");
    if (std::find(out.begin(), out.end(), l) != out.end())
      throw Error(ErrorKind::InvalidArgument, "--layers lists layer " + std::to_string(l) + " twice");
    out.push_back(l);
  }
  return out;
}

void run(const PplArgs& a) {
  std::unique_ptr<EngineSpec> spec;
  if (!a.engine.empty()) spec = std::make_unique<EngineSpec>(parse_cli_engine_spec(a.engine));  // fail before loading
  const std::string text = read_text_file(a.file, "the text file", a.max_input_bytes);
  Loaded l = load(a.model, a.threads, "perplexity", &a.ffn);
  const ModelConfig& c = l.model->config();
  auto ids = l.tokenizer.encode(text, l.tokenizer.add_bos(), /*parse_special=*/false);
  if (a.max_tokens > 0 && static_cast<int64_t>(ids.size()) > a.max_tokens) ids.resize(static_cast<size_t>(a.max_tokens));
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n < 2) throw Error(ErrorKind::InvalidArgument, a.file + ": needs at least one token after BOS to score");
  if (n > c.context_length)
    throw Error(ErrorKind::ContextOverflow, a.file + ": " + std::to_string(n) + " tokens exceed the context of " +
                                                std::to_string(c.context_length) + " (use --max-tokens)");
  std::unique_ptr<NpyWriter> npy;
  if (!a.logits_out.empty()) npy = std::make_unique<NpyWriter>(a.logits_out, std::vector<int64_t>{n, c.vocab});
  std::unique_ptr<ResidualCapture> capture;
  if (!a.residuals_out.empty()) {
    if (spec) throw Error(ErrorKind::InvalidArgument, "--residuals-out is the batched forward pass's: not with --engine");
    capture = std::make_unique<ResidualCapture>(parse_layers(a.layers, c.n_layers), n, c.hidden);
  } else if (!a.layers.empty()) {
    throw Error(ErrorKind::InvalidArgument, "--layers chooses the layers of --residuals-out, which is not given");
  }

  KvBytes kv;
  const double nll = spec ? score_engine(l, *spec, ids, npy.get(), kv) : score_batched(l, ids, npy.get(), capture.get());
  if (npy) npy->close();
  if (capture) {
    const int64_t nl = static_cast<int64_t>(capture->rows.size()) / (n * c.hidden);
    NpyWriter out(a.residuals_out, {nl, n, c.hidden}, "--residuals-out");
    out.rows(capture->rows.data(), capture->rows.size());
    out.close();
  }
  const double mean = nll / static_cast<double>(n - 1);
  if (a.json) {
    nlohmann::json j = {{"tokens", n}, {"ids", ids}, {"nll_mean", mean}, {"perplexity", std::exp(mean)}};
    if (spec) {
      j["engine"] = spec->to_string();
      j["kv_bytes_per_token"] = kv.per_token;
      j["kv_fixed_bytes"] = kv.fixed;
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%lld tokens, mean NLL %.5f nats, perplexity %.4f\n", (long long)n, mean, std::exp(mean));
  }
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto a = std::make_shared<PplArgs>();
  CLI::App* s = app.add_subcommand("perplexity", "perplexity of a text file (every position scored)");
  s->add_option("model", a->model, kModelHelp)->required();
  s->add_option("file", a->file, "UTF-8 text file")->required();
  add_int_flag(s, "--max-tokens", a->max_tokens, 0, INT32_MAX, "score only the first N tokens (BOS included; 0 = all),");
  add_max_input_flag(s, a->max_input_bytes);
  s->add_option("--logits-out", a->logits_out, "write logits [positions, vocab] f32 to this .npy");
  s->add_option("--residuals-out", a->residuals_out,
                "write the residual leaving each layer of --layers at every position, [layers, positions, hidden] f32, to this .npy");
  s->add_option("--layers", a->layers, "the layers of --residuals-out: \"all\" (default) or a list such as 3,7,9");
  s->add_option("--engine", a->engine,
                "score teacher-forced through this engine spec, token by token from BOS (see `larql engines`)");
  add_threads_flag(s, a->threads);
  add_ffn_flags(s, a->ffn);
  s->add_flag("--json", a->json, "print {tokens, ids, nll_mean, perplexity} as JSON (with --engine also engine, kv_bytes_per_token, kv_fixed_bytes)");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
