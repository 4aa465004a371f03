// `larql chat MODEL`: interactive multi-turn chat with the model's template. Ctrl-D quits.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>

#include "cli/common.h"
#include "kv/generate.h"
#include "kv/registry.h"
#include "util/error.h"

namespace larql::cli {
namespace {

struct ChatArgs {
  std::string model, engine, system;
  int64_t n = 512;
  int threads = 0;
  bool seed_set = false;
  SamplerParams sampler;
};

void run(ChatArgs& a) {
  validate(a.sampler);
  if (a.engine.empty()) {
    const char* env = std::getenv("LARQL_ENGINE");
    a.engine = env != nullptr && *env != '\0' ? env : "standard";
  }
  const EngineSpec spec = parse_engine_spec(a.engine);
  if (!a.seed_set) a.sampler.seed = std::random_device{}();
  Loaded l = load(a.model, a.threads);
  auto engine = make_engine(spec, l.forward);
  std::vector<ChatMessage> history;
  if (!a.system.empty()) history.push_back({"system", a.system});
  const bool tty = isatty(0);
  std::fprintf(stderr, "larql chat — %s, engine %s. Ctrl-D to quit.\n", l.model->config().name.c_str(),
               spec.to_string().c_str());
  std::string line;
  for (;;) {
    if (tty) std::fprintf(stderr, "\n> ");
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    history.push_back({"user", line});
    // Re-encode the whole conversation: simple and exact (the engine re-prefills it).
    const std::string prompt = apply_gemma_chat_template(history, true);
    const auto ids = l.tokenizer.encode(prompt, l.tokenizer.add_bos(), true);
    GenerateOptions opt;
    opt.max_tokens = std::min<int64_t>(a.n, l.model->config().context_length - static_cast<int64_t>(ids.size()));
    if (opt.max_tokens <= 0) throw Error(ErrorKind::ContextOverflow, "the conversation no longer fits the context");
    opt.sampler = a.sampler;
    GenerateResult r;
    try {
      r = generate(*engine, *l.forward, l.tokenizer, ids, opt, [](std::string_view s) {
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
      });
    } catch (const Error& e) {
      // A turn the engine cannot serve (apollo: RetrievalMiss) drops that turn, not the session.
      if (e.kind() != ErrorKind::RetrievalMiss && e.kind() != ErrorKind::EmptyPrompt) throw;
      std::fprintf(stderr, "error: %s (turn skipped)\n", e.what());
      history.pop_back();
      continue;
    }
    std::printf("\n");
    std::fflush(stdout);
    history.push_back({"model", r.text});
  }
  std::fprintf(stderr, "\n");
}

}  // namespace

void register_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* s = app.add_subcommand("chat", "interactive multi-turn chat (Ctrl-D quits)");
  s->add_option("model", a->model, "GGUF path or a name in models/")->required();
  s->add_option("-n,--n-predict", a->n, "tokens per reply at most")->capture_default_str();
  add_sampler_flags(s, a->sampler, a->seed_set);
  s->add_option("--engine", a->engine, "KV engine spec (default: $LARQL_ENGINE or standard)");
  s->add_option("--system", a->system, "system prompt");
  add_threads_flag(s, a->threads);
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
