// /v1/stream's message mapping (server/websocket.h): each message type becomes the HTTP request
// the docs say; RFC 3986 percent-encoding by hand-derived cases; bad messages name the field.
#include "server/websocket.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/request_json.h"
#include "server/ws_read_layer.h"
#include "util/error.h"

namespace larql::server {
namespace {

using json = nlohmann::json;

Request upgrade() {
  Request r;
  r.method = "GET";
  r.path = "/v1/stream";
  r.headers = {{"authorization", "Bearer k"}, {"upgrade", "websocket"}, {"x-session-id", "s1"}};
  r.client = "10.0.0.1";
  return r;
}

TEST(WebSocket, GenerateIsAStreamedCompletionOrChat) {
  WsCall c = parse_ws_call(R"({"id": 4, "type": "generate", "prompt": "hi", "max_tokens": 3})", upgrade());
  EXPECT_EQ(c.id, json(4));
  EXPECT_FALSE(c.cancel);
  EXPECT_EQ(c.request.method, "POST");
  EXPECT_EQ(c.request.path, "/v1/completions");
  EXPECT_EQ(json::parse(c.request.body), json::parse(R"({"prompt": "hi", "max_tokens": 3, "stream": true})"));
  EXPECT_EQ(c.request.header("authorization"), "Bearer k");  // the socket's headers carry over
  EXPECT_EQ(c.request.header("upgrade"), "");
  EXPECT_EQ(c.request.client, "10.0.0.1");
  c = parse_ws_call(R"({"id": "a", "type": "generate", "messages": [], "stream": false})", upgrade());
  EXPECT_EQ(c.request.path, "/v1/chat/completions");
  EXPECT_EQ(json::parse(c.request.body)["stream"], true);
}

TEST(WebSocket, BrowseTypesBecomeGetsWithEncodedQueries) {
  WsCall c = parse_ws_call(R"({"id": 1, "type": "describe", "entity": "São Paulo & co", "layer": 9})", upgrade());
  EXPECT_EQ(c.request.method, "GET");
  EXPECT_EQ(c.request.path, "/v1/describe");
  EXPECT_EQ(c.request.query, "entity=S%C3%A3o%20Paulo%20%26%20co&layer=9");  // nlohmann orders keys
  c = parse_ws_call(R"({"type": "lql", "query": "STATS;", "session_id": "other"})", upgrade());
  EXPECT_EQ(c.request.path, "/v1/lql");
  EXPECT_EQ(c.request.header("x-session-id"), "other");
  EXPECT_EQ(json::parse(c.request.body), json::parse(R"({"query": "STATS;"})"));
  EXPECT_TRUE(c.id.is_null());
  c = parse_ws_call(R"({"id": 2, "type": "http", "method": "GET", "path": "/v1/walk?prompt=x&top=3"})", upgrade());
  EXPECT_EQ(c.request.path, "/v1/walk");
  EXPECT_EQ(c.request.query, "prompt=x&top=3");
  EXPECT_TRUE(parse_ws_call(R"({"id": 2, "type": "cancel"})", upgrade()).cancel);
}

TEST(WebSocket, BadMessagesNameWhatIsWrong) {
  auto refused = [](const std::string& text, const std::string& needle) {
    try {
      parse_ws_call(text, upgrade());
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused("[1]", "JSON object");
  refused("{", "not valid JSON");
  refused(R"({"id": 1})", "\"type\"");
  refused(R"({"id": 1, "type": "teleport"})", "unknown message type");
  refused(R"({"id": [1], "type": "stats"})", "'id'");
  refused(R"({"type": "describe", "entity": {"a": 1}})", "'entity'");
  refused(R"({"type": "http", "method": "GET"})", "\"path\"");
  refused(R"({"type": "http", "method": "GET", "path": "/v1/stream"})", "/v1/stream");
  refused(R"({"type": "lql", "session_id": 5})", "session_id");
}

TEST(WebSocket, FramesEmbedJsonAndEndStreams) {
  EXPECT_EQ(json::parse(ws_event_frame(3, "[DONE]")), json::parse(R"({"id": 3, "type": "done"})"));
  EXPECT_EQ(json::parse(ws_event_frame("x", R"({"a": 1})")), json::parse(R"({"id": "x", "type": "chunk", "data": {"a": 1}})"));
  EXPECT_EQ(json::parse(ws_result_frame(1, 404, "application/json", R"({"error": {}})")),
            json::parse(R"({"id": 1, "type": "error", "status": 404, "data": {"error": {}}})"));
  EXPECT_EQ(json::parse(ws_result_frame(1, 200, "text/plain", "ok")),
            json::parse(R"({"id": 1, "type": "result", "status": 200, "data": "ok"})"));
}

TEST(WebSocket, UrlEncodeKeepsOnlyUnreserved) {
  EXPECT_EQ(url_encode("aZ09-_.~"), "aZ09-_.~");
  EXPECT_EQ(url_encode("a b/c?d=e"), "a%20b%2Fc%3Fd%3De");
  EXPECT_EQ(url_encode("\xff"), "%FF");
}

TEST(RequestJson, DepthIsCapped) {
  EXPECT_NO_THROW(parse_request_json(std::string(63, '[') + std::string(63, ']')));
  EXPECT_THROW(parse_request_json(std::string(65, '[') + std::string(65, ']')), Error);
  EXPECT_THROW(parse_request_json(std::string(10000, '[') + std::string(10000, ']')), Error);
  EXPECT_THROW(parse_request_json("{\"a\": \"\xff\"}"), Error);  // invalid UTF-8
}

// RFC 6455 §5.7's examples: a masked "Hello" is 2 + 4 + 5 bytes; 256 bytes take a 16-bit
// length, 64 KiB a 64-bit one. Too few bytes to say: 0.
TEST(WebSocket, FrameLengthFromItsHeader) {
  const unsigned char hello[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
  EXPECT_EQ(ws_frame_length(hello, sizeof hello), 11u);
  EXPECT_EQ(ws_frame_length(hello, 5), 0u);  // the masking key not all here yet
  EXPECT_EQ(ws_frame_length(hello, 1), 0u);
  const unsigned char b256[] = {0x82, 0x7e, 0x01, 0x00};
  EXPECT_EQ(ws_frame_length(b256, sizeof b256), 4u + 256u);
  const unsigned char b64k[] = {0x82, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0};
  EXPECT_EQ(ws_frame_length(b64k, sizeof b64k), 10u + 65536u);
  const unsigned char huge[] = {0x82, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4};
  EXPECT_EQ(ws_frame_length(huge, sizeof huge), UINT64_MAX);
}

}  // namespace
}  // namespace larql::server
