// Shared pieces of the CLI verbs: model resolution, loading, printing.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "inference/forward.h"
#include "inference/sampler.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace larql::cli {

/// A path, or a short name looked up in $LARQL_MODELS, ./models and <exe>/../models
/// (with or without ".gguf"). Error{NotFound} lists what is available.
std::string resolve_model(const std::string& name_or_path);

struct Loaded {
  std::shared_ptr<Model> model;
  std::shared_ptr<Forward> forward;
  Tokenizer tokenizer;
};
/// Resolve, load and bind to `threads` threads (<= 0: all cores).
Loaded load(const std::string& model, int threads);

/// Adds -t/--threads (1..1024; unset = all cores).
void add_threads_flag(CLI::App* app, int& threads);

/// Read a whole text file; Error{NotFound}/Error{Io} naming it (a directory is an error).
std::string read_text_file(const std::string& path);

/// Adds -n/--temperature/--top-k/--top-p/--min-p/--repeat-penalty/--seed to a subcommand.
void add_sampler_flags(CLI::App* app, SamplerParams& p, bool& seed_set);

/// Registration of every verb (one file each).
void register_run(CLI::App& app);
void register_chat(CLI::App& app);
void register_show(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_bench(CLI::App& app);
void register_engines(CLI::App& app);
void register_accuracy(CLI::App& app);
void register_calibrate(CLI::App& app);
void register_apollo(CLI::App& app);

/// Peak resident set size of this process, bytes.
size_t peak_rss_bytes();

}  // namespace larql::cli
