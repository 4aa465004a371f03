// `larql serve MODEL`: the OpenAI-compatible HTTP server (docs/server.md).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "cli/serve_shard.h"
#include "model/hf_source.h"
#include "server/http.h"
#include "server/lql_routes.h"
#include "server/model_pool.h"
#include "server/model_router.h"
#include "server/routes.h"
#include "server/scheduler.h"
#include "server/static_files.h"
#include "util/error.h"

namespace larql::cli {
namespace {

struct ServeArgs {
  FfnArgs ffn;
  ShardServeArgs shard;
  std::string topology;  ///< `larql router --topology FILE`: stated parts to check
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  int threads = 0;
  std::string engine;
  std::string api_key, api_key_file;
  std::vector<std::string> cors;
  int64_t max_body = 4 << 20;
  int64_t ctx_size = 0;
  int64_t max_prompt_tokens = 0;
  int64_t max_tokens = 0;
  int max_batch = 16;
  int max_queue = 64;
  double rate_limit = 0;
  bool trust_proxy = false;
  int timeout_s = 600;
  int drain_s = 10;
  int max_connections = 256;
  int read_timeout_s = 30;
  int ws_idle_s = 300;
  std::string alias;
  std::string tls_cert, tls_key;
  bool no_ui = false;
  int max_lql_sessions = 16;
  int lql_session_ttl = 600;
  std::string lql_allow_files;
  std::string session_dir;
  int session_max = 64;
  int64_t session_max_mb = 1024;
  int64_t max_resident_mb = 0;
};

std::string trim_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

/// What serving one model takes: its scheduler, LQL routes and OpenAI routes over one loaded
/// model (server/model_pool.h Resident, so a directory's pool can load and unload it).
struct Stack : server::Resident {
  std::shared_ptr<api::LoadedModel> model;
  std::shared_ptr<Forward> forward;
  std::unique_ptr<server::Scheduler> sched;
  std::unique_ptr<server::Api> api;
  ~Stack() override {
    api.reset();
    if (sched) sched->stop(/*cancel_running=*/true);
  }
};

/// Everything one model's routes need, shared by every model of a directory.
struct Shared {
  const ServeArgs* args = nullptr;
  EngineSpec spec;
  std::shared_ptr<server::SessionStore> sessions;
  std::atomic<bool>* lql_cancel = nullptr;
  const server::HttpServer* http = nullptr;
};

/// The routes of `handle` under the id `model_id`, run by `forward` (load()'s: with --ffn remote
/// it carries the remote FFNs), after a warm-up token (which touches every weight page before the
/// first client).
std::unique_ptr<Stack> make_stack(std::shared_ptr<api::LoadedModel> handle, std::shared_ptr<Forward> forward,
                                  const std::string& model_id, const Shared& sh) {
  const ServeArgs& a = *sh.args;
  auto st = std::make_unique<Stack>();
  st->model = std::move(handle);
  const api::LoadedModel& m = *st->model;
  st->forward = std::move(forward);
  const int64_t model_ctx = m.config().context_length;
  if (a.ctx_size > model_ctx)
    throw Error(ErrorKind::Usage, "--ctx-size must be at most this model's context, " + std::to_string(model_ctx) + " (" + model_id + ")");
  {
    const Tokenizer& tok = m.tokenizer();
    auto eng = make_engine(sh.spec, st->forward->sibling());  // with the runner's FFNs (--ffn remote)
    const auto h = eng->prefill({tok.bos_id() >= 0 ? tok.bos_id() : 0});
    std::vector<float> logits(static_cast<size_t>(m.config().vocab));
    st->forward->logits(h.data(), 1, logits.data());
  }
  server::SchedulerOptions so;
  so.max_batch = a.max_batch;
  so.max_queue = a.max_queue;
  so.context = a.ctx_size;
  st->sched = std::make_unique<server::Scheduler>(st->forward, m.tokenizer(), so);
  server::ApiOptions ao;
  ao.model_id = model_id;
  ao.default_engine = sh.spec;
  ao.max_prompt_tokens = a.max_prompt_tokens;
  ao.max_tokens_limit = a.max_tokens;
  ao.request_timeout_s = a.timeout_s;
  ao.console = !a.no_ui;
  // LQL over HTTP: on a vindex (what `larql lql` opens); on anything else its routes answer 400.
  server::LqlOptions lo;
  {
    std::error_code ec;
    const std::string path = m.path();
    if (std::filesystem::is_directory(path, ec) && std::filesystem::exists(std::filesystem::path(path) / "index.json", ec))
      lo.vindex = path;
  }
  lo.model_path = m.path();
  lo.max_sessions = static_cast<size_t>(a.max_lql_sessions);
  lo.session_ttl_s = a.lql_session_ttl;
  lo.allow_files = a.lql_allow_files;
  lo.pool = m.pool();
  lo.cancel = sh.lql_cancel;
  ao.lql = std::make_shared<server::LqlApi>(lo);
  ao.sessions = sh.sessions;
  ao.shards = m.shards();
  st->api = std::make_unique<server::Api>(st->forward, m.tokenizer(), *st->sched, sh.http, ao);
  Stack* raw = st.get();
  st->handle = [raw](const server::Request& q, server::Responder& r) { (*raw->api)(q, r); };
  st->stop = [raw](bool cancel_running) { raw->sched->stop(cancel_running); };
  return st;
}

/// Whether MODEL is a directory of models (not itself a vindex or a Hugging Face directory).
bool is_model_directory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) && !std::filesystem::exists(std::filesystem::path(path) / "index.json", ec) &&
         !is_hf_model_dir(path);
}

