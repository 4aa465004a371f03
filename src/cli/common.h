// Shared pieces of the CLI verbs: model resolution, loading, printing.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "api/api.h"
#include "inference/forward.h"
#include "inference/sampler.h"
#include "kv/registry.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/parse.h"
#include "util/text_file.h"

namespace larql::cli {

/// The model cache's directories, in lookup order: $LARQL_MODELS (when set), ./models,
/// <exe>/../models. The first is where `larql link` puts links.
std::vector<std::string> model_dirs();

/// A path, or a short name looked up in model_dirs(): NAME, NAME.gguf (a GGUF file) or
/// NAME.vindex (a vindex directory). Error{NotFound} lists what is available.
std::string resolve_model(const std::string& name_or_path);

/// The help text of every verb's MODEL argument.
inline constexpr const char* kModelHelp = "a GGUF file, a vindex or Hugging Face directory, or a name in models/";

/// api::check_model_dir.
using api::check_model_dir;

/// A model as the verbs use it: the API facade's LoadedModel (api/api.h) and a Forward of its
/// own; `tokenizer` is the handle's (alive as long as the handle).
struct Loaded {
  std::shared_ptr<api::LoadedModel> handle;
  std::shared_ptr<const Model> model;
  std::shared_ptr<Forward> forward;
  const Tokenizer& tokenizer;
};
/// Resolve (resolve_model), then api::LoadedModel::open with `threads` threads (<= 0: all
/// cores), warning when that is more than the cores. A vindex that cannot run a model (level
/// browse or attention) is Error{Unsupported} naming its level, what it holds and that `verb`
/// needs level inference.
/// Where the FFN runs (docs/sharding.md): `--ffn remote:HOST:PORT[,...]` and the shards' TLS.
struct FfnArgs {
  std::string ffn;                            ///< "" (here) or remote:HOST:PORT[,HOST:PORT...]
  std::string pipeline;                       ///< --pipeline: "" (here) or remote:HOST:PORT[,HOST:PORT...]
  std::string ca, cert, key, server_name;     ///< --shard-ca, --shard-cert, --shard-key, --shard-tls-name
  int64_t timeout_ms = 30000;                 ///< --shard-timeout-ms
  std::string device = "cpu";                 ///< --device: cpu or cuda (docs/backends.md)
};
/// Adds --device, --ffn, --pipeline, then add_shard_client_flags.
void add_ffn_flags(CLI::App* app, FfnArgs& a);
/// Adds --shard-ca, --shard-cert, --shard-key, --shard-tls-name, --shard-timeout-ms.
void add_shard_client_flags(CLI::App* app, FfnArgs& a);

/// With `ffn` set to a remote FFN, the model is opened without its FFN weights and runs each
/// layer's FFN on its shard (api::OpenOptions::ffn).
Loaded load(const std::string& model, int threads, const std::string& verb = "run", const FfnArgs* ffn = nullptr);

/// The conversation in the model's own chat format (chat_format_of: the vocabulary's
/// tokenizer.chat_template, else its turn-marker tokens). Error{Unsupported} naming the formats larql applies when the model
/// has no template or one larql does not recognise.
std::string apply_model_chat_template(const Tokenizer& tok, const std::vector<ChatMessage>& messages);

/// "1 token", "2 tokens": `n` and the noun, singular when n is 1 (`many` defaults to one + "s").
inline std::string count_of(long long n, const std::string& one, const std::string& many = {}) {
  return std::to_string(n) + " " + (n == 1 ? one : many.empty() ? one + "s" : many);
}

/// Adds -t/--threads (1..1024; unset = all cores). More threads than cores is allowed but
/// warned about when the model loads (it runs many times slower).
void add_threads_flag(CLI::App* app, int& threads);

// Numeric flags, parsed once by util/parse.h: overflow-checked and range-checked. A bad value
// is a command-line error (exit 2) naming the flag and its range; the range is in --help.
CLI::Option* add_int_flag(CLI::App* app, const std::string& names, int64_t& out, int64_t lo, int64_t hi,
                          const std::string& help);
CLI::Option* add_int_flag(CLI::App* app, const std::string& names, int& out, int64_t lo, int64_t hi,
                          const std::string& help);
CLI::Option* add_float_flag(CLI::App* app, const std::string& names, double& out, const FloatRange& range,
                            const std::string& help);
CLI::Option* add_float_flag(CLI::App* app, const std::string& names, float& out, const FloatRange& range,
                            const std::string& help);

/// Adds --max-input-mb (the cap on one text input read by util/text_file.h), default 64.
void add_max_input_flag(CLI::App* app, uint64_t& max_bytes);

/// Read a UTF-8 text input of at most `max_bytes` and register it as input `what` (see
/// util/text_file.h for the errors).
std::string read_text_file(const std::string& path, const std::string& what = "the text file",
                           uint64_t max_bytes = kDefaultMaxInputBytes);

// The CLI's defaults for the verbs that run an engine (run, chat, bench, accuracy), in one place
// (docs/cli.md "Defaults"): the engine ($LARQL_ENGINE or "standard", add_engine_flag), threads
// (all cores, add_threads_flag), sampling (SamplerParams{} of inference/sampler.h, through
// add_sampler_flags) with a random seed unless --seed (resolve_seed), the context (the model's;
// kv/session.h SessionOptions).

/// The default engine spec: $LARQL_ENGINE or "standard".
std::string default_engine_spec();

/// Sets `engine` to default_engine_spec() and adds --engine (with `list`: "--engines,--engine",
/// specs split on ';').
void add_engine_flag(CLI::App* app, std::string& engine, bool list = false);

/// The seed a run uses: --seed's (seed_set) or a random one drawn now.
void resolve_seed(SamplerParams& p, bool seed_set);

/// parse_engine_spec, then the documented environment defaults for keys the spec leaves unset
/// (non-empty values only): boundary-kv's `archive_dir` from $LARQL_ARCHIVE_DIR,
/// boundary-per-layer's `record` from $LARQL_BPL_RECORD. The engines themselves read no
/// environment variable; the CLI is where they become spec keys (docs/engines.md).
EngineSpec parse_cli_engine_spec(std::string_view text);
/// parse_engine_list with the same environment defaults for each spec.
std::vector<EngineSpec> parse_cli_engine_list(std::string_view text);

/// Adds -n/--temperature/--top-k/--top-p/--min-p/--repeat-penalty/--seed to a subcommand.
void add_sampler_flags(CLI::App* app, SamplerParams& p, bool& seed_set);

/// Registration of every verb (one file each).
void register_run(CLI::App& app);
void register_chat(CLI::App& app);
void register_show(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_parity(CLI::App& app);   // where two models, sources or engines diverge
void register_diag(CLI::App& app);     // per-layer residual norms, non-finite weights and activations
void register_shannon(CLI::App& app);  // bits per token per engine
void register_compare(CLI::App& app);  // A/B of two vindexes of one model
void register_compile(CLI::App& app);  // a vindex as a GGUF or a Hugging Face directory
void register_bench(CLI::App& app);
void register_engines(CLI::App& app);
void register_accuracy(CLI::App& app);
void register_calibrate(CLI::App& app);
void register_apollo(CLI::App& app);
void register_lql(CLI::App& app);      // the LQL REPL and scripts
void register_serve(CLI::App& app);    // the HTTP server
void register_router(CLI::App& app);   // the HTTP server over shards (docs/sharding.md)
void register_extract(CLI::App& app);  // extract, convert gguf-to-vindex, verify
void register_build(CLI::App& app);    // a vindex from a Vindexfile
void register_slice(CLI::App& app);
void register_export(CLI::App& app);
void register_cache(CLI::App& app);    // list, link, rm
void register_label(CLI::App& app);    // probe labels: feature_labels.json
void register_edit_eval(CLI::App& app);  // knowledge edits measured: efficacy, paraphrase, neighbourhood, ...

/// Write to stdout and flush. Error{Io} naming stdout and the OS reason (a closed pipe, a full
/// disk), so streaming stops at the first failed write.
void write_stdout(std::string_view s);

/// Peak resident set size of this process, bytes.
size_t peak_rss_bytes();

}  // namespace larql::cli
