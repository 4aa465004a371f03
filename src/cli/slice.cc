// `larql slice NAME.vindex --preset P -o OUT [--dry-run]`: docs/vindex-format.md ("Slices").
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "util/error.h"
#include "vindex/slice.h"

namespace larql::cli {
namespace {

struct SliceArgs {
  std::string vindex, preset, out;
  bool dry_run = false, force = false, json = false;
};

void run_slice(const SliceArgs& a) {
  const auto r = vindex::slice_vindex(resolve_model(a.vindex), a.preset, a.out, a.dry_run, a.force);
  if (a.json) {
    nlohmann::json files = nlohmann::json::array();
    for (const auto& f : r.files) files.push_back({{"name", f.name}, {"bytes", f.bytes}});
    std::printf("%s\n", nlohmann::json({{"path", a.out}, {"preset", a.preset}, {"dry_run", a.dry_run}, {"files", files},
                                        {"bytes", r.bytes}, {"extract_level", vindex::extract_level_name(r.index.extract_level)},
                                        {"has_model_weights", r.index.has_model_weights}})
                                .dump()
                                .c_str());
    return;
  }
  std::printf("%s %s (preset %s, level %s):\n", a.dry_run ? "would write" : "wrote", a.out.c_str(), a.preset.c_str(),
              vindex::extract_level_name(r.index.extract_level));
  for (const auto& f : r.files)
    std::printf("  %-24s %12llu bytes\n", f.name.c_str(), static_cast<unsigned long long>(f.bytes));
  std::printf("  %-24s %12s\n", "index.json", "(rewritten)");
  std::printf("%zu files, %.1f MiB%s\n", r.files.size() + 1, r.bytes / 1048576.0, a.dry_run ? " (dry run: nothing written)" : "");
}

}  // namespace

void register_slice(CLI::App& app) {
  auto a = std::make_shared<SliceArgs>();
  CLI::App* cmd = app.add_subcommand("slice", "copy the files one role needs from a vindex into a new vindex");
  cmd->add_option("vindex", a->vindex, "the vindex directory (or its name in models/)")->required();
  std::string presets;
  for (const auto& n : vindex::slice_preset_names()) presets += (presets.empty() ? "" : " | ") + n;
  cmd->add_option("--preset", a->preset, presets + " (docs/vindex-format.md lists each one's files)")
      ->required()
      ->check(CLI::IsMember(vindex::slice_preset_names()));
  cmd->add_option("-o,--output", a->out, "the vindex directory to write")->required();
  cmd->add_flag("--dry-run", a->dry_run, "print the files and bytes that would be copied; write nothing");
  cmd->add_flag("--force", a->force, "replace an existing output directory");
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->callback([a] { run_slice(*a); });
}

}  // namespace larql::cli