/// `--topology FILE`: {"shards": ["HOST:PORT", {"address": "HOST:PORT", "layers": "A-B", "experts": "A-B"}, ...]}
/// -> "remote:HOST:PORT,..." after checking each stated part against what the shard says (Info).
std::string topology_shards(const std::string& path) {
  const std::string text = read_text_file(path, "the topology file", 1 << 20);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::InvalidArgument, path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("shards") || !j["shards"].is_array() || j["shards"].empty())
    throw Error(ErrorKind::InvalidArgument, path + ": expected {\"shards\": [\"HOST:PORT\" or {\"address\", \"layers\", \"experts\"}, ...]}");
  std::string list;
  for (size_t i = 0; i < j["shards"].size(); ++i) {
    const auto& e = j["shards"][i];
    const std::string at = path + ": shards[" + std::to_string(i) + "]";
    std::string addr;
    if (e.is_string()) {
      addr = e.get<std::string>();
    } else if (e.is_object() && e.contains("address") && e["address"].is_string()) {
      addr = e["address"].get<std::string>();
      for (const auto& [k, v] : e.items())
        if (k != "address" && k != "layers" && k != "experts")
          throw Error(ErrorKind::InvalidArgument, at + ": unknown key \"" + k + "\" (address, layers, experts)");
      for (const char* k : {"layers", "experts"})
        if (e.contains(k) && !e[k].is_string())
          throw Error(ErrorKind::InvalidArgument, at + "." + k + ": expected \"A-B\"");
    } else {
      throw Error(ErrorKind::InvalidArgument, at + ": expected \"HOST:PORT\" or {\"address\": ...}");
    }
    list += (list.empty() ? "" : ",") + addr;
  }
  return list;
}

/// Each topology entry's stated part against what its shard holds (after connect).
void check_topology(const std::string& path, const shard::ShardMap& map) {
  const std::string text = read_text_file(path, "the topology file", 1 << 20);
  const auto j = nlohmann::json::parse(text);
  for (const auto& e : j["shards"]) {
    if (!e.is_object()) continue;
    const std::string addr = e["address"].get<std::string>();
    const shard::ShardInfo* info = nullptr;
    for (const auto& parts : map)
      for (const auto& reps : parts)
        for (const auto& c : reps)
          if (c->info().address == addr) info = &c->info();
    if (info == nullptr) continue;
    auto check = [&](const char* key, int64_t b, int64_t end) {
      if (!e.contains(key)) return;
      const auto [want_b, want_e] = ModelPart::parse_range(e[key].get<std::string>(), path + ": " + addr + " " + key);
      if (want_b != b || want_e != end)
        throw Error(ErrorKind::InvalidArgument, path + ": shard " + addr + " should hold " + key + " " +
                                                    e[key].get<std::string>() + " but holds " + info->describe());
    };
    check("layers", info->layer_begin, info->layer_end);
    if (info->n_experts > 0)
      check("experts", info->expert_begin, info->expert_end);
    else if (e.contains("experts"))
      throw Error(ErrorKind::InvalidArgument, path + ": shard " + addr + " is given experts, but the model has none");
  }
}

