// The WebSocket endpoint of `larql serve`, `GET /v1/stream` (docs/server.md, "WebSocket"): one
// connection carries many calls, each a JSON text message with an `id`; each call is one of the
// HTTP routes, answered by the same route code, so the socket adds a transport, not a second API.
//
//   client → {"id": 1, "type": "generate", "prompt": "...", "max_tokens": 16}   (or "messages")
//   server → {"id": 1, "type": "chunk", "data": <the SSE chunk's JSON>}  ...  {"id": 1, "type": "done"}
//   client → {"id": 1, "type": "cancel"}      ends a running generate; its slot is freed at once
//   client → {"id": 2, "type": "describe", "entity": "France"}  → {"id": 2, "type": "result", "status": 200, "data": ...}
//
// Types: generate (chat when "messages" is present, else completion; always streamed), cancel,
// lql (POST /v1/lql), describe / walk / select / relations / stats / infer (GET /v1/<type>
// with the other fields as query parameters), embeddings (POST /v1/embeddings), and http
// ({"method", "path", "body"}: any route). A failed call answers {"id", "type": "error",
// "status", "data": <OpenAI error envelope>}.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/http.h"

namespace larql::server {

/// One client message, read.
struct WsCall {
  nlohmann::json id;      ///< echoed in every answer (a string, a number or null)
  bool cancel = false;    ///< {"type": "cancel"}: end the running call with this id
  Request request;        ///< the HTTP request the call stands for (when !cancel)
};

/// Reads one text message. `upgrade` is the HTTP request that opened the socket: its headers
/// (Authorization, X-Session-Id, ...) and client carry over to every call. Throws
/// Error{InvalidArgument} naming the field when the message is not a call (not JSON, no
/// "type", an unknown type, a field of the wrong kind).
WsCall parse_ws_call(std::string_view text, const Request& upgrade);

/// The frame for a whole response of a call (status < 400: "result", else "error"); a JSON body
/// is embedded as JSON, any other as a string.
std::string ws_result_frame(const nlohmann::json& id, int status, const std::string& content_type,
                            const std::string& body);
/// The frame for one server-sent event of a streamed call; "[DONE]" becomes {"type": "done"}.
std::string ws_event_frame(const nlohmann::json& id, std::string_view payload);

/// RFC 3986 percent-encoding of a query component (unreserved characters kept).
std::string url_encode(std::string_view s);

}  // namespace larql::server
