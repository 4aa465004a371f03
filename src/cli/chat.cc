// `larql chat MODEL`: interactive multi-turn chat with the model's template.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>

#include "cli/common.h"
#include "kv/generate.h"
#include "kv/registry.h"
#include "kv/session.h"
#include "util/error.h"

namespace larql::cli {
namespace {

struct ChatArgs {
  FfnArgs ffn;
  std::string model, engine, system;
  int64_t n = 512;
  int threads = 0;
  bool seed_set = false;
  SamplerParams sampler;
};

// Ctrl-C: during a reply it stops the reply and returns to the prompt; at the prompt (or a second
// time before the reply has stopped) it quits, as llama.cpp's CLI does.
std::atomic<bool> g_cancel{false};
std::atomic<bool> g_at_prompt{false};

extern "C" void on_sigint(int) {
  if (g_at_prompt.load() || g_cancel.exchange(true)) {
    static const char nl[] = "\n";
    (void)!::write(2, nl, 1);
    ::_exit(130);
  }
}

void run(ChatArgs& a) {
  const EngineSpec spec = parse_cli_engine_spec(a.engine);
  resolve_seed(a.sampler, a.seed_set);
  Loaded l = load(a.model, a.threads, "chat", &a.ffn);
  Session session(l.forward, l.handle->tokenizer_ptr(), spec, SessionOptions{});
  if (!session.engine().info().note.empty()) std::fprintf(stderr, "note: %s\n", session.engine().info().note.c_str());
  std::vector<ChatMessage> history;
  if (!a.system.empty()) history.push_back({"system", a.system});
  const bool tty = isatty(0);
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  std::fprintf(stderr, "larql chat — %s, engine %s. Ctrl-C stops a reply; Ctrl-D (or Ctrl-C at the prompt) quits.\n",
               l.model->config().name.c_str(), spec.to_string().c_str());
  const int64_t ctx = session.context();
  std::string line;
  for (;;) {
    if (tty) std::fprintf(stderr, "\n> ");
    g_at_prompt = true;
    const bool got = static_cast<bool>(std::getline(std::cin, line));
    g_at_prompt = false;
    if (!got) break;
    if (line.empty()) continue;
    history.push_back({"user", line});
    // Re-encode the whole conversation: simple and exact (the engine re-prefills it).
    session.restart();
    const std::string prompt = apply_model_chat_template(l.tokenizer, history);
    const auto ids = session.encode(prompt);
    if (static_cast<int64_t>(ids.size()) >= ctx) {
      history.pop_back();
      std::fprintf(stderr, "error: the conversation is %zu tokens with this turn, the context holds %lld; start a new chat "
                           "(turn skipped)\n", ids.size(), static_cast<long long>(ctx));
      continue;
    }
    GenerateOptions opt;
    opt.max_tokens = a.n;
    opt.sampler = a.sampler;
    opt.cancel = &g_cancel;
    g_cancel = false;
    GenerateResult r;
    try {
      r = session.generate(ids, opt, [](std::string_view s) { write_stdout(s); });
    } catch (const Error& e) {
      // A turn the engine cannot serve (apollo: RetrievalMiss) drops that turn, not the session;
      // Ctrl-C while the turn's prompt is read drops it too.
      if (e.kind() != ErrorKind::RetrievalMiss && e.kind() != ErrorKind::EmptyPrompt && e.kind() != ErrorKind::Cancelled)
        throw;
      if (e.kind() == ErrorKind::Cancelled) std::fprintf(stderr, "[stopped]\n");
      else std::fprintf(stderr, "error: %s (turn skipped)\n", e.what());
      history.pop_back();
      continue;
    }
    write_stdout("\n");
    if (r.stop_reason == "cancelled") std::fprintf(stderr, "[stopped]\n");
    history.push_back({"model", r.text});
  }
  std::fprintf(stderr, "\n");
}

}  // namespace

void register_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* s = app.add_subcommand("chat", "interactive multi-turn chat (Ctrl-C stops a reply, Ctrl-D quits)");
  s->add_option("model", a->model, kModelHelp)->required();
  add_int_flag(s, "-n,--n-predict", a->n, 1, INT32_MAX, "tokens per reply at most,");
  add_sampler_flags(s, a->sampler, a->seed_set);
  add_engine_flag(s, a->engine);
  s->add_option("--system", a->system, "system prompt");
  add_threads_flag(s, a->threads);
  add_ffn_flags(s, a->ffn);
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