void serve(ServeArgs& a) {
  if (a.shard.grpc_port >= 0) {
    if (!a.ffn.ffn.empty()) throw Error(ErrorKind::Usage, "a shard runs its own FFN: --ffn and --grpc-port do not go together");
    if (!a.ffn.pipeline.empty())
      throw Error(ErrorKind::Usage, "a shard runs its own layers: --pipeline and --grpc-port do not go together");
    // The HTTP server's security flags would silently not apply to the gRPC shard.
    const std::pair<bool, const char*> http_only[] = {
        {!a.api_key.empty() || !a.api_key_file.empty(), "--api-key (a shard authenticates clients by certificate: --grpc-client-ca)"},
        {!a.tls_cert.empty() || !a.tls_key.empty(), "--tls-cert/--tls-key (a shard's TLS is --grpc-cert/--grpc-key)"},
        {!a.cors.empty(), "--cors"},
        {!a.alias.empty(), "--alias"},
        {!a.session_dir.empty(), "--session-dir"},
        {!a.lql_allow_files.empty(), "--lql-allow-files"}};
    for (const auto& [given, flag] : http_only)
      if (given) throw Error(ErrorKind::Usage, std::string(flag) + " is a flag of the HTTP server; with --grpc-port it would not apply");
    if (is_model_directory(a.model))
      throw Error(ErrorKind::Usage, "a shard serves one model file or vindex, not a directory of models: give one of its models");
    return serve_shard(a.model, a.threads, a.shard);
  }
  if (!a.shard.layers.empty() || !a.shard.experts.empty())
    throw Error(ErrorKind::Usage, "--layers and --experts serve a part of the model to other processes: give --grpc-port too");
  const EngineSpec spec = parse_cli_engine_spec(a.engine);
  std::string key = a.api_key;
  if (!a.api_key_file.empty()) {
    if (!key.empty()) throw Error(ErrorKind::InvalidArgument, "give --api-key or --api-key-file, not both");
    key = trim_line(read_text_file(a.api_key_file, "the API key file", 4096));
    if (key.empty()) throw Error(ErrorKind::InvalidArgument, "the API key file " + a.api_key_file + " is empty");
  }
  const bool dir_mode = is_model_directory(a.model);
  if (dir_mode && !a.alias.empty())
    throw Error(ErrorKind::Usage, "--alias names the one model served; a directory's models go by their file names");
  if (dir_mode && (!a.ffn.ffn.empty() || !a.ffn.pipeline.empty()))
    throw Error(ErrorKind::Usage, std::string(a.ffn.ffn.empty() ? "--pipeline runs one model's layers" : "--ffn runs one model's FFN") +
                                      " on shards; serve that model alone, not a directory");
  if (!dir_mode && a.max_resident_mb > 0)
    throw Error(ErrorKind::Usage, "--max-resident-mb applies to a directory of models (larql serve DIR/)");
  // Signals go to one waiting thread, never to a thread in the middle of a decode step.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // Before the schedulers: their jobs hold leases on the store until they end.
  auto sessions = std::make_shared<server::SessionStore>(a.session_dir, a.session_max,
                                                         static_cast<uint64_t>(a.session_max_mb) << 20);
  // Set when the SIGTERM drain ends: LQL statements still running stop (503).
  std::atomic<bool> lql_cancel{false};
  Shared sh{&a, spec, sessions, &lql_cancel, nullptr};

  std::unique_ptr<Stack> single;
  std::unique_ptr<server::ModelPool> pool;
  std::string banner;
  if (dir_mode) {
    std::vector<std::string> skipped;
    auto entries = server::scan_model_dir(a.model, &skipped);
    for (const auto& s : skipped) std::fprintf(stderr, "larql serve: skipping %s\n", s.c_str());
    // One compute pool for every model: a request runs on one model at a time per thread.
    if (a.threads > 0 && std::thread::hardware_concurrency() > 0 && static_cast<unsigned>(a.threads) > std::thread::hardware_concurrency())
      std::fprintf(stderr, "warning: --threads %d is more than this machine's %u cores; it runs many times slower\n", a.threads,
                   std::thread::hardware_concurrency());
    auto compute = std::make_shared<ThreadPool>(a.threads);
    pool = std::make_unique<server::ModelPool>(
        entries, static_cast<uint64_t>(a.max_resident_mb) << 20, [&sh, compute](const server::ModelEntry& e) {
          std::fprintf(stderr, "larql serve: loading %s (%s, %.1f MiB)\n", e.id.c_str(), e.path.c_str(), e.bytes / 1048576.0);
          api::check_model_dir(e.path, "serve");
          auto handle = api::LoadedModel::wrap(Model::load(e.path), compute);
          return std::unique_ptr<server::Resident>(make_stack(handle, handle->forward(), e.id, sh));
        });
    banner = std::to_string(entries.size()) + " models in " + a.model + " (loaded on first request" +
             (a.max_resident_mb > 0 ? ", at most " + std::to_string(a.max_resident_mb) + " MiB resident" : std::string()) +
             ", " + std::to_string(compute->size()) + " threads)";
  }

  server::HttpOptions ho;
  ho.host = a.host;
  ho.port = a.port;
  ho.api_key = key;
  ho.cors_origins = a.cors;
  ho.max_body_bytes = static_cast<uint64_t>(a.max_body);
  ho.rate_limit_per_min = a.rate_limit;
  ho.trust_proxy = a.trust_proxy;
  ho.max_connections = a.max_connections;
  ho.read_timeout_s = a.read_timeout_s;
  ho.ws_idle_timeout_s = a.ws_idle_s;
  // When the drain ends: generations still running finish with "cancelled" (their streams get
  // the final chunk and [DONE]), LQL statements with 503, before the connections are cut.
  ho.on_drain_end = [&] {
    lql_cancel = true;
    if (single) single->sched->stop(/*cancel_running=*/true);
    if (pool) pool->stop_all(/*cancel_running=*/true);
  };
  ho.drain_timeout_s = a.drain_s;
  ho.tls_cert = a.tls_cert;
  ho.tls_key = a.tls_key;
  if (!a.no_ui) ho.public_path = server::is_console_path;  // the console's files; its API calls carry the key
  std::unique_ptr<server::ModelRouter> router;
  server::Handler route;
  if (dir_mode) {
    router = std::make_unique<server::ModelRouter>(*pool, !a.no_ui);
    route = [&router](const server::Request& q, server::Responder& r) { (*router)(q, r); };
  } else {
    route = [&single](const server::Request& q, server::Responder& r) { single->handle(q, r); };
  }
  auto http = std::make_unique<server::HttpServer>(ho, route);
  sh.http = http.get();
  if (!dir_mode) {
    Loaded l = load(a.model, a.threads, "serve", &a.ffn);
    if (!a.topology.empty()) check_topology(a.topology, l.handle->shards());
    // The id clients see: --alias, else the file's or directory's name without its extension
    // (llama.cpp's server names the model by its path too).
    std::string id = a.alias;
    if (id.empty()) {
      std::filesystem::path p(l.model->path());
      if (!p.has_filename()) p = p.parent_path();
      id = p.stem().string();
    }
    single = make_stack(l.handle, l.forward, id, sh);
    banner = id + " (" + spec.to_string() + " engine, " + std::to_string(l.handle->threads()) + " threads, " +
             std::to_string(a.max_batch) + " slots)";
  }

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    std::fprintf(stderr, "larql serve: %s received, finishing in-flight requests (at most %d s)\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", a.drain_s);
    http->stop();
  });
  const bool loopback = a.host == "127.0.0.1" || a.host == "::1" || a.host == "localhost";
  std::fprintf(stderr, "larql serve: %s\n", banner.c_str());
  if (!loopback && key.empty())
    std::fprintf(stderr, "warning: listening on %s without --api-key: anyone who can reach it can use it\n",
                 a.host.c_str());
  const std::string shown_host = a.host.find(':') != std::string::npos ? "[" + a.host + "]" : a.host;
  std::printf("listening on %s://%s:%d\n", http->tls() ? "https" : "http", shown_host.c_str(), http->port());
  if (!a.no_ui && server::console_built())
    std::fprintf(stderr, "larql serve: web console at %s://%s:%d/\n", http->tls() ? "https" : "http", shown_host.c_str(),
                 http->port());
  std::fflush(stdout);
  http->run();  // returns after stop() and the drain
  if (single) single->sched->stop(/*cancel_running=*/true);
  if (pool) pool->stop_all(/*cancel_running=*/true);
  pthread_kill(waiter.native_handle(), SIGTERM);  // a second signal ends the waiter if none came
  waiter.join();
  std::fprintf(stderr, "larql serve: stopped\n");
}

}  // namespace

