#include "server/websocket.h"

#include <cctype>

#include "server/request_json.h"
#include "util/error.h"

namespace larql::server {

using json = nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

[[noreturn]] void refuse(const std::string& what) { throw Error(ErrorKind::InvalidArgument, what); }

}  // namespace

std::string url_encode(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

WsCall parse_ws_call(std::string_view text, const Request& upgrade) {
  json m = parse_request_json(text);
  if (!m.is_object()) refuse("a /v1/stream message must be a JSON object");
  WsCall call;
  if (m.contains("id")) {
    call.id = m["id"];
    if (!call.id.is_string() && !call.id.is_number_integer() && !call.id.is_number_unsigned() && !call.id.is_null())
      refuse("'id' must be a string or an integer");
  }
  if (!m.contains("type") || !m["type"].is_string()) refuse("a /v1/stream message needs a \"type\" (e.g. \"generate\")");
  const std::string type = m["type"].get<std::string>();
  m.erase("type");
  m.erase("id");
  Request& r = call.request;
  r.headers = upgrade.headers;
  r.client = upgrade.client;
  r.headers.erase("upgrade");
  r.headers.erase("connection");
  if (m.contains("session_id")) {  // the LQL session of this call (else the socket's X-Session-Id)
    if (!m["session_id"].is_string()) refuse("'session_id' must be a string");
    r.headers["x-session-id"] = m["session_id"].get<std::string>();
    m.erase("session_id");
  }
  if (type == "cancel") {
    call.cancel = true;
  } else if (type == "generate") {
    r.method = "POST";
    r.path = m.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
    m["stream"] = true;
    r.body = dump(m);
  } else if (type == "lql" || type == "embeddings") {
    r.method = "POST";
    r.path = "/v1/" + type;
    r.body = dump(m);
  } else if (type == "describe" || type == "walk" || type == "select" || type == "relations" || type == "stats" ||
             type == "infer") {
    r.method = "GET";
    r.path = "/v1/" + type;
    for (const auto& [k, v] : m.items()) {
      if (!v.is_string() && !v.is_number() && !v.is_boolean())
        refuse("'" + k + "' of a \"" + type + "\" message must be a string, a number or a boolean");
      if (!r.query.empty()) r.query += '&';
      r.query += url_encode(k) + "=" + url_encode(v.is_string() ? v.get<std::string>() : dump(v));
    }
  } else if (type == "http") {
    if (!m.contains("method") || !m["method"].is_string() || !m.contains("path") || !m["path"].is_string())
      refuse("an \"http\" message needs \"method\" and \"path\" strings");
    r.method = m["method"].get<std::string>();
    std::string target = m["path"].get<std::string>();
    if (target.empty() || target[0] != '/') refuse("'path' must start with /");
    const size_t q = target.find('?');
    r.path = target.substr(0, q);
    if (q != std::string::npos) r.query = target.substr(q + 1);
    if (r.path == "/v1/stream") refuse("'path' cannot be /v1/stream itself");
    if (m.contains("body")) r.body = m["body"].is_string() ? m["body"].get<std::string>() : dump(m["body"]);
  } else {
    refuse("unknown message type \"" + type +
           "\" (generate, cancel, lql, describe, walk, select, relations, stats, infer, embeddings, http)");
  }
  return call;
}

std::string ws_result_frame(const json& id, int status, const std::string& content_type, const std::string& body) {
  json f = {{"id", id}, {"type", status < 400 ? "result" : "error"}, {"status", status}};
  if (content_type.rfind("application/json", 0) == 0) {
    json data = json::parse(body, nullptr, /*allow_exceptions=*/false);
    f["data"] = data.is_discarded() ? json(body) : data;
  } else {
    f["data"] = body;
  }
  return dump(f);
}

std::string ws_event_frame(const json& id, std::string_view payload) {
  if (payload == "[DONE]") return dump(json{{"id", id}, {"type", "done"}});
  json data = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  return dump(json{{"id", id}, {"type", "chunk"}, {"data", data.is_discarded() ? json(std::string(payload)) : data}});
}

}  // namespace larql::server
