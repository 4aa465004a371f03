// `larql export MODEL -o OUT.gguf`: any model (GGUF, vindex at level inference, Hugging Face
// directory) as a GGUF file llama.cpp loads (extract/gguf_export.h). docs/cli.md ("export").
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/progress.h"
#include "extract/gguf_export.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace larql::cli {
namespace {

struct ExportArgs {
  std::string model, out;
  bool force = false, json = false;
};

void run_export(const ExportArgs& a) {
  const std::string path = resolve_model(a.model);
  check_model_dir(path, "export");
  auto model = Model::load(path);  // every tensor shape-checked by role before a byte is written
  register_input(path, "the model");
  extract::ExportOptions opt;
  opt.force = a.force;
  std::unique_ptr<Progress> bar;
  opt.progress = [&](uint64_t done, uint64_t total) {
    if (!bar) bar = std::make_unique<Progress>("export (MiB)", static_cast<int64_t>((total + 1048575) / 1048576));
    bar->update(static_cast<int64_t>(done == total ? (total + 1048575) / 1048576 : done / 1048576));
  };
  const auto r = extract::export_gguf(model->source(), a.out, opt);
  if (a.json) {
    std::printf("%s\n", nlohmann::json({{"path", a.out}, {"source", path}, {"source_format", model->source().format()},
                                        {"tensors", r.tensors}, {"metadata", r.metadata},
                                        {"metadata_copied", r.copied_metadata}, {"bytes", r.bytes},
                                        {"seconds", r.seconds}})
                            .dump()
                            .c_str());
  } else {
    std::printf("wrote %s: %zu tensors, %zu metadata entries (%s), %.1f MiB in %.1f s\n", a.out.c_str(), r.tensors,
                r.metadata, r.copied_metadata ? "copied from the GGUF" : "from the config and vocabulary",
                r.bytes / 1048576.0, r.seconds);
  }
}

}  // namespace

void register_export(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export", "write a model (GGUF, vindex at level inference, Hugging Face directory) as a "
                                               "GGUF file llama.cpp loads");
  cmd->add_option("model", a->model, kModelHelp)->required();
  cmd->add_option("-o,--output", a->out, "the GGUF file to write (e.g. model.gguf)")
      ->required()
      ->check([](const std::string& s) { return s.empty() ? std::string("the output file must not be empty") : std::string(); });
  cmd->add_flag("--force", a->force, "replace an existing output file");
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->callback([a] { run_export(*a); });
}

}  // namespace larql::cli
