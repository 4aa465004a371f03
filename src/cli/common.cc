#include "cli/common.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <random>
#include <thread>

#include "model/vindex_source.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace larql::cli {

std::vector<std::string> model_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("LARQL_MODELS"); env != nullptr && *env != '\0') dirs.emplace_back(env);
  dirs.emplace_back("models");
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back((exe.parent_path().parent_path() / "models").string());
  return dirs;
}

std::string resolve_model(const std::string& name) {
  if (fs::exists(name)) return name;
  const std::vector<std::string> dirs = model_dirs();
  std::error_code ec;
  for (const fs::path d : dirs) {
    for (const std::string& cand : {name, name + ".gguf"})
      if (fs::is_regular_file(d / cand, ec)) return (d / cand).string();
    for (const std::string& cand : {name, name + ".vindex"})
      if (fs::is_regular_file(d / cand / "index.json", ec)) return (d / cand).string();
  }
  std::set<std::string> names;
  for (const fs::path d : dirs) {
    if (!fs::is_directory(d, ec)) continue;
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.path().extension() == ".gguf" || (e.path().extension() == ".vindex" && fs::is_directory(e.path(), ec)))
        names.insert(e.path().stem().string());
  }
  std::string avail;
  for (const auto& n : names) avail += (avail.empty() ? "" : ", ") + n;
  throw Error(ErrorKind::NotFound, "model '" + name + "' not found: not a file, and not a name in models/" +
                                       (avail.empty() ? std::string(" (no models installed: run `make setup`)")
                                                      : " (available: " + avail + ")"));
}

Loaded load(const std::string& model, int threads, const std::string& verb, const FfnArgs* ffn) {
  const std::string path = resolve_model(model);
  const unsigned cores = std::thread::hardware_concurrency();
  if (threads > 0 && cores > 0 && static_cast<unsigned>(threads) > cores)
    std::fprintf(stderr, "warning: --threads %d is more than this machine's %u cores; it runs many times slower\n", threads,
                 cores);
  api::OpenOptions opt;
  opt.threads = threads;
  opt.verb = verb;
  if (ffn != nullptr && (!ffn->ffn.empty() || !ffn->pipeline.empty())) {
    opt.ffn = ffn->ffn;
    opt.pipeline = ffn->pipeline;
    opt.shard_tls = shard::ClientTls{ffn->ca, ffn->cert, ffn->key, ffn->server_name};
    opt.shard_timeout = std::chrono::milliseconds(ffn->timeout_ms);
  }
  if (ffn != nullptr) opt.device = ffn->device;
  auto handle = api::LoadedModel::open(path, opt);
  register_input(path, "the model");
  return Loaded{handle, handle->model_ptr(), handle->forward(), handle->tokenizer()};
}

std::string apply_model_chat_template(const Tokenizer& tok, const std::vector<ChatMessage>& messages) {
  const auto format = chat_format_of(tok);
  if (!format)
    throw Error(ErrorKind::Unsupported,
                std::string("this model's chat template (GGUF tokenizer.chat_template, or a Hugging Face "
                            "directory's tokenizer_config.json / chat_template.jinja) is ") +
                    (tok.chat_template().empty() ? "absent and its vocabulary has no turn markers"
                                                 : "not one larql recognises") +
                    "; larql applies the gemma, chatml, llama3, llama2, phi3 and mistral formats (use `larql run` without "
                    "--chat and write the turn markup yourself)");
  return apply_chat_template(*format, messages, /*add_generation_prompt=*/true, tok.chat_template());
}

