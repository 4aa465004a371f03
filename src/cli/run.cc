// `larql run MODEL "prompt"`: generate a continuation, streaming tokens to stdout.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/common.h"
#include "cli/progress.h"
#include "kv/generate.h"
#include "kv/registry.h"
#include "kv/session.h"
#include "util/error.h"
#include "util/profile.h"

namespace larql::cli {
namespace {

/// Prompts at least this long show a progress bar while they are read (stderr on a terminal).
constexpr size_t kPrefillBarTokens = 1024;

struct RunArgs {
  FfnArgs ffn;
  std::string model, prompt, engine, prompt_file, save_state, resume;
  int64_t n = 128;
  int threads = 0;
  int64_t ctx_size = 0;
  uint64_t max_input_bytes = kDefaultMaxInputBytes;
  bool chat = false, json = false, seed_set = false, profile = false, ignore_eos = false;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_ids;
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
  const EngineSpec spec = parse_cli_engine_spec(a.engine);  // fail on a bad spec before loading
  resolve_seed(a.sampler, a.seed_set);
  std::string prompt = a.prompt;
  if (!a.prompt_file.empty()) {
    if (!a.prompt.empty()) throw Error(ErrorKind::InvalidArgument, "give the prompt as text or with -f FILE, not both");
    prompt = read_text_file(a.prompt_file, "the prompt file", a.max_input_bytes);
  }
  for (const auto& s : a.stop)
    if (s.empty()) throw Error(ErrorKind::InvalidArgument, "--stop needs a non-empty string");
  const std::string user_prompt = prompt;
  Loaded l = load(a.model, a.threads, "run", &a.ffn);
  const int64_t model_ctx = l.model->config().context_length;
  if (a.ctx_size > model_ctx)
    throw Error(ErrorKind::Usage, "--ctx-size must be an integer in " + int_range_text(1, model_ctx) +
                                      " (this model's context), got '" + std::to_string(a.ctx_size) + "'");
  if (a.chat) prompt = apply_model_chat_template(l.tokenizer, {{"user", prompt}});
  SessionOptions so;
  so.context = a.ctx_size;
  so.resume = a.resume;
  so.save_state = a.save_state;
  so.save_state_name = "--save-state";
  // Opens the engine's own inputs (a store, a record), refuses --save-state onto an input and a
  // resumed file of another model or engine: all before any generation (kv/session.h).
  Session session(l.forward, l.handle->tokenizer_ptr(), spec, so);
  if (!session.engine().info().note.empty()) std::fprintf(stderr, "note: %s\n", session.engine().info().note.c_str());
  std::vector<std::string> notes;
  const auto ids = session.encode(prompt, &notes);  // BOS only on a new sequence
  session.check_prompt(ids);                          // before the prompt is echoed
  GenerateOptions opt;
  opt.max_tokens = a.n;  // the context stops generation too (stop_reason "context")
  opt.restore_rng = !a.seed_set;  // an explicit --seed replaces the saved random state
  opt.sampler = a.sampler;
  opt.stop_strings = a.stop;
  opt.stop_at_eog = !a.ignore_eos;
  opt.stop_ids = a.stop_ids;
  for (const auto& n : notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  std::function<void(std::string_view)> sink;
  if (!a.json) {
    write_stdout(a.chat ? user_prompt + "\n" : prompt);
    sink = [](std::string_view s) { write_stdout(s); };
  }
  std::unique_ptr<Progress> bar;
  if (!a.json && ids.size() >= kPrefillBarTokens) {  // a long prompt shows progress (on a terminal)
    bar = std::make_unique<Progress>("prompt", static_cast<int64_t>(ids.size()));
    opt.on_prefill_progress = [&bar](int64_t done, int64_t) { bar->update(done); };
  }
  profile::set_enabled(a.profile);
  profile::reset();
  GenerateResult r;
  try {
    r = session.generate(ids, opt, sink);  // saves --save-state after generating
  } catch (const Error& e) {
    if (!a.json && e.kind() != ErrorKind::Io) std::fputs("\n", stdout);  // end the echoed prompt's line
    std::fflush(stdout);
    throw;
  }
  const profile::Totals prof = profile::totals();
  for (const auto& n : r.notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  if (a.json) {
    nlohmann::json j = {{"prompt_ids", r.prompt_ids}, {"ids", r.ids}, {"text", r.text},
                        {"stop_reason", r.stop_reason}, {"engine", spec.to_string()},
                        {"prefill_tokens", r.prefill_tokens}, {"prefill_tok_s", r.prefill_tok_s()},
                        {"decode_tok_s", r.decode_tok_s()}};
    if (a.profile) j["profile"] = profile_json(prof, r);
    write_stdout(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  } else {
    write_stdout("\n");
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
  s->add_option("model", a->model, kModelHelp)->required();
  s->add_option("prompt", a->prompt, "prompt text");
  s->add_option("-f,--file", a->prompt_file, "read the prompt from a UTF-8 text file");
  add_int_flag(s, "-n,--n-predict", a->n, 0, INT32_MAX, "tokens to generate at most (the context also stops it),");
  add_sampler_flags(s, a->sampler, a->seed_set);
  add_engine_flag(s, a->engine);
  s->add_flag("--chat", a->chat, "wrap the prompt in the model's chat template");
  s->add_option("--stop", a->stop, "stop before this string (repeatable)");
  s->add_option_function<std::string>(
       "--stop-id",
       [a](const std::string& v) {
         try {
           a->stop_ids.push_back(static_cast<int32_t>(parse_int(v, 0, INT32_MAX, "--stop-id")));
         } catch (const Error& e) {
           throw CLI::ValidationError(e.what());
         }
       },
       "also stop at this token id (repeatable; the end-of-generation ids <eos>, <end_of_turn> and </s> always stop)")
      ->type_name("INT");
  s->add_flag("--ignore-eos", a->ignore_eos, "do not stop at end-of-generation tokens (<eos>, <end_of_turn>, </s>)");
  add_threads_flag(s, a->threads);
  add_ffn_flags(s, a->ffn);
  s->add_option_function<std::string>(
       "-c,--ctx-size",
       [a](const std::string& v) {
         try {
           a->ctx_size = parse_int(v, 1, INT32_MAX, "--ctx-size");
         } catch (const Error&) {  // the upper end is checked against the model once it is loaded
           throw CLI::ValidationError("--ctx-size must be an integer in [1, the model's context length], got '" + v + "'");
         }
       },
       "context size in tokens [1, the model's context length] (32,768 for Gemma 3 270M; default: the model's)")
      ->type_name("INT");
  add_max_input_flag(s, a->max_input_bytes);
  s->add_flag("--json", a->json, "print one JSON object instead of streaming");
  s->add_option("--save-state", a->save_state, "after generating, save the sequence (engine state, tokens, sampler) to this file");
  s->add_flag("--profile", a->profile, "print time per stage (embed, qkv, attention, ffn, codec, lm_head)");
  s->add_option("--resume", a->resume,
                "continue a sequence saved with --save-state (same model and engine); the prompt may be empty");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
