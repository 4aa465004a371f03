#include "server/model_router.h"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "server/error_status.h"
#include "server/lql_routes.h"
#include "server/request_json.h"
#include "server/static_files.h"
#include "util/error.h"

namespace larql::server {

using json = nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

/// Percent-decoding of a query component ('+' is a blank); a bad escape is kept as written (the
/// model's routes judge the rest of the query).
std::string decode(std::string_view s) {
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct Refusal {
  int status;
  std::string message, param, code;
};

}  // namespace

ModelRouter::ModelRouter(ModelPool& pool, bool console)
    : pool_(pool), console_(console), started_(std::chrono::system_clock::now()) {}

std::string ModelRouter::model_of(const Request& req, Request* forward) {
  *forward = req;
  std::string model;
  // ?model=ID, taken out of the query (the LQL routes refuse parameters they do not know).
  if (!req.query.empty()) {
    std::string rest;
    size_t at = 0;
    while (at <= req.query.size()) {
      const size_t end = std::min(req.query.find('&', at), req.query.size());
      const std::string_view part = std::string_view(req.query).substr(at, end - at);
      at = end + 1;
      const size_t eq = part.find('=');
      if (!part.empty() && decode(part.substr(0, eq)) == "model") {
        if (model.empty()) model = eq == std::string_view::npos ? "" : decode(part.substr(eq + 1));
        continue;
      }
      if (!part.empty()) rest += (rest.empty() ? "" : "&") + std::string(part);
    }
    forward->query = rest;
  }
  // "model" in a JSON body wins (what OpenAI's clients send).
  if (req.method == "POST" && !req.body.empty()) {
    json body = parse_request_json(req.body);  // InvalidArgument naming the place
    if (body.is_object() && body.contains("model")) {
      if (!body["model"].is_string()) throw Error(ErrorKind::InvalidArgument, "'model' must be a string (one of /v1/models' ids)");
      model = body["model"].get<std::string>();
      if (LqlApi::handles(req.path)) {
        body.erase("model");
        forward->body = dump(body);
      }
    }
  }
  return model;
}

void ModelRouter::models(Responder& r) {
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(started_.time_since_epoch()).count();
  json data = json::array();
  for (const auto& s : pool_.status())
    data.push_back({{"id", s.entry.id}, {"object", "model"}, {"created", created}, {"owned_by", "larql"},
                    {"format", s.entry.format}, {"bytes", s.entry.bytes}, {"loaded", s.loaded}});
  r.send(200, "application/json", dump(json{{"object", "list"}, {"data", data}}));
}

void ModelRouter::operator()(const Request& req, Responder& r) {
  try {
    if (req.path == "/health") {
      if (req.method != "GET") throw Refusal{405, "use GET for /health", "", ""};
      r.send(200, "application/json", dump(json{{"status", "ok"}}));
      return;
    }
    if (req.path == "/v1/models") {
      if (req.method != "GET") throw Refusal{405, "use GET for /v1/models", "", ""};
      models(r);
      return;
    }
    if (console_ && is_console_path(req.path)) {
      serve_console(req, r);
      return;
    }
    Request fwd;
    std::string id;
    try {
      id = model_of(req, &fwd);
    } catch (const Error& e) {
      throw Refusal{400, e.what(), "model", ""};
    }
    const auto ids = pool_.ids();
    std::string known;
    for (const auto& k : ids) known += (known.empty() ? "" : ", ") + k;
    if (req.path == "/metrics" && id.empty()) {
      if (req.method != "GET") throw Refusal{405, "use GET for /metrics", "", ""};
      r.send(200, "text/plain; version=0.0.4", pool_.metrics());
      return;
    }
    if (id.empty()) {
      if (ids.size() != 1)
        throw Refusal{400, "name the model: \"model\" in the request body, or ?model=ID (models: " + known + ")", "model", ""};
      id = ids.front();
    }
    std::optional<ModelPool::Lease> lease;
    try {
      lease.emplace(pool_.acquire(id));
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::NotFound && std::find(ids.begin(), ids.end(), id) == ids.end())
        throw Refusal{404, e.what(), "model", "model_not_found"};
      // The model is known but did not load (a damaged file): the server's fault, named.
      throw Refusal{e.kind() == ErrorKind::Cancelled ? 503 : 500, "model '" + id + "' could not be loaded: " + e.what(), "model", ""};
    }
    (*lease)->handle(fwd, r);
  } catch (const Refusal& e) {
    const char* type = e.status == 404 ? "not_found_error" : e.status >= 500 ? "server_error" : "invalid_request_error";
    r.send(e.status, "application/json", error_json(e.message, type, e.param, e.code));
  }
}

}  // namespace larql::server
