// `larql run MODEL "prompt"`: generate a continuation, streaming tokens to stdout.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/common.h"
#include "kv/generate.h"
#include "kv/registry.h"
#include "util/error.h"
#include "util/profile.h"

namespace larql::cli {
namespace {

struct RunArgs {
  std::string model, prompt, engine, prompt_file, save_state, resume;
  int64_t n = 128;
  int threads = 0;
  int64_t ctx_size = 0;
  bool chat = false, json = false, seed_set = false, profile = false;
  std::vector<std::string> stop;
  SamplerParams sampler;
};

/// Stage times over the whole run (prefill + decode), and per decode step.
nlohmann::json profile_json(const profile::Totals& t, const GenerateResult& r) {
  nlohmann::json j = nlohmann::json::object();
  for (int i = 0; i < profile::kStages; ++i) {
    const auto s = static_cast<profile::Stage>(i);
    j[profile::stage_name(s)] = {{"seconds", t.seconds[i]}, {"calls", t.calls[i]}};
  }
  j["prefill_seconds"] = r.prefill_seconds;
  j["decode_seconds"] = r.decode_seconds;
  j["decode_steps"] = r.decoded;
  return j;
}

void print_profile(const profile::Totals& t, const GenerateResult& r) {
  double total = 0;
  for (double s : t.seconds) total += s;
  const double wall = r.prefill_seconds + r.decode_seconds;
  std::fprintf(stderr, "profile (prefill %.3f s + decode %.3f s over %lld steps):\n", r.prefill_seconds,
               r.decode_seconds, (long long)r.decoded);
  std::fprintf(stderr, "  %-10s %10s %7s %12s  %s\n", "stage", "seconds", "share", "ms/step", "what");
  const double steps = static_cast<double>(std::max<int64_t>(1, r.decoded + 1));
  for (int i = 0; i < profile::kStages; ++i) {
    const auto s = static_cast<profile::Stage>(i);
    std::fprintf(stderr, "  %-10s %10.3f %6.1f%% %12.3f  %s\n", profile::stage_name(s), t.seconds[i],
                 wall > 0 ? 100.0 * t.seconds[i] / wall : 0.0, 1000.0 * t.seconds[i] / steps, profile::stage_description(s));
  }
  std::fprintf(stderr, "  %-10s %10.3f %6.1f%%               sampling, detokenising, engine bookkeeping\n", "other",
               std::max(0.0, wall - total), wall > 0 ? 100.0 * std::max(0.0, wall - total) / wall : 0.0);
}

void run(RunArgs& a) {
  validate(a.sampler);
  if (a.n < 0) throw Error(ErrorKind::InvalidArgument, "-n must be >= 0, got " + std::to_string(a.n));
  if (a.engine.empty()) {
    const char* env = std::getenv("LARQL_ENGINE");
    a.engine = env != nullptr && *env != '\0' ? env : "standard";
  }
  const EngineSpec spec = parse_engine_spec(a.engine);  // fail on a bad spec before loading
  if (!a.seed_set) a.sampler.seed = std::random_device{}();
  std::string prompt = a.prompt;
  if (!a.prompt_file.empty()) {
    if (!a.prompt.empty()) throw Error(ErrorKind::InvalidArgument, "give the prompt as text or with -f FILE, not both");
    prompt = read_text_file(a.prompt_file);
  }
  for (const auto& s : a.stop)
    if (s.empty()) throw Error(ErrorKind::InvalidArgument, "--stop needs a non-empty string");
  if (!a.save_state.empty()) {
    const auto parent = std::filesystem::absolute(a.save_state).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(parent, ec))
      throw Error(ErrorKind::NotFound, "--save-state " + a.save_state + ": directory " + parent.string() + " does not exist");
    if (std::filesystem::is_directory(a.save_state, ec))
      throw Error(ErrorKind::InvalidArgument, "--save-state " + a.save_state + " is a directory; give a file name");
    // Never overwrite a file this command reads: the model, an engine's store, the resumed state is fine.
    std::vector<std::pair<std::string, std::string>> inputs = {{"the model", resolve_model(a.model)}};
    if (auto it = spec.params.find("store"); it != spec.params.end()) inputs.push_back({"the engine's store", it->second});
    if (!a.prompt_file.empty()) inputs.push_back({"the prompt file", a.prompt_file});
    for (const auto& [what, path] : inputs)
      if (std::filesystem::equivalent(a.save_state, path, ec))
        throw Error(ErrorKind::InvalidArgument, "--save-state " + a.save_state + " is " + what + "; refusing to overwrite it");
  }
  const std::string user_prompt = prompt;
  Loaded l = load(a.model, a.threads);
  const int64_t model_ctx = l.model->config().context_length;
  if (a.ctx_size > model_ctx)
    throw Error(ErrorKind::InvalidArgument, "--ctx-size must be in [1, " + std::to_string(model_ctx) + "]");
  const int64_t ctx = a.ctx_size > 0 ? a.ctx_size : model_ctx;
  if (a.chat) prompt = apply_gemma_chat_template({{"user", prompt}}, true);
  auto engine = make_engine(spec, l.forward);
  if (!a.resume.empty()) {
    engine->load_state(a.resume);  // refuses another model's or engine's file
    if (prompt.empty())
      throw Error(ErrorKind::InvalidArgument, "--resume needs a prompt: the text that continues the saved sequence");
  }
  // A resumed sequence already has its BOS; the prompt continues it.
  const bool bos = a.resume.empty() && l.tokenizer.add_bos();
  const auto ids = l.tokenizer.encode(prompt, bos, /*parse_special=*/true);
  if (ids.empty()) throw Error(ErrorKind::EmptyPrompt, "the prompt has no tokens");
  const int64_t past = engine->n_past();
  if (past + static_cast<int64_t>(ids.size()) > ctx)
    throw Error(ErrorKind::ContextOverflow, "the prompt is " + std::to_string(ids.size()) + " tokens" +
                                                (past > 0 ? " after " + std::to_string(past) + " resumed tokens" : "") +
                                                ", longer than the context of " + std::to_string(ctx) + " tokens");
  GenerateOptions opt;
  opt.max_tokens = std::min<int64_t>(a.n, ctx - past - static_cast<int64_t>(ids.size()));
  opt.continue_sequence = past > 0;
  opt.context_limit = ctx;
  opt.consume_last = !a.save_state.empty();
  opt.sampler = a.sampler;
  opt.stop_strings = a.stop;
  std::function<void(std::string_view)> sink;
  if (!a.json) {
    std::fputs(a.chat ? (user_prompt + "\n").c_str() : prompt.c_str(), stdout);
    std::fflush(stdout);
    sink = [](std::string_view s) {
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    };
  }
  profile::set_enabled(a.profile);
  profile::reset();
  GenerateResult r;
  try {
    r = generate(*engine, *l.forward, l.tokenizer, ids, opt, sink);
  } catch (...) {
    if (!a.json) std::fputs("\n", stdout);  // end the echoed prompt's line before the error
    std::fflush(stdout);
    throw;
  }
  const profile::Totals prof = profile::totals();
  if (!a.save_state.empty()) engine->save_state(a.save_state);
  if (a.json) {
    nlohmann::json j = {{"prompt_ids", r.prompt_ids}, {"ids", r.ids}, {"text", r.text},
                        {"stop_reason", r.stop_reason}, {"engine", spec.to_string()},
                        {"prefill_tokens", r.prefill_tokens}, {"prefill_tok_s", r.prefill_tok_s()},
                        {"decode_tok_s", r.decode_tok_s()}};
    if (a.profile) j["profile"] = profile_json(prof, r);
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    std::fflush(stdout);
    const std::string ran = r.prefill_tokens != static_cast<int64_t>(r.prompt_ids.size())
                                ? " (engine context " + std::to_string(r.prefill_tokens) + ")"
                                : "";
    std::fprintf(stderr, "[%zu prompt tokens%s | prefill %.1f tok/s | %zu generated | decode %.1f tok/s | engine %s]\n",
                 r.prompt_ids.size(), ran.c_str(), r.prefill_tok_s(), r.ids.size(), r.decode_tok_s(), spec.to_string().c_str());
    if (a.profile) print_profile(prof, r);
  }
}

}  // namespace

