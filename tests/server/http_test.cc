// The HTTP layer over loopback with raw sockets: the checks every route shares (API key, body
// limit, malformed requests, rate limit, CORS) and streaming. Expected values are HTTP's own
// (status lines, chunked framing), written out by hand here.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "server/http.h"
#include "testlib/raw_http.h"

namespace larql::server {
namespace {

struct Running {
  explicit Running(HttpOptions o, Handler h = nullptr) {
    o.port = 0;
    if (!h)
      h = [](const Request& q, Responder& r) {
        if (q.path == "/stream") {
          r.start_stream();
          r.event("one");
          r.event("two");
          return;
        }
        r.send(200, "text/plain", q.method + " " + q.path + " " + q.body);
      };
    server = std::make_unique<HttpServer>(o, h);
    thread = std::thread([this] { server->run(); });
  }
  ~Running() {
    server->stop();
    thread.join();
  }
  std::string exchange(const std::string& raw) const { return testing::raw_exchange(server->port(), raw); }
  std::string get(const std::string& path, const std::string& headers = "") const {
    return exchange("GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + headers + "\r\n");
  }
  std::unique_ptr<HttpServer> server;
  std::thread thread;
};

bool starts(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

TEST(Http, KeyComparison) {
  EXPECT_TRUE(key_matches("abc", "abc"));
  EXPECT_FALSE(key_matches("abd", "abc"));
  EXPECT_FALSE(key_matches("ab", "abc"));
  EXPECT_FALSE(key_matches("", "abc"));
}

TEST(Http, ErrorEnvelope) {
  EXPECT_EQ(error_json("bad", "invalid_request_error", "temperature"),
            R"({"error":{"code":null,"message":"bad","param":"temperature","type":"invalid_request_error"}})");
}

TEST(Http, RoutesGetRequestsAndKeepAlive) {
  Running s({});
  EXPECT_TRUE(starts(s.get("/a?x=1"), "HTTP/1.1 200 OK")) << s.get("/a");
  EXPECT_NE(s.get("/a?x=1").find("GET /a "), std::string::npos);
  // Two requests on one connection: both answered.
  const std::string two = s.exchange(
      "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhiGET /q HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(two.find("POST /p hi"), std::string::npos) << two;
  EXPECT_NE(two.find("GET /q"), std::string::npos) << two;
}

TEST(Http, MalformedAndOversizedRequests) {
  HttpOptions o;
  o.max_body_bytes = 1000;
  Running s(o);
  EXPECT_TRUE(starts(s.exchange("NOT HTTP AT ALL\r\n\r\n"), "HTTP/1.1 400")) << s.exchange("NOT HTTP AT ALL\r\n\r\n");
  const std::string big = "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + std::string(5000, 'a');
  const std::string r = s.exchange(big);
  EXPECT_TRUE(starts(r, "HTTP/1.1 413")) << r;
  EXPECT_NE(r.find("larger than 1000 bytes"), std::string::npos);
}

TEST(Http, ApiKeyOnEveryRouteButHealth) {
  HttpOptions o;
  o.api_key = "k3y";
  Running s(o);
  EXPECT_TRUE(starts(s.get("/v1/models"), "HTTP/1.1 401"));
  EXPECT_TRUE(starts(s.get("/v1/models", "Authorization: Bearer nope\r\n"), "HTTP/1.1 401"));
  EXPECT_TRUE(starts(s.get("/v1/models", "Authorization: Bearer k3y\r\n"), "HTTP/1.1 200"));
  EXPECT_TRUE(starts(s.get("/v1/models", "X-Api-Key: k3y\r\n"), "HTTP/1.1 200"));
  EXPECT_TRUE(starts(s.get("/health"), "HTTP/1.1 200"));
}

TEST(Http, RateLimitPerClient) {
  HttpOptions o;
  o.rate_limit_per_min = 12;  // burst of 2
  o.trust_proxy = true;
  Running s(o);
  EXPECT_TRUE(starts(s.get("/a", "X-Forwarded-For: 10.0.0.1\r\n"), "HTTP/1.1 200"));
  EXPECT_TRUE(starts(s.get("/a", "X-Forwarded-For: 10.0.0.1\r\n"), "HTTP/1.1 200"));
  const std::string third = s.get("/a", "X-Forwarded-For: 10.0.0.1, 1.2.3.4\r\n");
  EXPECT_TRUE(starts(third, "HTTP/1.1 429")) << third;
  EXPECT_NE(third.find("Retry-After"), std::string::npos);
  EXPECT_TRUE(starts(s.get("/a", "X-Forwarded-For: 10.0.0.2\r\n"), "HTTP/1.1 200"));  // another client
}

TEST(Http, CorsOffByDefaultAndPerOrigin) {
  Running off({});
  EXPECT_EQ(off.get("/a", "Origin: http://evil\r\n").find("Access-Control"), std::string::npos);
  HttpOptions o;
  o.cors_origins = {"http://ok"};
  Running on(o);
  EXPECT_NE(on.get("/a", "Origin: http://ok\r\n").find("Access-Control-Allow-Origin: http://ok"), std::string::npos);
  EXPECT_EQ(on.get("/a", "Origin: http://evil\r\n").find("Access-Control"), std::string::npos);
  const std::string pre = on.exchange("OPTIONS /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: http://ok\r\nConnection: close\r\n\r\n");
  EXPECT_TRUE(starts(pre, "HTTP/1.1 204")) << pre;
}

TEST(Http, ServerSentEventsAreChunked) {
  Running s({});
  const std::string r = s.get("/stream");
  EXPECT_TRUE(starts(r, "HTTP/1.1 200")) << r;
  EXPECT_NE(r.find("Content-Type: text/event-stream"), std::string::npos);
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos);
  // Each event is one chunk: hex length, CRLF, "data: one\n\n", CRLF; then the last chunk.
  EXPECT_NE(r.find("b\r\ndata: one\n\n\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("b\r\ndata: two\n\n\r\n0\r\n\r\n"), std::string::npos) << r;
}

TEST(Http, BindErrorsNameTheAddress) {
  HttpOptions o;
  o.host = "192.0.2.1";  // TEST-NET-1 (RFC 5737): on no machine, so bind fails
  try {
    HttpServer h(o, nullptr);
    ADD_FAILURE() << "bound to a bad host";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("192.0.2.1"), std::string::npos);
  }
}

}  // namespace
}  // namespace larql::server