namespace {

/// The name a message uses for a flag: its first long name ("--temperature" of
/// "--temperature,--temp"; "--n-predict" of "-n,--n-predict").
std::string flag_name(const std::string& names) {
  size_t at = 0;
  while (at < names.size()) {
    const size_t end = names.find(',', at);
    const std::string n = names.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (n.rfind("--", 0) == 0) return n;
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return names.substr(0, names.find(','));
}

std::string with_default(const std::string& help, const std::string& range, const std::string& def) {
  return help + " " + range + (def.empty() ? "" : " (default " + def + ")");
}

template <class T>
CLI::Option* int_flag(CLI::App* app, const std::string& names, T& out, int64_t lo, int64_t hi, const std::string& help) {
  const std::string flag = flag_name(names);
  auto* o = app->add_option_function<std::string>(
      names,
      [&out, lo, hi, flag](const std::string& v) {
        try {
          out = static_cast<T>(parse_int(v, lo, hi, flag));
        } catch (const Error& e) {
          throw CLI::ValidationError(e.what());
        }
      },
      // A default outside the range is a sentinel ("all cores", "the model's"): the help says it.
      with_default(help, int_range_text(lo, hi), out >= lo && out <= hi ? std::to_string(out) : std::string()));
  o->type_name("INT");
  return o;
}

template <class T>
CLI::Option* float_flag(CLI::App* app, const std::string& names, T& out, const FloatRange& r, const std::string& help) {
  const std::string flag = flag_name(names);
  char def[32];
  std::snprintf(def, sizeof def, "%g", static_cast<double>(out));
  auto* o = app->add_option_function<std::string>(
      names,
      [&out, r, flag](const std::string& v) {
        try {
          out = static_cast<T>(parse_float(v, r, flag));
        } catch (const Error& e) {
          throw CLI::ValidationError(e.what());
        }
      },
      with_default(help, r.to_string(), def));
  o->type_name("NUM");
  return o;
}

}  // namespace

CLI::Option* add_int_flag(CLI::App* app, const std::string& names, int64_t& out, int64_t lo, int64_t hi,
                          const std::string& help) {
  return int_flag(app, names, out, lo, hi, help);
}
CLI::Option* add_int_flag(CLI::App* app, const std::string& names, int& out, int64_t lo, int64_t hi,
                          const std::string& help) {
  return int_flag(app, names, out, lo, hi, help);
}
CLI::Option* add_float_flag(CLI::App* app, const std::string& names, double& out, const FloatRange& r,
                            const std::string& help) {
  return float_flag(app, names, out, r, help);
}
CLI::Option* add_float_flag(CLI::App* app, const std::string& names, float& out, const FloatRange& r,
                            const std::string& help) {
  return float_flag(app, names, out, r, help);
}

void add_sampler_flags(CLI::App* app, SamplerParams& p, bool& seed_set) {
  add_float_flag(app, "--temperature,--temp", p.temperature, {0, 1000}, "sampling temperature; 0 = greedy,");
  add_int_flag(app, "--top-k", p.top_k, 0, INT32_MAX, "keep the k most likely tokens; 0 = off,");
  add_float_flag(app, "--top-p", p.top_p, {0, 1, true, false}, "nucleus sampling mass; 1 = off,");
  add_float_flag(app, "--min-p", p.min_p, {0, 1}, "drop tokens below min-p x the top probability; 0 = off,");
  add_float_flag(app, "--repeat-penalty", p.repeat_penalty, {0, 1000, true, false}, "penalise recent tokens; 1 = off,");
  add_int_flag(app, "--repeat-last-n", p.repeat_last_n, 0, 1 << 20, "tokens the penalty looks back over,");
  app->add_option_function<std::string>(
         "--seed",
         [&p, &seed_set](const std::string& v) {
           try {
             p.seed = parse_uint64(v, "--seed");
           } catch (const Error& e) {
             throw CLI::ValidationError(e.what());
           }
           seed_set = true;
         },
         "random seed (same seed, same text) [0, 18,446,744,073,709,551,615] (default: random)")
      ->type_name("INT");
}

void add_ffn_flags(CLI::App* app, FfnArgs& a) {
  app->add_option("--device", a.device,
                  "where the forward pass runs: cpu, or cuda (a build configured with -DLARQL_CUDA=ON, an NVIDIA GPU; "
                  "only the standard engine; docs/backends.md)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->default_str("cpu");
  app->add_option("--ffn", a.ffn,
                  "run the FFN on shards: remote:HOST:PORT[,HOST:PORT...] (`larql serve MODEL --layers A-B "
                  "--grpc-port P` on the same model file; docs/sharding.md)");
  app->add_option("--pipeline", a.pipeline,
                  "run the layers on shards, stage after stage, the K/V kept there: remote:HOST:PORT[,HOST:PORT...] "
                  "(shards holding whole layers; only the standard engine; docs/sharding.md)");
  add_shard_client_flags(app, a);
}

void add_shard_client_flags(CLI::App* app, FfnArgs& a) {
  app->add_option("--shard-ca", a.ca, "PEM CA that signed the shards' certificates (TLS; default: plaintext)")
      ->check(CLI::ExistingFile);
  app->add_option("--shard-cert", a.cert, "PEM client certificate for shards that require one (mTLS)")
      ->check(CLI::ExistingFile);
  app->add_option("--shard-key", a.key, "PEM key of --shard-cert")->check(CLI::ExistingFile);
  app->add_option("--shard-tls-name", a.server_name, "the name the shards' certificates carry, when not the host dialled");
  add_int_flag(app, "--shard-timeout-ms", a.timeout_ms, 1, 3600000, "deadline of each shard call")->default_str("30000");
}

void add_threads_flag(CLI::App* app, int& threads) {
  add_int_flag(app, "-t,--threads", threads, 1, 1024,
               "CPU threads (more than the cores runs many times slower)")
      ->default_str("all cores");
}

void add_max_input_flag(CLI::App* app, uint64_t& max_bytes) {
  app->add_option_function<std::string>(
         "--max-input-mb",
         [&max_bytes](const std::string& v) {
           try {
             max_bytes = static_cast<uint64_t>(parse_int(v, 1, 1 << 20, "--max-input-mb")) << 20;
           } catch (const Error& e) {
             throw CLI::ValidationError(e.what());
           }
         },
         "largest text input (prompt file, document, corpus) read, MiB [1, 1,048,576] (default 64)")
      ->type_name("INT");
}

std::string read_text_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  return larql::read_text_file(path, what, max_bytes);
}

namespace {

EngineSpec with_env_defaults(EngineSpec spec) {
  auto from_env = [&](const char* engine, const char* key, const char* var) {
    const char* v = std::getenv(var);
    if (spec.name == engine && v != nullptr && *v != '\0' && !spec.params.count(key)) spec.params[key] = v;
  };
  from_env("boundary-kv", "archive_dir", "LARQL_ARCHIVE_DIR");
  from_env("boundary-per-layer", "record", "LARQL_BPL_RECORD");
  return spec;
}

}  // namespace

EngineSpec parse_cli_engine_spec(std::string_view text) { return with_env_defaults(parse_engine_spec(text)); }

std::vector<EngineSpec> parse_cli_engine_list(std::string_view text) {
  std::vector<EngineSpec> out = parse_engine_list(text);
  for (auto& s : out) s = with_env_defaults(std::move(s));
  return out;
}

std::string default_engine_spec() {
  const char* env = std::getenv("LARQL_ENGINE");
  return env != nullptr && *env != '\0' ? env : "standard";
}

void add_engine_flag(CLI::App* app, std::string& engine, bool list) {
  engine = default_engine_spec();
  if (list)
    app->add_option("--engines,--engine", engine,
                    "engine specs, split on ';' (default: $LARQL_ENGINE or standard; see `larql engines`)")
        ->capture_default_str();
  else
    app->add_option("--engine", engine, "KV engine spec (default: $LARQL_ENGINE or standard; see `larql engines`)")
        ->capture_default_str();
}

void resolve_seed(SamplerParams& p, bool seed_set) {
  if (!seed_set) p.seed = std::random_device{}();
}

void write_stdout(std::string_view s) {
  errno = 0;
  if ((!s.empty() && std::fwrite(s.data(), 1, s.size(), stdout) != s.size()) || std::fflush(stdout) != 0) {
    const int e = errno;
    std::clearerr(stdout);
    throw Error(ErrorKind::Io, std::string("writing to stdout failed: ") + (e ? std::strerror(e) : "unknown error"));
  }
}

size_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<size_t>(ru.ru_maxrss) * 1024;
}

}  // namespace larql::cli