void register_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* s = app.add_subcommand("run", "generate a continuation of a prompt, streaming tokens");
  s->add_option("model", a->model, "GGUF path or a name in models/")->required();
  s->add_option("prompt", a->prompt, "prompt text");
  s->add_option("-f,--file", a->prompt_file, "read the prompt from a file");
  s->add_option("-n,--n-predict", a->n, "tokens to generate at most")->capture_default_str();
  add_sampler_flags(s, a->sampler, a->seed_set);
  s->add_option("--engine", a->engine, "KV engine spec (default: $LARQL_ENGINE or standard); see `larql engines`");
  s->add_flag("--chat", a->chat, "wrap the prompt in the model's chat template");
  s->add_option("--stop", a->stop, "stop before this string (repeatable)");
  add_threads_flag(s, a->threads);
  s->add_option("-c,--ctx-size", a->ctx_size, "context size in tokens (default: the model's)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  s->add_flag("--json", a->json, "print one JSON object instead of streaming");
  s->add_option("--save-state", a->save_state, "after generating, save the engine's state to this file");
  s->add_flag("--profile", a->profile, "print time per stage (embed, qkv, attention, ffn, codec, lm_head)");
  s->add_option("--resume", a->resume, "continue a sequence saved with --save-state (same model and engine)");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
