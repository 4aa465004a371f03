#include "server/engine_routes.h"

#include <nlohmann/json.hpp>

#include "kv/engine.h"
#include "kv/registry.h"
#include "server/lql_routes.h"
#include "util/error.h"
#include "util/parse.h"

namespace larql::server {

using json = nlohmann::json;

EngineFootprint measure_engine(const Forward& runner, const std::string& spec_text, int64_t tokens) {
  const EngineSpec spec = parse_engine_spec(spec_text);
  const ModelConfig& c = runner.config();
  if (tokens < 1 || tokens >= c.context_length)
    throw Error(ErrorKind::InvalidArgument, "tokens: must be in [1, " + std::to_string(c.context_length - 1) + "], got " +
                                                std::to_string(tokens));
  auto fwd = runner.sibling();
  auto engine = make_engine(spec, fwd);
  // BOS, then ordinary ids cycling over a band well inside every vocabulary (the content does
  // not change how much state an engine keeps per token).
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  const int64_t band = std::max<int64_t>(1, std::min<int64_t>(c.vocab - 1000, 20000));
  for (int64_t i = 0; i < tokens; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(1000 + (i * 7919) % band);
  ids[0] = 2;  // <bos> in the Gemma and synthetic vocabularies; any id is a token to the engine
  engine->prefill(ids);
  const EngineMemory m = engine->memory();
  EngineFootprint f;
  f.spec = spec.to_string();
  f.tokens = tokens;
  f.hot_bytes = m.hot_bytes;
  f.cold_bytes = m.cold_bytes;
  f.window_tokens = m.window_tokens;
  f.bytes_per_token = static_cast<double>(m.hot_bytes + m.cold_bytes) / static_cast<double>(tokens);
  return f;
}

namespace {

const char* key_type(KeyType t) {
  switch (t) {
    case KeyType::Int: return "int";
    case KeyType::Float: return "float";
    case KeyType::String: return "string";
    case KeyType::Enum: return "enum";
  }
  return "?";
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

void EnginesApi::operator()(const Request& req, Responder& r) {
  auto fail = [&](int status, const std::string& msg, const std::string& param) {
    r.send(status, "application/json", error_json(msg, "invalid_request_error", param));
  };
  if (req.method != "GET") return fail(405, "use GET for /v1/engines", "");
  std::map<std::string, std::string> q;
  try {
    q = parse_query(req.query, {"spec", "tokens"});
  } catch (const Error& e) {
    return fail(400, e.what(), "");
  }
  if (!q.count("spec")) {
    if (q.count("tokens")) return fail(400, "'tokens' needs 'spec'", "tokens");
    json data = json::array();
    for (const EngineEntry& e : engine_registry()) {
      json keys = json::array();
      for (const EngineKey& k : e.keys)
        keys.push_back({{"name", k.name}, {"type", key_type(k.type)}, {"default", k.default_value},
                        {"description", k.description}, {"allowed", k.allowed}});
      data.push_back({{"id", e.name}, {"object", "engine"}, {"aliases", e.aliases}, {"description", e.description},
                      {"contract", e.contract}, {"keys", keys}, {"examples", e.examples}});
    }
    return r.send(200, "application/json", dump(json{{"object", "list"}, {"data", data}}));
  }
  int64_t tokens = 256;
  if (q.count("tokens")) {
    try {
      tokens = parse_int(q["tokens"], 1, runner_->config().context_length - 1, "tokens");
    } catch (const Error& e) {
      return fail(400, e.what(), "tokens");
    }
  }
  EngineFootprint f;
  try {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string key = parse_engine_spec(q["spec"]).to_string() + "@" + std::to_string(tokens);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      if (cache_.size() >= 256) cache_.clear();  // bounded: specs are client-chosen
      it = cache_.emplace(key, measure_engine(*runner_, q["spec"], tokens)).first;
    }
    f = it->second;
  } catch (const Error& e) {
    const std::string msg = e.what();
    return fail(400, msg, msg.rfind("tokens:", 0) == 0 ? "tokens" : "spec");
  }
  r.send(200, "application/json",
         dump(json{{"id", f.spec}, {"object", "engine.footprint"}, {"tokens", f.tokens}, {"hot_bytes", f.hot_bytes},
                   {"cold_bytes", f.cold_bytes}, {"window_tokens", f.window_tokens},
                   {"bytes_per_token", f.bytes_per_token}}));
}

}  // namespace larql::server
