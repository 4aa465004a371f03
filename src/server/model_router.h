// The routes of `larql serve DIR/` (docs/server.md "A directory of models"): /health, /v1/models
// (every model with a `loaded` flag), /metrics (the pool's; `?model=ID` that model's own) and the
// web console are answered here; every other request goes to the model it names — "model" in a
// JSON body, else `?model=` — through that model's own routes (server/routes.h), with "model"
// taken out where those routes take no such field (the LQL routes).
#pragma once

#include <chrono>
#include <string>

#include "server/http.h"
#include "server/model_pool.h"

namespace larql::server {

class ModelRouter {
 public:
  /// `console`: serve the web console at / (false: `--no-ui`, 404).
  ModelRouter(ModelPool& pool, bool console);
  void operator()(const Request& req, Responder& r);

  /// The model a request names ("" when none), and the request as the model's routes should see
  /// it. Errors: Error{InvalidArgument} for a body that is not JSON, or a "model" that is not a
  /// string.
  static std::string model_of(const Request& req, Request* forward);

 private:
  void models(Responder& r);
  ModelPool& pool_;
  bool console_;
  std::chrono::system_clock::time_point started_;
};

}  // namespace larql::server
