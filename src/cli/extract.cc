// `larql extract SOURCE -o NAME.vindex` (alias `larql convert gguf-to-vindex`) and
// `larql verify NAME.vindex`: docs/cli.md, docs/vindex-format.md.
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/progress.h"
#include "extract/extract.h"
#include "util/error.h"
#include "vindex/edited_slots.h"
#include "vindex/index.h"

namespace larql::cli {
namespace {

struct ExtractArgs {
  std::string source, out, level = "browse", dtype = "f16", quant = "keep";
  int down_top_k = 10;
  int threads = 0;
  bool force = false, json = false, resume = false;
};

void run_extract(const ExtractArgs& a) {
  const auto level = vindex::extract_level_from_name(a.level);
  if (!level)
    throw larql::Error(larql::ErrorKind::Usage, "--level \"" + a.level + "\" is not one of browse, attention, inference, all");
  auto model = Model::load(resolve_model(a.source));
  extract::ExtractOptions opt;
  opt.level = *level;
  opt.dtype = a.dtype;
  opt.quant = a.quant;
  opt.down_top_k = a.down_top_k;
  opt.threads = a.threads;
  opt.force = a.force;
  opt.resume = a.resume;
  // A vindex compiled from edits: its record of edited slots travels to the output.
  if (std::filesystem::is_directory(a.source)) opt.edited_slots = vindex::read_edited_slots(a.source);
  std::map<std::string, std::unique_ptr<Progress>> bars;
  opt.progress = [&](const std::string& phase, int64_t done, int64_t total) {
    auto& bar = bars[phase];
    if (!bar) bar = std::make_unique<Progress>(phase, total);
    bar->update(done);
  };
  const auto r = extract::extract_vindex(*model, a.out, opt);
  if (a.resume && !a.json) {
    if (r.resumed_from.empty())
      std::fprintf(stderr, "--resume: no interrupted extract of %s with these options was found; extracted afresh\n", a.out.c_str());
    else
      std::fprintf(stderr, "--resume: continued %s, kept %zu finished file(s)\n", r.resumed_from.c_str(), r.kept_files.size());
  }
  if (a.json) {
    nlohmann::json j = {{"path", a.out}, {"extract_level", vindex::extract_level_name(r.index.extract_level)},
                        {"dtype", r.index.dtype}, {"num_layers", r.index.num_layers},
                        {"features", r.index.layers.empty() ? 0 : r.index.layers[0].num_features * r.index.num_layers},
                        {"files", r.index.checksums.size() + 1}, {"bytes", r.bytes}, {"seconds", r.seconds},
                        {"fingerprint", r.index.source.fingerprint}};
    if (a.resume) j["resumed"] = {{"from", r.resumed_from}, {"kept", r.kept_files}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("wrote %s: %s level, %s, %lld layers, %zu files, %.1f MiB in %.1f s\n", a.out.c_str(),
                vindex::extract_level_name(r.index.extract_level), r.index.dtype.c_str(),
                static_cast<long long>(r.index.num_layers), r.index.checksums.size() + 1, r.bytes / 1048576.0, r.seconds);
  }
}

void add_extract_options(CLI::App* cmd, ExtractArgs& a) {
  cmd->add_option("source", a.source, "GGUF path, Hugging Face directory (config.json + safetensors) or a name in models/")->required();
  cmd->add_option("-o,--output", a.out, "the vindex directory to write (e.g. gemma.vindex)")
      ->required()
      ->check([](const std::string& s) { return s.empty() ? std::string("the output directory must not be empty") : std::string(); });
  cmd->add_option("--level", a.level,
                  "browse (gate vectors, embeddings, down_meta, tokenizer) | attention (+ attention weights and "
                  "norms) | inference | all (+ every weight: the vindex runs)")
      ->capture_default_str();
  cmd->add_option("--quant", a.quant, "model weights at inference level: keep (the source's own blocks, byte for byte) | none (matrices "
                  "at --dtype) | q4k (re-quantised to Q4_K / Q6_K; embedding at --dtype)")
      ->check(CLI::IsMember({"keep", "none", "q4k"}))
      ->capture_default_str();
  cmd->add_option("--dtype", a.dtype, "float type of the side-channel files, and of the matrices with --quant none: f32 | f16 | bf16")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->capture_default_str();
  add_int_flag(cmd, "--down-top-k", a.down_top_k, 1, 4096, "tokens recorded per FFN feature in down_meta.bin (default 10)");
  add_threads_flag(cmd, a.threads);
  cmd->add_flag("--force", a.force, "replace an existing output directory");
  cmd->add_flag("--resume", a.resume,
                "continue an interrupted extract to the same output with the same options: finished files are "
                "kept (their SHA-256 re-checked), the rest redone");
  cmd->add_flag("--json", a.json, "print one JSON object");
}

void run_verify(const std::string& dir, bool json) {
  const vindex::VerifyReport r = vindex::verify(dir);
  if (json) {
    std::printf("%s\n", nlohmann::json({{"path", dir}, {"ok", r.problems.empty()}, {"files", r.files}, {"bytes", r.bytes},
                                        {"problems", r.problems}}).dump().c_str());
  } else if (r.problems.empty()) {
    std::printf("%s: ok (%lld files, %.1f MiB, every SHA-256 matches index.json)\n", dir.c_str(),
                static_cast<long long>(r.files), r.bytes / 1048576.0);
  } else {
    for (const auto& p : r.problems) std::printf("%s: %s\n", dir.c_str(), p.c_str());
  }
  if (!r.problems.empty())
    throw larql::Error(larql::ErrorKind::Format, dir + ": " + std::to_string(r.problems.size()) + " problem(s); the vindex is damaged");
}

}  // namespace

void register_extract(CLI::App& app) {
  auto a = std::make_shared<ExtractArgs>();
  CLI::App* cmd = app.add_subcommand("extract", "write a model as a vindex directory (docs/vindex-format.md)");
  add_extract_options(cmd, *a);
  cmd->callback([a] { run_extract(*a); });

  auto b = std::make_shared<ExtractArgs>();
  CLI::App* conv = app.add_subcommand("convert", "convert between formats (gguf-to-vindex)");
  CLI::App* g2v = conv->add_subcommand("gguf-to-vindex", "the same as `larql extract`");
  conv->require_subcommand(1);
  add_extract_options(g2v, *b);
  g2v->callback([b] { run_extract(*b); });

  auto dir = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  CLI::App* ver = app.add_subcommand("verify", "check every file of a vindex against the SHA-256 in its index.json");
  ver->add_option("vindex", *dir, "the vindex directory")->required();
  ver->add_flag("--json", *json, "print one JSON object");
  ver->callback([dir, json] { run_verify(*dir, *json); });
}

}  // namespace larql::cli
