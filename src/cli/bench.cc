// `larql bench MODEL`: prefill and decode speed of an engine on a synthetic prompt.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/progress.h"
#include "formats/gguf.h"
#include "inference/sampler.h"
#include "kv/registry.h"
#include "util/error.h"

namespace larql::cli {
namespace {

struct BenchArgs {
  std::string model, engine = "standard";
  int64_t prompt_tokens = 512, decode_tokens = 128;
  int threads = 0;
  bool json = false;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void run(const BenchArgs& a) {
  if (a.prompt_tokens < 1 || a.decode_tokens < 1)
    throw Error(ErrorKind::InvalidArgument, "--prompt-tokens and --decode-tokens must be >= 1");
  const EngineSpec spec = parse_engine_spec(a.engine);
  Loaded l = load(a.model, a.threads);
  const ModelConfig& c = l.model->config();
  if (a.prompt_tokens + a.decode_tokens > c.context_length)
    throw Error(ErrorKind::ContextOverflow, "prompt + decode tokens exceed the context");
  // A fixed, natural-looking prompt: a repeated text, BOS first (the same ids every run).
  const std::string text =
      "The history of the printing press begins in the fifteenth century, when movable type changed how "
      "books were made, sold and read across Europe. ";
  std::vector<int32_t> ids{l.tokenizer.bos_id()};
  const auto unit = l.tokenizer.encode(text, false, false);
  while (static_cast<int64_t>(ids.size()) < a.prompt_tokens) ids.insert(ids.end(), unit.begin(), unit.end());
  ids.resize(static_cast<size_t>(a.prompt_tokens));

  auto engine = make_engine(spec, l.forward);
  std::vector<float> logits(static_cast<size_t>(c.vocab));
  double t0 = now_s();
  auto h = engine->prefill(ids);
  l.forward->logits(h.data(), 1, logits.data());
  const double prefill_s = now_s() - t0;
  Progress bar("decode", a.decode_tokens);
  t0 = now_s();
  for (int64_t i = 0; i < a.decode_tokens; ++i) {
    const int32_t next = argmax(logits.data(), c.vocab);
    h = engine->decode_step(next);
    l.forward->logits(h.data(), 1, logits.data());
    bar.update(i + 1);
  }
  const double decode_s = now_s() - t0;
  const EngineMemory mem = engine->memory();
  const double pf = a.prompt_tokens / prefill_s, dc = a.decode_tokens / decode_s;
  if (a.json) {
    nlohmann::json j = {{"engine", spec.to_string()}, {"prompt_tokens", a.prompt_tokens},
                        {"decode_tokens", a.decode_tokens}, {"threads", l.forward->pool().size()},
                        {"prefill_tok_s", pf}, {"decode_tok_s", dc}, {"ms_per_token", 1000.0 / dc},
                        {"hot_bytes", mem.hot_bytes}, {"cold_bytes", mem.cold_bytes},
                        {"peak_rss_bytes", peak_rss_bytes()}, {"model_bytes", l.model->file().file_size()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("engine %s, %d threads\n", spec.to_string().c_str(), l.forward->pool().size());
    std::printf("prefill  %5lld tokens  %8.1f tok/s\n", (long long)a.prompt_tokens, pf);
    std::printf("decode   %5lld tokens  %8.1f tok/s  (%.2f ms/token)\n", (long long)a.decode_tokens, dc, 1000.0 / dc);
    std::printf("state    %.1f MiB hot, %.1f MiB cold; peak RSS %.1f MiB (model file %.1f MiB)\n",
                mem.hot_bytes / 1048576.0, mem.cold_bytes / 1048576.0, peak_rss_bytes() / 1048576.0,
                l.model->file().file_size() / 1048576.0);
  }
}

}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* s = app.add_subcommand("bench", "measure prefill and decode tok/s");
  s->add_option("model", a->model, "GGUF path or a name in models/")->required();
  s->add_option("--engine", a->engine, "KV engine spec")->capture_default_str();
  s->add_option("--prompt-tokens", a->prompt_tokens, "prompt length for prefill")->capture_default_str();
  s->add_option("--decode-tokens", a->decode_tokens, "tokens to decode")->capture_default_str();
  s->add_option("-t,--threads", a->threads, "CPU threads (default: all cores)");
  s->add_flag("--json", a->json, "one JSON object");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
