#include "cli/common.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <random>

#include "formats/gguf.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace larql::cli {

std::string resolve_model(const std::string& name) {
  if (fs::exists(name)) return name;
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("LARQL_MODELS")) dirs.emplace_back(env);
  dirs.emplace_back("models");
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path().parent_path() / "models");
  for (const auto& d : dirs)
    for (const std::string& cand : {name, name + ".gguf"})
      if (fs::is_regular_file(d / cand, ec)) return (d / cand).string();
  std::set<std::string> names;
  for (const auto& d : dirs) {
    if (!fs::is_directory(d, ec)) continue;
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.path().extension() == ".gguf") names.insert(e.path().stem().string());
  }
  std::string avail;
  for (const auto& n : names) avail += (avail.empty() ? "" : ", ") + n;
  throw Error(ErrorKind::NotFound, "model '" + name + "' not found: not a file, and not a name in models/" +
                                       (avail.empty() ? std::string(" (no models installed: run `make setup`)")
                                                      : " (available: " + avail + ")"));
}

Loaded load(const std::string& model, int threads) {
  auto m = Model::load(resolve_model(model));
  Tokenizer tok = Tokenizer::from_gguf(m->file());
  auto fwd = std::make_shared<Forward>(m, threads);
  return Loaded{m, fwd, tok};
}

void add_sampler_flags(CLI::App* app, SamplerParams& p, bool& seed_set) {
  app->add_option("--temperature,--temp", p.temperature, "sampling temperature; 0 = greedy")->capture_default_str();
  app->add_option("--top-k", p.top_k, "keep the k most likely tokens; 0 = off")->capture_default_str();
  app->add_option("--top-p", p.top_p, "nucleus sampling mass in (0, 1]; 1 = off")->capture_default_str();
  app->add_option("--min-p", p.min_p, "drop tokens below min-p x the top probability; 0 = off")->capture_default_str();
  app->add_option("--repeat-penalty", p.repeat_penalty, "penalise recent tokens; 1 = off")->capture_default_str();
  app->add_option("--repeat-last-n", p.repeat_last_n, "tokens the penalty looks back over")->capture_default_str();
  app->add_option_function<uint64_t>("--seed", [&p, &seed_set](uint64_t s) { p.seed = s; seed_set = true; },
                                     "random seed >= 0 (same seed, same text); default: random")
      ->check(CLI::Validator(
          [](std::string& v) { return v.find('-') == std::string::npos ? std::string() : "must be >= 0, got " + v; },
          "UINT64"));
}

void add_threads_flag(CLI::App* app, int& threads) {
  app->add_option("-t,--threads", threads, "CPU threads, 1..1024 (default: all cores)")
      ->check(CLI::Range(1, 1024));
}

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw Error(ErrorKind::Io, path + ": is a directory, not a text file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::NotFound, path + ": cannot open text file");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(ErrorKind::Io, path + ": read failed");
  return ss.str();
}

size_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<size_t>(ru.ru_maxrss) * 1024;
}

}  // namespace larql::cli
