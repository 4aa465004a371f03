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
#include "cli/progress.h"
#include "kv/registry.h"
#include "util/atomic_file.h"
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

/// Minimal .npy v1.0 writer (format: numpy.lib.format), streaming rows through an AtomicWriter:
/// nothing replaces the target until close().
class NpyWriter {
 public:
  NpyWriter(const std::string& path, std::vector<int64_t> shape, const std::string& flag = "--logits-out")
      : out_(path, flag) {
    std::string dims;
    for (int64_t d : shape) dims += std::to_string(d) + ", ";
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
    const size_t unpadded = 10 + dict.size() + 1;
    dict += std::string((64 - unpadded % 64) % 64, ' ') + "\n";
    const uint16_t hlen = static_cast<uint16_t>(dict.size());
    out_.write("\x93NUMPY\x01\x00", 8);
    out_.write(&hlen, 2);
    out_.write(dict);
  }
  void rows(const float* p, size_t n) { out_.write(p, n * 4); }
  void close() { out_.commit(); }

 private:
  AtomicWriter out_;
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

/// Adds -log p(target) under logits lg [vocab] to nll (log-softmax in double).
void add_nll(const float* lg, int64_t vocab, int32_t target, double& nll) {
  double mx = lg[0];
  for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, static_cast<double>(lg[v]));
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(lg[v] - mx);
  nll -= lg[target] - mx - std::log(sum);
}

/// Teacher-forced through an engine: BOS alone, then one decode step per token. Returns the
/// summed NLL of tokens 1..n-1; writes every position's logits to npy when given.
/// KvBytes: per_token = the growth of the engine's hot bytes per token between positions k and
/// 2k, k = min(64, (n − 1) / 2) (the cost of one more token once a window of exact recent rows
/// is full, before the model's sliding layers (512) evict); fixed = hot bytes at position k less
/// (k + 1) × per_token (what the engine holds beyond that, e.g. turbo-quant's exact window).
struct KvBytes {
  int64_t per_token = 0, fixed = 0;
};

double score_engine(Loaded& l, const EngineSpec& spec, const std::vector<int32_t>& ids, NpyWriter* npy,
                    KvBytes& kv) {
  const ModelConfig& c = l.model->config();
  const int64_t n = static_cast<int64_t>(ids.size());
  auto engine = make_engine(spec, l.forward);
  std::vector<float> logits(static_cast<size_t>(c.vocab));
  double nll = 0;
  Progress bar("scoring " + spec.to_string(), n);
  const int64_t k = std::max<int64_t>(1, std::min<int64_t>(64, (n - 1) / 2));
  int64_t at_k = 0, at_2k = 0;
  for (int64_t pos = 0; pos < n; ++pos) {
    const auto h = pos == 0 ? engine->prefill({ids[0]}) : engine->decode_step(ids[static_cast<size_t>(pos)]);
    if (pos == k) at_k = static_cast<int64_t>(engine->memory().hot_bytes);
    if (pos == 2 * k) at_2k = static_cast<int64_t>(engine->memory().hot_bytes);
    l.forward->logits(h.data(), 1, logits.data());
    if (pos + 1 < n) add_nll(logits.data(), c.vocab, ids[static_cast<size_t>(pos + 1)], nll);
    if (npy) npy->rows(logits.data(), static_cast<size_t>(c.vocab));
    bar.update(pos + 1);
  }
  kv.per_token = (at_2k - at_k) / k;
  kv.fixed = at_k - (k + 1) * kv.per_token;
  return nll;
}

/// One batched forward pass (api::LoadedModel::logit_rows: chunks of Forward::chunk() over a
/// plain KvCache), `observer` (may be null) seeing every layer.
double score_batched(Loaded& l, const std::vector<int32_t>& ids, NpyWriter* npy, LayerObserver* observer) {
  const int64_t vocab = l.model->config().vocab, n = static_cast<int64_t>(ids.size());
  double nll = 0;
  Progress bar("scoring", n);
  l.handle->logit_rows(ids, [&](int64_t row0, int64_t rows, const float* logits) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pos = row0 + r;
      if (pos + 1 >= n) break;
      add_nll(logits + r * vocab, vocab, ids[static_cast<size_t>(pos + 1)], nll);
    }
    if (npy) npy->rows(logits, static_cast<size_t>(rows * vocab));
    bar.update(row0 + rows);
  }, observer);
  return nll;
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
