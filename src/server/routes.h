// The routes of `larql serve` (docs/server.md): OpenAI-compatible completions and chat (buffered
// and streamed), models, health and Prometheus metrics. Request fields are validated here; a field
// larql does not implement is refused with a 400 naming it, never silently ignored.
#pragma once

#include <atomic>
#include <chrono>
#include <iterator>
#include <memory>
#include <string>

#include "inference/forward.h"
#include "kv/registry.h"
#include "shard/shard.h"
#include "server/engine_routes.h"
#include "server/histogram.h"
#include "server/http.h"
#include "server/scheduler.h"
#include "server/sessions.h"
#include "tokenizer/tokenizer.h"

namespace larql::server {

class LqlApi;

struct ApiOptions {
  std::string model_id;            ///< what /v1/models lists and responses name
  EngineSpec default_engine;       ///< when a request names none
  int64_t max_prompt_tokens = 0;   ///< 0: the scheduler's context less one
  int64_t max_tokens_limit = 0;    ///< the largest max_tokens accepted (0: the context)
  int request_timeout_s = 600;     ///< a request's generation ends (finish_reason "timeout") after this
  bool console = true;             ///< serve the web console at / and /assets/ (false: `--no-ui`, 404)
  /// LQL over HTTP (server/lql_routes.h): /v1/lql and the browse routes; nullptr: none.
  std::shared_ptr<LqlApi> lql;
  std::shared_ptr<SessionStore> sessions;  ///< saved sessions ("session" in a request; /v1/sessions)
  /// The shards running the FFN (docs/sharding.md), one replica set per layer; empty: none. /health
  /// then asks each shard's health service and answers 503 when a layer range has none serving.
  shard::ShardMap shards;
};

class Api {
 public:
  Api(std::shared_ptr<Forward> runner, Tokenizer tok, Scheduler& sched, const HttpServer* http, ApiOptions opt);
  void operator()(const Request& req, Responder& r);

 private:
  void completions(const Request& req, Responder& r, bool chat);
  void embeddings(const Request& req, Responder& r);
  void metrics(Responder& r);
  void sessions(const Request& req, Responder& r);

  std::shared_ptr<Forward> runner_;
  EnginesApi engines_;  ///< GET /v1/engines (server/engine_routes.h)
  Tokenizer tok_;
  Scheduler& sched_;
  const HttpServer* http_;
  ApiOptions opt_;
  std::chrono::system_clock::time_point started_;
  std::atomic<uint64_t> requests_{0}, errors_{0};
  std::atomic<uint64_t> next_id_{1};
  /// Latency histograms for /metrics: time to first token and whole-request time (seconds).
  LatencyHistogram ttft_{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  LatencyHistogram duration_{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
};

}  // namespace larql::server