/// The HTTP server's options, shared by `serve` and `router`.
static void add_http_options(CLI::App* cmd, ServeArgs& a) {
  cmd->add_option("--host", a.host, "address to listen on (default 127.0.0.1: this machine only)");
  add_int_flag(cmd, "--port", a.port, 0, 65535, "TCP port (0: any free one, printed at start; default 8080)");
  add_threads_flag(cmd, a.threads);
  add_engine_flag(cmd, a.engine);
  // An empty key (`--api-key "$UNSET"`) would turn authentication off: refused, as an empty key file is.
  cmd->add_option("--api-key", a.api_key, "require this key (Authorization: Bearer KEY) on every route but /health")
      ->check(CLI::Validator(
          [](std::string& k) {
            return trim_line(k).empty() ? std::string("the API key is empty (an unset variable?); give a key or leave --api-key out")
                                        : std::string();
          },
          "KEY"));
  cmd->add_option("--api-key-file", a.api_key_file, "read the API key from this file's first line");
  cmd->add_option("--cors", a.cors, "allow browsers from this origin (repeatable; \"*\" for any). Default: none")
      ->delimiter(',');
  add_int_flag(cmd, "--max-body", a.max_body, 1024, int64_t{1} << 30, "largest request body in bytes (default 4 MiB)");
  add_int_flag(cmd, "-c,--ctx-size", a.ctx_size, 0, int64_t{1} << 30, "positions a sequence may use (0: the model's)");
  add_int_flag(cmd, "--max-prompt-tokens", a.max_prompt_tokens, 0, int64_t{1} << 30,
               "longest prompt accepted (0: the context less one)");
  add_int_flag(cmd, "--max-tokens", a.max_tokens, 0, int64_t{1} << 30, "largest max_tokens accepted (0: the context)");
  add_int_flag(cmd, "--slots", a.max_batch, 1, 1024, "sequences decoded together at most (default 16)");
  add_int_flag(cmd, "--queue", a.max_queue, 0, 100000, "requests waiting for a slot before 429 (default 64)");
  add_float_flag(cmd, "--rate-limit", a.rate_limit, FloatRange{0, 1e9}, "requests per minute per client (0: off)");
  cmd->add_flag("--trust-proxy", a.trust_proxy, "rate-limit by X-Forwarded-For's first address (behind a proxy)");
  add_int_flag(cmd, "--timeout", a.timeout_s, 1, 86400, "seconds a request may generate (default 600)");
  add_int_flag(cmd, "--drain", a.drain_s, 0, 3600, "seconds SIGTERM waits for in-flight requests (default 10)");
  add_int_flag(cmd, "--read-timeout", a.read_timeout_s, 1, 3600,
               "seconds a whole request may take to arrive; slower clients are dropped (default 30)");
  add_int_flag(cmd, "--ws-idle-timeout", a.ws_idle_s, 1, 86400,
               "seconds a /v1/stream WebSocket may wait for its next message (default 300)");
  add_int_flag(cmd, "--max-connections", a.max_connections, 1, 100000, "open connections at most (default 256)");
  cmd->add_option("--tls-cert", a.tls_cert, "serve HTTPS with this PEM certificate (chain); needs --tls-key");
  cmd->add_option("--tls-key", a.tls_key, "the PEM private key of --tls-cert");
  cmd->add_flag("--no-ui", a.no_ui, "do not serve the web console at / (docs/console.md)");
  add_int_flag(cmd, "--max-lql-sessions", a.max_lql_sessions, 1, 100000,
               "LQL sessions (X-Session-Id) live at most; the least recently used idle one makes room (default 16)");
  add_int_flag(cmd, "--lql-session-ttl", a.lql_session_ttl, 1, 86400 * 30,
               "seconds an idle LQL session lives (default 600)");
  cmd->add_option("--lql-allow-files", a.lql_allow_files,
                  "let LQL statements read and write files inside this directory (USE, patches, COMPILE, DIFF); "
                  "default: refused");
  cmd->add_option("--alias", a.alias, "the model id clients see (default: the model's name)");
  cmd->add_option("--session-dir", a.session_dir,
                  "keep saved sessions (\"session\" in a request) here (default: a temporary directory removed at exit)");
  add_int_flag(cmd, "--session-max", a.session_max, 1, 100000, "saved sessions kept at most (default 64; least recently used go)");
  add_int_flag(cmd, "--session-max-mb", a.session_max_mb, 1, int64_t{1} << 30,
               "MiB of saved session state kept at most (default 1024)");
  add_int_flag(cmd, "--max-resident-mb", a.max_resident_mb, 0, int64_t{1} << 30,
               "serving a directory: MiB of models (their size on disk) loaded at once at most; the least recently used "
               "idle one is unloaded to make room (0: no limit)");
}

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Serve a model over HTTP: OpenAI-compatible completions and chat (docs/server.md)");
  cmd->add_option("model", a->model,
                  std::string(kModelHelp) + "; or a directory of them: every model in it, each loaded on its first request")
      ->required();
  add_ffn_flags(cmd, a->ffn);
  add_shard_serve_flags(cmd, a->shard);
  add_http_options(cmd, *a);
  cmd->callback([a] { serve(*a); });
}

