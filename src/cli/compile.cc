// `larql compile VINDEX -o OUT.gguf | OUT-dir/`: a vindex (its own files: what edits were compiled
// into it included) — or any model larql reads — as a GGUF file (extract/gguf_export.h, as `larql
// export`) or as a Hugging Face directory (extract/hf_export.h: config.json, safetensors,
// tokenizer and generation config). docs/cli.md ("compile").
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/progress.h"
#include "extract/gguf_export.h"
#include "extract/hf_export.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace larql::cli {
namespace {

struct CompileArgs {
  std::string model, out, dtype = "auto";
  double max_shard_mb = 5000;
  bool force = false, json = false, no_verify = false;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void run(const CompileArgs& a) {
  std::error_code ec;
  const bool gguf = ends_with(a.out, ".gguf") && !std::filesystem::is_directory(a.out, ec);
  if (gguf && a.dtype != "auto")  // a flag that does not fit: a command-line error (exit 2), before loading
    throw Error(ErrorKind::Usage, "--dtype is for a Hugging Face directory; a GGUF keeps the stored types");
  const std::string path = resolve_model(a.model);
  check_model_dir(path, "compile");
  auto model = Model::load(path);  // every tensor shape-checked by role before a byte is written
  register_input(path, "the model");
  std::unique_ptr<Progress> bar;
  auto progress = [&](uint64_t done, uint64_t total) {
    if (!bar) bar = std::make_unique<Progress>("compile (MiB)", static_cast<int64_t>((total + 1048575) / 1048576));
    bar->update(static_cast<int64_t>(done == total ? (total + 1048575) / 1048576 : done / 1048576));
  };
  nlohmann::json j = {{"source", path}, {"source_format", model->source().format()}, {"output", a.out}};
  if (gguf) {
    extract::ExportOptions opt;
    opt.force = a.force;
    opt.progress = progress;
    const auto r = extract::export_gguf(model->source(), a.out, opt);
    j.update({{"format", "gguf"}, {"tensors", r.tensors}, {"bytes", r.bytes}, {"seconds", r.seconds}});
    if (a.json) std::printf("%s\n", j.dump().c_str());
    else std::printf("wrote %s (GGUF): %zu tensors, %.1f MiB in %.1f s\n", a.out.c_str(), r.tensors, r.bytes / 1048576.0, r.seconds);
    return;
  }
  extract::HfExportOptions opt;
  opt.force = a.force;
  opt.dtype = a.dtype;
  opt.max_shard_bytes = static_cast<uint64_t>(a.max_shard_mb * 1e6);
  opt.verify = !a.no_verify;
  opt.progress = progress;
  if (std::filesystem::is_directory(path, ec)) opt.tokenizer_dir = path;  // a vindex's own tokenizer files
  const auto r = extract::export_hf_dir(model->source(), a.out, opt);
  j.update({{"format", "safetensors"},
            {"tensors", r.tensors},
            {"shards", r.shards},
            {"bytes", r.bytes},
            {"dequantised", r.dequantised},
            {"converted", r.converted},
            {"unpermuted_qk", r.unpermuted_qk},
            {"norm_values_inexact", r.norm_values_inexact},
            {"tokenizer_copied", r.tokenizer_copied},
            {"verified", opt.verify},
            {"seconds", r.seconds}});
  if (a.json) {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("wrote %s (Hugging Face safetensors): %zu tensors in %zu file%s, %.1f MiB in %.1f s%s\n", a.out.c_str(), r.tensors,
              r.shards, r.shards == 1 ? "" : "s", r.bytes / 1048576.0, r.seconds, opt.verify ? "; loads back" : "");
  if (r.dequantised > 0)
    std::printf("  %zu block-quantised tensors dequantised to f32 (the logits are the float model's, not the blocks')\n",
                r.dequantised);
  if (r.converted > 0) std::printf("  %zu float tensors converted to %s\n", r.converted, a.dtype.c_str());
  if (r.unpermuted_qk) std::printf("  Q/K rows put back in Hugging Face's RoPE order (the GGUF pairs adjacent dimensions)\n");
  if (r.norm_values_inexact > 0)
    std::printf("  %llu norm multipliers do not survive 1 + (x - 1) in f32 bit for bit\n", (unsigned long long)r.norm_values_inexact);
}

}  // namespace

void register_compile(CLI::App& app) {
  auto a = std::make_shared<CompileArgs>();
  CLI::App* s = app.add_subcommand(
      "compile", "write a vindex (or any model) as a Hugging Face safetensors directory or a GGUF file");
  s->footer(
      "Examples:\n"
      "  larql compile gemma.vindex -o gemma-hf/            # config.json, model.safetensors, tokenizer\n"
      "  larql compile edited.vindex -o edited.gguf         # the same as `larql export`\n"
      "  larql compile q4k.vindex -o hf/ --dtype bf16 --max-shard-mb 2000\n"
      "  larql run gemma-hf/ \"Paris is the capital of\" -n 8  # larql reads the directory back");
  s->add_option("model", a->model, std::string("the vindex (level inference) to compile; also ") + kModelHelp)->required();
  s->add_option("-o,--output", a->out, "OUT.gguf for a GGUF file, any other name for a Hugging Face directory")
      ->required()
      ->check([](const std::string& v) { return v.empty() ? std::string("the output must not be empty") : std::string(); });
  s->add_option("--dtype", a->dtype,
                "directory tensors: auto (float tensors as stored, quantised ones dequantised to f32), f32, f16 or bf16")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16"}))
      ->capture_default_str();
  add_float_flag(s, "--max-shard-mb", a->max_shard_mb, FloatRange{0.001, 1e7},
               "split the safetensors into shards of at most this many MB (10^6 bytes) with model.safetensors.index.json,");
  s->add_flag("--force", a->force, "replace an existing output");
  s->add_flag("--no-verify", a->no_verify, "skip loading the written directory back before it is renamed into place");
  s->add_flag("--json", a->json, "print one JSON object");
  s->callback([a] { run(*a); });
}

}  // namespace larql::cli
