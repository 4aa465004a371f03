// Reading a request body as JSON, for every route that takes one (docs/server.md, "Limits").
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace larql::server {

/// Deepest nesting of arrays and objects a request body may have. No route needs more than a
/// few levels (a json_schema nests deeper, still far below this); the cap keeps hostile bodies
/// ("[[[[...") from costing a recursive walk of 10,000 levels anywhere downstream.
inline constexpr int kMaxJsonDepth = 64;

/// Parses `body` (RFC 8259 JSON, UTF-8) in time linear in its length. Throws
/// larql::Error{InvalidArgument} naming the position when the text is not JSON, and when
/// arrays/objects nest deeper than `max_depth`.
/// Invalid UTF-8 inside strings is a parse error (nlohmann-json checks it).
nlohmann::json parse_request_json(std::string_view body, int max_depth = kMaxJsonDepth);

}  // namespace larql::server
