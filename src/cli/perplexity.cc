// `larql perplexity MODEL FILE`: perplexity of a text, optionally writing every position's
// logits as .npy [positions, vocab] f32 for comparison with other tools.
// Perplexity = exp(mean_{i=1..n-1} -log p(x_i | x_<i)), nats inside (BOS is not predicted).
// Without --engine: one batched forward pass (Forward::forward, chunked). With --engine SPEC:
// teacher-forced through that engine from the first token (prefill of BOS alone, then one
// decode_step per later token), so every K/V row the engine stores is in the loop as in generation.
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
  std::string model, file, logits_out, engine;
  int64_t max_tokens = 0;
  uint64_t max_input_bytes = kDefaultMaxInputBytes;
  int threads = 0;
  bool json = false;
};

/// Minimal .npy v1.0 writer (format: numpy.lib.format), streaming rows through an AtomicWriter:
/// nothing replaces the target until close().
class NpyWriter {
 public:
  NpyWriter(const std::string& path, int64_t rows, int64_t cols) : out_(path, "--logits-out") {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
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

/// One batched forward pass (chunks of Forward::chunk()) over a plain KvCache.
double score_batched(Loaded& l, const std::vector<int32_t>& ids, NpyWriter* npy) {
  const ModelConfig& c = l.model->config();
  const int64_t n = static_cast<int64_t>(ids.size());
  KvCache cache(c);
  std::vector<float> x(static_cast<size_t>(l.forward->chunk() * c.hidden));
  constexpr int64_t kLogitRows = 32;
  std::vector<float> logits(static_cast<size_t>(kLogitRows * c.vocab));
  double nll = 0;
  Progress bar("scoring", n);
  for (int64_t off = 0; off < n; off += l.forward->chunk()) {
    const int64_t m = std::min(l.forward->chunk(), n - off);
    l.forward->forward(ids.data() + off, m, cache, x.data());
    for (int64_t r0 = 0; r0 < m; r0 += kLogitRows) {
      const int64_t rn = std::min(kLogitRows, m - r0);
      l.forward->logits(x.data() + r0 * c.hidden, rn, logits.data());
      for (int64_t r = 0; r < rn; ++r) {
        const int64_t pos = off + r0 + r;
        if (pos + 1 >= n) break;
        add_nll(logits.data() + r * c.vocab, c.vocab, ids[static_cast<size_t>(pos + 1)], nll);
      }
      if (npy) npy->rows(logits.data(), static_cast<size_t>(rn * c.vocab));
      bar.update(off + r0 + rn);
    }
  }
  return nll;
}

void run(const PplArgs& a) {
  std::unique_ptr<EngineSpec> spec;
  if (!a.engine.empty()) spec = std::make_unique<EngineSpec>(parse_cli_engine_spec(a.engine));  // fail before loading
  const std::string text = read_text_file(a.file, "the text file", a.max_input_bytes);
  Loaded l = load(a.model, a.threads, "perplexity");
  const ModelConfig& c = l.model->config();
  auto ids = l.tokenizer.encode(text, l.tokenizer.add_bos(), /*parse_special=*/false);
  if (a.max_tokens > 0 && static_cast<int64_t>(ids.size()) > a.max_tokens) ids.resize(static_cast<size_t>(a.max_tokens));
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n < 2) throw Error(ErrorKind::InvalidArgument, a.file + ": needs at least one token after BOS to score");
  if (n > c.context_length)
    throw Error(ErrorKind::ContextOverflow, a.file + ": " + std::to_string(n) + " tokens exceed the context of " +
                                                std::to_string(c.context_length) + " (use --max-tokens)");
  std::unique_ptr<NpyWriter> npy;
  if (!a.logits_out.empty()) npy = std::make_unique<NpyWriter>(a.logits_out, n, c.vocab);

  KvBytes kv;
  const double nll = spec ? score_engine(l, *spec, ids, npy.get(), kv) : score_batched(l, ids, npy.get());
  if (npy) npy->close();
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
  s->add_option("--engine", a->engine,
                "score teacher-forced through this engine spec, token by token from BOS (see `larql engines`)");
  add_threads_flag(s, a->threads);
  s->add_flag("--json", a->json, "print {tokens, ids, nll_mean, perplexity} as JSON (with --engine also engine, kv_bytes_per_token, kv_fixed_bytes)");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
