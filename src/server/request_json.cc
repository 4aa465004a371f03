#include "server/request_json.h"

#include <string>

#include "util/error.h"

namespace larql::server {

nlohmann::json parse_request_json(std::string_view body, int max_depth) {
  using json = nlohmann::json;
  // The nesting is measured by one pass over the bytes (strings skipped, escapes honoured) before
  // the parse: nlohmann's parser-with-callback, the other way to bound it, is quadratic in the
  // keys of an object (a body with one 50,000-key object took 33 s).
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        throw Error(ErrorKind::InvalidArgument,
                    "the request body nests arrays/objects deeper than " + std::to_string(max_depth) + " levels");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  try {
    return json::parse(body.begin(), body.end());
  } catch (const json::parse_error& e) {
    throw Error(ErrorKind::InvalidArgument, std::string("the request body is not valid JSON: ") + e.what());
  }
}

}  // namespace larql::server
