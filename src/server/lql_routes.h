// LQL over HTTP in `larql serve` (docs/server.md "LQL over HTTP"): POST /v1/lql runs statements
// and answers each result as the JSON document `larql lql --json` prints (lql::render_json); the
// browse routes (/v1/describe, /v1/walk, /v1/select, /v1/relations, /v1/stats, /v1/infer) build
// one statement from their parameters and answer the same document. Sessions by X-Session-Id
// (server/lql_sessions.h); statements that name files are refused unless --lql-allow-files.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lql/session.h"
#include "server/http.h"
#include "server/lql_sessions.h"

namespace larql::server {

struct LqlOptions {
  /// The vindex directory the server was given; "" when it was given something LQL cannot open
  /// (a GGUF file, a Hugging Face directory): then every LQL route answers 400 lql_needs_vindex.
  std::string vindex;
  std::string model_path;            ///< what the server was given (named in that 400)
  size_t max_sessions = 16;          ///< --max-lql-sessions
  int session_ttl_s = 600;           ///< --lql-session-ttl
  /// --lql-allow-files: "" refuses every statement that reads or writes a file by path (USE,
  /// BEGIN / SAVE / APPLY PATCH, DIFF with a path, COMPILE, SHOW MODELS); else paths must lie
  /// inside this directory (relative ones are taken from it).
  std::string allow_files;
  std::shared_ptr<ThreadPool> pool;  ///< the compute pool (the scheduler's); nullptr: a new one
  /// Once set, running statements stop with Error{Cancelled} (503) at their next check (every
  /// layer, every gate scan): `larql serve` sets it when its drain ends. nullptr: never.
  const std::atomic<bool>* cancel = nullptr;
};

/// `"` + text with \\ \" \n \t \r escaped + `"`: an LQL string literal that lexes back to `text`
/// (docs/lql.md "Lexical"), whatever it holds (quotes, ';', `--`).
std::string lql_quote(std::string_view text);

/// A query string's parameters, percent-decoded ('+' is a blank). Errors: InvalidArgument for a
/// parameter given twice, a bad %-escape, a name outside `allowed` (naming it and the allowed).
std::map<std::string, std::string> parse_query(std::string_view query, const std::vector<std::string>& allowed);

/// The statement a browse route runs, from its parameters (docs/server.md's table), and in
/// *limit the rows to keep after it runs (-1: all; only /v1/describe's `limit`). Every parameter
/// is checked here, before the statement is built, so that the statement parses and a bad
/// parameter is named rather than a column of the built statement: text must be UTF-8 without
/// NUL, numbers in their bounds, `layers` a range with first <= last, and with num_layers >= 0
/// (the served vindex's layer count) every layer below num_layers.
/// Errors: InvalidArgument "param: why" for a missing or bad parameter (the name first, then ':').
std::string browse_statement(const std::string& path, const std::map<std::string, std::string>& params, int64_t* limit,
                             int64_t num_layers = -1);

class LqlApi {
 public:
  /// Opens the vindex (when set), its tokenizer and model, shared by every session.
  /// Errors: lql::Session::use's and the model's.
  explicit LqlApi(LqlOptions opt);
  ~LqlApi();

  /// Whether `path` is one of LQL's routes.
  static bool handles(const std::string& path);
  /// Answer a request to one of them; errors in OpenAI's envelope.
  void operator()(const Request& req, Responder& r);
  /// Prometheus text: LQL requests, statements, errors, live sessions, statement latency.
  std::string metrics() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace larql::server
