// The HTTP/1.1 side of `larql serve` (docs/server.md): Boost.Beast over blocking sockets, one
// thread per connection (bounded), keep-alive, chunked responses for server-sent events, and the
// checks every route shares — API key (constant time), body size, per-client rate limit, CORS.
// Routes themselves live in server/routes.h.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <string_view>
#include <memory>
#include <vector>

namespace boost::asio::ssl {
class context;
}

namespace larql::server {

struct HttpOptions {
  std::string host = "127.0.0.1";  ///< loopback unless told otherwise
  int port = 8080;                 ///< 0: any free port (port() says which)
  std::string api_key;             ///< "": no key; else every route but /health wants it
  /// Allowed CORS origins; empty: no CORS headers (browsers refuse cross-origin calls); "*": any.
  std::vector<std::string> cors_origins;
  uint64_t max_body_bytes = 4u << 20;  ///< larger request bodies get 413
  double rate_limit_per_min = 0;       ///< requests per minute per client (0: off)
  bool trust_proxy = false;            ///< key the rate limit on X-Forwarded-For's first address
  int max_connections = 256;           ///< more are answered 503 and closed
  int read_timeout_s = 30;             ///< a request's headers and body must arrive within this
  int drain_timeout_s = 10;            ///< SIGTERM: how long in-flight requests may finish
  int ws_idle_timeout_s = 300;         ///< a /v1/stream socket with no message for this long is closed
  /// Called once when the drain wait ends (after SIGTERM's drain_timeout_s, or as soon as nothing
  /// is open), before the connections still open are cut: cancel running work there so its
  /// requests can still answer ("cancelled"); they get up to 2 s more.
  std::function<void()> on_drain_end;
  std::string tls_cert, tls_key;       ///< PEM files; both set: HTTPS only (TLS 1.2+)
  /// Paths that GET / HEAD may fetch without the API key (the web console's static files); unset: none.
  std::function<bool(std::string_view path)> public_path;
};

/// One request as the routes see it.
struct Request {
  std::string method;                         ///< "GET", "POST", ...
  std::string path;                           ///< target without the query string
  std::string query;                          ///< after '?', "" when none
  std::map<std::string, std::string> headers;  ///< names lower-cased
  std::string body;
  std::string client;                         ///< the peer address (or X-Forwarded-For's, trusted)
  std::string header(const std::string& lower_name) const;
};

/// How a route answers: one whole response, or a stream of server-sent events. Implemented over
/// the connection's socket; used by one thread.
class Responder {
 public:
  virtual ~Responder() = default;
  /// A whole response. extra: headers to add.
  virtual void send(int status, const std::string& content_type, const std::string& body,
                    const std::map<std::string, std::string>& extra = {}) = 0;
  /// Start a `text/event-stream` response (chunked). Then events, then end_stream().
  virtual void start_stream() = 0;
  /// Write `data: <payload>\n\n`. false when the client has gone.
  virtual bool event(std::string_view payload) = 0;
  virtual void end_stream() = 0;
  /// Wait until `notify_fd` is readable, the client goes away, or `timeout` passes. Returns false
  /// when the client has gone (closed or reset its connection).
  virtual bool wait(int notify_fd, std::chrono::milliseconds timeout) = 0;
};

using Handler = std::function<void(const Request&, Responder&)>;

class HttpServer {
 public:
  /// Binds at once (so errors — address in use, bad host — come from here as Error{Io} /
  /// Error{InvalidArgument}). `handler` gets every request that passed the shared checks.
  HttpServer(HttpOptions opt, Handler handler);
  ~HttpServer();
  /// The bound port.
  int port() const { return port_; }
  /// Accept and serve until stop(); then wait (up to drain_timeout_s) for open requests, shut
  /// down the connections still open, and return once every connection thread has ended.
  void run();
  /// Stop accepting (safe from any thread).
  void stop() { stopping_ = true; }
  bool stopping() const { return stopping_.load(); }
  bool tls() const { return tls_ != nullptr; }
  /// Connections open now.
  int64_t connections() const { return connections_.load(); }

 private:
  void serve_connection(int fd, std::string peer);
  template <class Stream>
  void serve_stream(Stream& s, int fd, const std::string& peer);
  /// The /v1/stream WebSocket on an upgraded connection (src/server/websocket.h).
  /// `already_read`: bytes the HTTP parser read past the upgrade request.
  template <class Stream, class Upgrade>
  void serve_websocket(Stream& s, int fd, const Upgrade& upgrade, const Request& req, std::string already_read);
  bool rate_ok(const std::string& client);
  /// Cut `fd` (shutdown) if it is still open at `deadline` — how blocking reads that asio will not
  /// time out (a WebSocket frame) are bounded; run()'s loop checks every 100 ms. `idle`: the
  /// connection waits between messages, so a drain may cut it at once. unwatch: no deadline.
  void watch(int fd, std::chrono::steady_clock::time_point deadline, bool idle);
  void unwatch(int fd) { watch(fd, std::chrono::steady_clock::time_point::max(), false); }

  HttpOptions opt_;
  Handler handler_;
  std::shared_ptr<boost::asio::ssl::context> tls_;  ///< set when serving HTTPS
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> connections_{0};
  std::mutex fds_mu_;
  struct Watch {
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    bool idle = false;
  };
  std::map<int, Watch> fds_;  ///< open connections' sockets (shut down when the drain ends)
  std::mutex rate_mu_;
  struct Bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point last;
  };
  std::map<std::string, Bucket> buckets_;
};

/// Constant-time comparison of an offered key with the expected one (SHA-256 of both, compared
/// with CRYPTO_memcmp: neither the content nor the length leaks through timing).
bool key_matches(std::string_view offered, std::string_view expected);

/// `{"error": {"message", "type", "param", "code"}}` (OpenAI's envelope).
std::string error_json(const std::string& message, const std::string& type, const std::string& param = "",
                       const std::string& code = "");

}  // namespace larql::server
