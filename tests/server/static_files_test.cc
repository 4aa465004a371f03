// The web console's embedded files (src/server/static_files.h) through the real HTTP layer:
// status, content type, ETag, 304, and the API key's exemption for these paths only. Expected
// values come from outside the server: the ETag is recomputed here from the served bytes with
// the vindex library's SHA-256; the script and style index.html names must be served; HTTP's own
// rules (304 has no body, If-None-Match lists and W/).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <regex>
#include <string>
#include <thread>

#include "server/http.h"
#include "testlib/raw_http.h"
#include "server/static_files.h"
#include "vindex/sha256.h"

namespace larql::server {
namespace {

struct Running {
  explicit Running(HttpOptions o) {
    o.port = 0;
    server = std::make_unique<HttpServer>(o, [](const Request& q, Responder& r) {
      if (is_console_path(q.path)) serve_console(q, r);
      else r.send(200, "text/plain", "api " + q.path);
    });
    thread = std::thread([this] { server->run(); });
  }
  ~Running() {
    server->stop();
    thread.join();
  }
  std::string exchange(const std::string& raw) const { return testing::raw_exchange(server->port(), raw); }
  std::string request(const std::string& method, const std::string& path, const std::string& headers = "") const {
    return exchange(method + " " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n" + headers +
                    "\r\n");
  }
  std::unique_ptr<HttpServer> server;
  std::thread thread;
};

std::string status_line(const std::string& res) { return res.substr(0, res.find("\r\n")); }
std::string body_of(const std::string& res) { return res.substr(res.find("\r\n\r\n") + 4); }
std::string header_of(const std::string& res, const std::string& name) {
  std::smatch m;
  const std::string head = res.substr(0, res.find("\r\n\r\n"));
  if (!std::regex_search(head, m, std::regex("\r\n" + name + ": ([^\r]*)", std::regex::icase))) return "";
  return m[1];
}

TEST(StaticFiles, Paths) {
  EXPECT_TRUE(is_console_path("/"));
  EXPECT_TRUE(is_console_path("/index.html"));
  EXPECT_TRUE(is_console_path("/assets/index-abc.js"));
  EXPECT_FALSE(is_console_path("/v1/models"));
  EXPECT_FALSE(is_console_path("/assets"));
  EXPECT_FALSE(is_console_path("/health"));
  EXPECT_EQ(console_file("/v1/models"), nullptr);
  EXPECT_EQ(console_file("/assets/../index.html"), nullptr);
}

TEST(StaticFiles, IndexAndItsAssetsAreServedWithEtags) {
  if (!console_built()) GTEST_SKIP() << "the console is not in this build (web/node_modules missing)";
  Running s(HttpOptions{});
  const std::string res = s.request("GET", "/");
  ASSERT_EQ(status_line(res), "HTTP/1.1 200 OK");
  EXPECT_EQ(header_of(res, "Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(header_of(res, "Cache-Control"), "no-cache");
  const std::string html = body_of(res);
  EXPECT_NE(html.find("<main id=\"app\">"), std::string::npos);  // web/index.html
  EXPECT_EQ(header_of(res, "ETag"), "\"" + vindex::sha256_hex(html.data(), html.size()).substr(0, 16) + "\"");
  // Every script and stylesheet index.html names is served, with its type and an immutable cache.
  std::regex ref("(src|href)=\"(/assets/[^\"]+)\"");
  int n = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), ref); it != std::sregex_iterator(); ++it, ++n) {
    const std::string path = (*it)[2];
    const std::string a = s.request("GET", path);
    EXPECT_EQ(status_line(a), "HTTP/1.1 200 OK") << path;
    const std::string type = header_of(a, "Content-Type");
    if (path.ends_with(".js")) {
      EXPECT_EQ(type, "text/javascript; charset=utf-8") << path;
    }
    if (path.ends_with(".css")) {
      EXPECT_EQ(type, "text/css; charset=utf-8") << path;
    }
    EXPECT_NE(header_of(a, "Cache-Control").find("immutable"), std::string::npos) << path;
    const std::string b = body_of(a);
    EXPECT_GT(b.size(), 100u) << path;
    EXPECT_EQ(header_of(a, "ETag"), "\"" + vindex::sha256_hex(b.data(), b.size()).substr(0, 16) + "\"") << path;
  }
  EXPECT_GE(n, 2);  // the module script and its stylesheet
}

TEST(StaticFiles, IfNoneMatchGives304) {
  if (!console_built()) GTEST_SKIP() << "the console is not in this build";
  Running s(HttpOptions{});
  const std::string etag = header_of(s.request("GET", "/"), "ETag");
  ASSERT_FALSE(etag.empty());
  for (const std::string& inm : {etag, "\"other\", " + etag, "W/" + etag, std::string("*")}) {
    const std::string res = s.request("GET", "/", "If-None-Match: " + inm + "\r\n");
    EXPECT_EQ(status_line(res), "HTTP/1.1 304 Not Modified") << inm;
    EXPECT_EQ(body_of(res), "") << inm;
  }
  EXPECT_EQ(status_line(s.request("GET", "/", "If-None-Match: \"other\"\r\n")), "HTTP/1.1 200 OK");
}

TEST(StaticFiles, UnknownFileAndMethod) {
  Running s(HttpOptions{});
  EXPECT_EQ(status_line(s.request("GET", "/assets/nope.js")), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(status_line(s.request("POST", "/")), "HTTP/1.1 405 Method Not Allowed");
}

TEST(StaticFiles, KeyNotNeededForTheConsoleOnly) {
  HttpOptions o;
  o.api_key = "sekrit";
  o.public_path = is_console_path;
  Running s(o);
  EXPECT_NE(status_line(s.request("GET", "/assets/nope.js")), "HTTP/1.1 401 Unauthorized");
  EXPECT_EQ(status_line(s.request("GET", "/v1/models")), "HTTP/1.1 401 Unauthorized");
  EXPECT_EQ(status_line(s.request("POST", "/")), "HTTP/1.1 401 Unauthorized");  // only GET / HEAD are public
  EXPECT_EQ(status_line(s.request("GET", "/v1/models", "Authorization: Bearer sekrit\r\n")), "HTTP/1.1 200 OK");
  HttpOptions closed;  // without public_path (--no-ui) the key guards every path
  closed.api_key = "sekrit";
  Running t(closed);
  EXPECT_EQ(status_line(t.request("GET", "/")), "HTTP/1.1 401 Unauthorized");
}

}  // namespace
}  // namespace larql::server
