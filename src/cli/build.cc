// `larql build [DIR]`: a vindex from DIR/Vindexfile (docs/vindexfile.md, docs/cli.md "build").
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/progress.h"
#include "util/error.h"
#include "util/parse.h"
#include "vindex/sha256.h"
#include "vindexfile/build.h"
#include "vindexfile/vindexfile.h"

namespace larql::cli {

extern const char* const kDefaultRelationsJson;

namespace {

namespace fs = std::filesystem;

struct BuildArgs {
  std::string dir = ".", file, out, cache_dir;
  bool no_cache = false, json = false, quiet = false;
  int threads = 0;
};

/// index.json's extraction time: $SOURCE_DATE_EPOCH (reproducible-builds.org) when set, else the
/// epoch — never the clock, so a build does not depend on when it ran.
std::string extraction_time() {
  const char* env = std::getenv("SOURCE_DATE_EPOCH");
  std::time_t t = 0;
  if (env && *env) {
    t = static_cast<std::time_t>(parse_int(env, 0, int64_t{253402300799}, "$SOURCE_DATE_EPOCH"));
  }
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// The running larql's identity: its executable's SHA-256 (another build of larql never reuses
/// this one's cached steps).
std::string tool_id() {
  try {
    return "larql 0.1.0 " + vindex::sha256_file("/proc/self/exe");
  } catch (const Error&) {
    return "larql 0.1.0";
  }
}

void run_build(const BuildArgs& a) {
  const fs::path dir = a.dir.empty() ? fs::path(".") : fs::path(a.dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(ErrorKind::NotFound, "build directory " + dir.string() + " does not exist");
  const fs::path file = a.file.empty() ? dir / "Vindexfile" : fs::path(a.file);
  const std::string text = read_text_file(file.string(), "the Vindexfile", 1 << 20);
  const vindexfile::Vindexfile vf = vindexfile::parse(text, file.string());

  vindexfile::BuildOptions opt;
  opt.dir = dir.string();
  opt.output = a.out.empty() ? (dir / "build" / "vindex").string() : a.out;
  if (a.out.empty()) {  // the default's DIR/build is made (one level, in DIR); -o's parent must exist
    std::error_code mk;
    fs::create_directory(dir / "build", mk);
    if (mk) throw Error(ErrorKind::Io, "cannot create " + (dir / "build").string() + ": " + mk.message());
  }
  opt.cache_dir = a.cache_dir;
  opt.use_cache = !a.no_cache;
  opt.threads = a.threads;
  opt.extracted_at = extraction_time();
  opt.tool_id = tool_id();
  opt.resolve_name = [](const std::string& name) { return resolve_model(name); };
  opt.builtin_relations = kDefaultRelationsJson;
  const bool quiet = a.quiet;
  opt.log = [quiet](const std::string& line) {
    if (!quiet) std::fprintf(stderr, "build: %s\n", line.c_str());
  };
  std::map<std::string, std::unique_ptr<Progress>> bars;
  opt.progress = [&](const std::string& phase, int64_t done, int64_t total) {
    auto& bar = bars[phase];
    if (!bar) bar = std::make_unique<Progress>(phase, total);
    bar->update(done);
  };
  const auto r = vindexfile::build(vf, opt);
  if (a.json) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : r.steps)
      steps.push_back({{"step", s.step}, {"key", s.key}, {"cached", s.cached}, {"seconds", s.seconds}});
    const nlohmann::json j = {{"output", r.output}, {"steps", steps},           {"files", r.files},
                              {"index_sha256", r.index_sha256}, {"bytes", r.bytes}, {"seconds", r.seconds}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  for (const auto& s : r.steps) {
    if (s.cached)
      std::printf("%-8s cached   %s\n", s.step.c_str(), s.key.substr(0, 16).c_str());
    else
      std::printf("%-8s built    %s  %.1f s\n", s.step.c_str(), s.key.substr(0, 16).c_str(), s.seconds);
  }
  std::printf("wrote %s: %zu files, %.1f MiB in %.1f s; index.json SHA-256 %s\n", r.output.c_str(), r.files.size() + 1,
              r.bytes / 1048576.0, r.seconds, r.index_sha256.c_str());
}

}  // namespace

void register_build(CLI::App& app) {
  auto a = std::make_shared<BuildArgs>();
  CLI::App* cmd = app.add_subcommand("build", "build a vindex from a Vindexfile: FROM, PATCH, INSERT / UPDATE / DELETE, LABELS (docs/vindexfile.md)");
  cmd->add_option("dir", a->dir, "the directory of the Vindexfile; its relative paths are read from here (default .)");
  cmd->add_option("-f,--file", a->file, "the Vindexfile (default DIR/Vindexfile)");
  cmd->add_option("-o,--output", a->out, "the vindex to write, replaced whole when it is one (default DIR/build/vindex)");
  cmd->add_option("--cache-dir", a->cache_dir, "where finished steps are kept (default DIR/.larql-cache)");
  cmd->add_flag("--no-cache", a->no_cache, "run every step; read nothing from the cache and keep nothing in it");
  add_threads_flag(cmd, a->threads);
  cmd->add_flag("-q,--quiet", a->quiet, "no progress lines on stderr");
  cmd->add_flag("--json", a->json, "print one JSON object: the output, each step (key, cached, seconds), every file's SHA-256");
  cmd->callback([a] { run_build(*a); });
}

}  // namespace larql::cli
