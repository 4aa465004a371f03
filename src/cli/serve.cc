// `larql serve MODEL`: the OpenAI-compatible HTTP server (docs/server.md).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/common.h"
#include "cli/serve_shard.h"
#include "server/http.h"
#include "server/lql_routes.h"
#include "server/routes.h"
#include "server/scheduler.h"
#include "server/static_files.h"
#include "util/error.h"

namespace larql::cli {
namespace {

struct ServeArgs {
  FfnArgs ffn;
  ShardServeArgs shard;
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
};

std::string trim_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

void serve(ServeArgs& a) {
  if (a.shard.grpc_port >= 0) {
    if (!a.ffn.ffn.empty()) throw Error(ErrorKind::Usage, "a shard runs its own FFN: --ffn and --grpc-port do not go together");
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
  // Signals go to one waiting thread, never to a thread in the middle of a decode step.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  Loaded l = load(a.model, a.threads, "serve", &a.ffn);
  const int64_t model_ctx = l.model->config().context_length;
  if (a.ctx_size > model_ctx)
    throw Error(ErrorKind::Usage, "--ctx-size must be at most this model's context, " + std::to_string(model_ctx));
  // Warm-up: one token through the model touches every weight page before the first client.
  {
    std::vector<float> x(static_cast<size_t>(l.model->config().hidden));
    auto eng = make_engine(spec, l.forward->sibling());
    const auto h = eng->prefill({l.tokenizer.bos_id() >= 0 ? l.tokenizer.bos_id() : 0});
    std::vector<float> logits(static_cast<size_t>(l.model->config().vocab));
    l.forward->logits(h.data(), 1, logits.data());
  }
  // Before the scheduler: its jobs hold leases on the store until they end.
  auto sessions = std::make_shared<server::SessionStore>(a.session_dir, a.session_max,
                                                         static_cast<uint64_t>(a.session_max_mb) << 20);
  // Set when the SIGTERM drain ends: LQL statements still running stop (503).
  std::atomic<bool> lql_cancel{false};
  server::SchedulerOptions so;
  so.max_batch = a.max_batch;
  so.max_queue = a.max_queue;
  so.context = a.ctx_size;
  server::Scheduler sched(l.forward, l.tokenizer, so);

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
    sched.stop(/*cancel_running=*/true);
  };
  ho.drain_timeout_s = a.drain_s;
  ho.tls_cert = a.tls_cert;
  ho.tls_key = a.tls_key;
  if (!a.no_ui) ho.public_path = server::is_console_path;  // the console's files; its API calls carry the key
  server::ApiOptions ao;
  // The id clients see: --alias, else the file's or directory's name without its extension
  // (llama.cpp's server names the model by its path too).
  ao.model_id = a.alias;
  if (ao.model_id.empty()) {
    std::filesystem::path p(l.model->path());
    if (!p.has_filename()) p = p.parent_path();
    ao.model_id = p.stem().string();
  }
  ao.default_engine = spec;
  ao.max_prompt_tokens = a.max_prompt_tokens;
  ao.max_tokens_limit = a.max_tokens;
  ao.request_timeout_s = a.timeout_s;
  ao.console = !a.no_ui;
  // LQL over HTTP: on a vindex (what `larql lql` opens); on anything else its routes answer 400.
  server::LqlOptions lo;
  {
    std::error_code ec;
    const std::string path = l.model->path();
    if (std::filesystem::is_directory(path, ec) && std::filesystem::exists(std::filesystem::path(path) / "index.json", ec))
      lo.vindex = path;
  }
  lo.model_path = l.model->path();
  lo.max_sessions = static_cast<size_t>(a.max_lql_sessions);
  lo.session_ttl_s = a.lql_session_ttl;
  lo.allow_files = a.lql_allow_files;
  lo.pool = l.forward->pool_ptr();
  lo.cancel = &lql_cancel;
  ao.lql = std::make_shared<server::LqlApi>(lo);
  ao.sessions = sessions;
  std::unique_ptr<server::HttpServer> http;
  std::unique_ptr<server::Api> api;
  http = std::make_unique<server::HttpServer>(ho, [&api](const server::Request& q, server::Responder& r) { (*api)(q, r); });
  ao.shards = l.handle->ffn_shards();
  api = std::make_unique<server::Api>(l.forward, l.tokenizer, sched, http.get(), ao);

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    std::fprintf(stderr, "larql serve: %s received, finishing in-flight requests (at most %d s)\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", a.drain_s);
    http->stop();
  });
  const bool loopback = a.host == "127.0.0.1" || a.host == "::1" || a.host == "localhost";
  std::fprintf(stderr, "larql serve: %s (%s engine, %d threads, %d slots)\n", ao.model_id.c_str(),
               spec.to_string().c_str(), l.forward->pool().size(), a.max_batch);
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
  sched.stop(/*cancel_running=*/true);
  pthread_kill(waiter.native_handle(), SIGTERM);  // a second signal ends the waiter if none came
  waiter.join();
  std::fprintf(stderr, "larql serve: stopped\n");
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Serve a model over HTTP: OpenAI-compatible completions and chat (docs/server.md)");
  cmd->add_option("model", a->model, kModelHelp)->required();
  cmd->add_option("--host", a->host, "address to listen on (default 127.0.0.1: this machine only)");
  add_int_flag(cmd, "--port", a->port, 0, 65535, "TCP port (0: any free one, printed at start; default 8080)");
  add_threads_flag(cmd, a->threads);
  add_ffn_flags(cmd, a->ffn);
  add_shard_serve_flags(cmd, a->shard);
  add_engine_flag(cmd, a->engine);
  // An empty key (`--api-key "$UNSET"`) would turn authentication off: refused, as an empty key file is.
  cmd->add_option("--api-key", a->api_key, "require this key (Authorization: Bearer KEY) on every route but /health")
      ->check(CLI::Validator(
          [](std::string& k) {
            return trim_line(k).empty() ? std::string("the API key is empty (an unset variable?); give a key or leave --api-key out")
                                        : std::string();
          },
          "KEY"));
  cmd->add_option("--api-key-file", a->api_key_file, "read the API key from this file's first line");
  cmd->add_option("--cors", a->cors, "allow browsers from this origin (repeatable; \"*\" for any). Default: none")
      ->delimiter(',');
  add_int_flag(cmd, "--max-body", a->max_body, 1024, int64_t{1} << 30, "largest request body in bytes (default 4 MiB)");
  add_int_flag(cmd, "-c,--ctx-size", a->ctx_size, 0, int64_t{1} << 30, "positions a sequence may use (0: the model's)");
  add_int_flag(cmd, "--max-prompt-tokens", a->max_prompt_tokens, 0, int64_t{1} << 30,
               "longest prompt accepted (0: the context less one)");
  add_int_flag(cmd, "--max-tokens", a->max_tokens, 0, int64_t{1} << 30, "largest max_tokens accepted (0: the context)");
  add_int_flag(cmd, "--slots", a->max_batch, 1, 1024, "sequences decoded together at most (default 16)");
  add_int_flag(cmd, "--queue", a->max_queue, 0, 100000, "requests waiting for a slot before 429 (default 64)");
  add_float_flag(cmd, "--rate-limit", a->rate_limit, FloatRange{0, 1e9}, "requests per minute per client (0: off)");
  cmd->add_flag("--trust-proxy", a->trust_proxy, "rate-limit by X-Forwarded-For's first address (behind a proxy)");
  add_int_flag(cmd, "--timeout", a->timeout_s, 1, 86400, "seconds a request may generate (default 600)");
  add_int_flag(cmd, "--drain", a->drain_s, 0, 3600, "seconds SIGTERM waits for in-flight requests (default 10)");
  add_int_flag(cmd, "--read-timeout", a->read_timeout_s, 1, 3600,
               "seconds a whole request may take to arrive; slower clients are dropped (default 30)");
  add_int_flag(cmd, "--ws-idle-timeout", a->ws_idle_s, 1, 86400,
               "seconds a /v1/stream WebSocket may wait for its next message (default 300)");
  add_int_flag(cmd, "--max-connections", a->max_connections, 1, 100000, "open connections at most (default 256)");
  cmd->add_option("--tls-cert", a->tls_cert, "serve HTTPS with this PEM certificate (chain); needs --tls-key");
  cmd->add_option("--tls-key", a->tls_key, "the PEM private key of --tls-cert");
  cmd->add_flag("--no-ui", a->no_ui, "do not serve the web console at / (docs/console.md)");
  add_int_flag(cmd, "--max-lql-sessions", a->max_lql_sessions, 1, 100000,
               "LQL sessions (X-Session-Id) live at most; the least recently used idle one makes room (default 16)");
  add_int_flag(cmd, "--lql-session-ttl", a->lql_session_ttl, 1, 86400 * 30,
               "seconds an idle LQL session lives (default 600)");
  cmd->add_option("--lql-allow-files", a->lql_allow_files,
                  "let LQL statements read and write files inside this directory (USE, patches, COMPILE, DIFF); "
                  "default: refused");
  cmd->add_option("--alias", a->alias, "the model id clients see (default: the model's name)");
  cmd->add_option("--session-dir", a->session_dir,
                  "keep saved sessions (\"session\" in a request) here (default: a temporary directory removed at exit)");
  add_int_flag(cmd, "--session-max", a->session_max, 1, 100000, "saved sessions kept at most (default 64; least recently used go)");
  add_int_flag(cmd, "--session-max-mb", a->session_max_mb, 1, int64_t{1} << 30,
               "MiB of saved session state kept at most (default 1024)");
  cmd->callback([a] { serve(*a); });
}

}  // namespace larql::cli
