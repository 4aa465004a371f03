#include "server/request_json.h"

#include <string>

#include "util/error.h"

namespace larql::server {

namespace {
struct TooDeep {};
}  // namespace

nlohmann::json parse_request_json(std::string_view body, int max_depth) {
  using json = nlohmann::json;
  // The callback sees each value's depth as the parser (iterative, no recursion) reaches it; the
  // first array or object past max_depth ends the parse.
  const json::parser_callback_t limit = [max_depth](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_depth)
      throw TooDeep{};
    return true;
  };
  try {
    return json::parse(body.begin(), body.end(), limit);
  } catch (const TooDeep&) {
    throw Error(ErrorKind::InvalidArgument,
                "the request body nests arrays/objects deeper than " + std::to_string(max_depth) + " levels");
  } catch (const json::parse_error& e) {
    throw Error(ErrorKind::InvalidArgument, std::string("the request body is not valid JSON: ") + e.what());
  }
}

}  // namespace larql::server