void register_router(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto shards = std::make_shared<std::string>();
  auto topology = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "router",
      "Serve a model split over shards as one: the OpenAI routes here, each layer's FFN (or expert range) on the shard "
      "holding it, replicas tried in turn, /health naming a shard that is down (docs/sharding.md)");
  cmd->add_option("model", a->model, std::string(kModelHelp) + " (the file the shards serve; its FFN weights are not read here)")
      ->required();
  cmd->add_option("--shards", *shards, "the shards: HOST:PORT[,HOST:PORT...] (same part twice: replicas)");
  cmd->add_option("--topology", *topology,
                  "the shards from a JSON file: {\"shards\": [\"HOST:PORT\", {\"address\": \"HOST:PORT\", \"layers\": "
                  "\"A-B\", \"experts\": \"A-B\"}]} (stated parts are checked against the shards)")
      ->check(CLI::ExistingFile);
  auto pipeline = std::make_shared<bool>(false);
  cmd->add_flag("--pipeline", *pipeline,
                "the shards hold whole layers: run the layers on them stage after stage, the K/V kept there (only the "
                "embedding and lm_head here; only the standard engine)");
  add_shard_client_flags(cmd, a->ffn);
  add_http_options(cmd, *a);
  cmd->callback([a, shards, topology, pipeline] {
    if (shards->empty() == topology->empty()) throw Error(ErrorKind::Usage, "give the shards: --shards or --topology (one of them)");
    (*pipeline ? a->ffn.pipeline : a->ffn.ffn) = "remote:" + (shards->empty() ? topology_shards(*topology) : *shards);
    a->topology = *topology;
    serve(*a);
  });
}

}  // namespace larql::cli
