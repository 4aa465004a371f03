#include "server/http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <cmath>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/websocket.h"
#include "server/ws_read_layer.h"
#include "util/error.h"

namespace larql::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
namespace ssl = net::ssl;

std::string Request::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

bool key_matches(std::string_view offered, std::string_view expected) {
  unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(offered.data()), offered.size(), a);
  SHA256(reinterpret_cast<const unsigned char*>(expected.data()), expected.size(), b);
  return CRYPTO_memcmp(a, b, sizeof a) == 0;
}

std::string error_json(const std::string& message, const std::string& type, const std::string& param,
                       const std::string& code) {
  nlohmann::json e = {{"message", message}, {"type", type}};
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return nlohmann::json{{"error", e}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

const char* reason_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    default: return status < 500 ? "invalid_request_error" : "server_error";
  }
}

/// A Responder over a plain TCP socket or a TLS stream (Stream: tcp::socket or
/// ssl::stream<tcp::socket>); `fd` is the underlying socket, polled for the peer's close.
template <class Stream>
class SocketResponder : public Responder {
 public:
  SocketResponder(Stream& sock, int fd, unsigned version, bool keep_alive, std::map<std::string, std::string> common)
      : sock_(sock), fd_(fd), version_(version), keep_alive_(keep_alive), common_(std::move(common)) {}

  void send(int status, const std::string& content_type, const std::string& body,
            const std::map<std::string, std::string>& extra = {}) override {
    http::response<http::string_body> res{static_cast<http::status>(status), version_};
    res.set(http::field::server, "larql");
    res.set(http::field::content_type, content_type);
    for (const auto& [k, v] : common_) res.set(k, v);
    for (const auto& [k, v] : extra) res.set(k, v);
    res.keep_alive(keep_alive_);
    res.body() = body;
    res.prepare_payload();
    beast::error_code ec;
    http::write(sock_, res, ec);
    if (ec) gone_ = true;
    sent_ = true;
  }

  void start_stream() override {
    http::response<http::empty_body> res{http::status::ok, version_};
    res.set(http::field::server, "larql");
    res.set(http::field::content_type, "text/event-stream");
    res.set(http::field::cache_control, "no-cache");
    for (const auto& [k, v] : common_) res.set(k, v);
    res.keep_alive(keep_alive_);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    beast::error_code ec;
    http::write_header(sock_, sr, ec);
    if (ec) gone_ = true;
    sent_ = true;
    streaming_ = true;
  }

  bool event(std::string_view payload) override {
    if (gone_) return false;
    std::string data = "data: ";
    data.append(payload);
    data += "\n\n";
    beast::error_code ec;
    net::write(sock_, http::make_chunk(net::buffer(data)), ec);
    if (ec) gone_ = true;
    return !gone_;
  }

  void end_stream() override {
    if (!streaming_ || gone_) return;
    beast::error_code ec;
    net::write(sock_, http::make_chunk_last(), ec);
    if (ec) gone_ = true;
    streaming_ = false;
  }

  bool wait(int notify_fd, std::chrono::milliseconds timeout) override {
    if (gone_) return false;
    pollfd fds[2] = {{fd_, static_cast<short>(POLLRDHUP | (peer_sent_data_ ? 0 : POLLIN)), 0},
                     {notify_fd, POLLIN, 0}};
    const int r = ::poll(fds, 2, static_cast<int>(timeout.count()));
    if (r <= 0) return true;
    if (fds[0].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
      gone_ = true;
      return false;
    }
    if (fds[0].revents & POLLIN) {
      char c;
      const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        gone_ = true;
        return false;
      }
      peer_sent_data_ = n > 0;  // a pipelined request: stop watching POLLIN, keep POLLRDHUP
    }
    return true;
  }

  bool sent() const { return sent_; }
  bool gone() const { return gone_; }
  bool streaming() const { return streaming_; }

 private:
  Stream& sock_;
  int fd_;
  unsigned version_;
  bool keep_alive_;
  std::map<std::string, std::string> common_;
  bool sent_ = false, gone_ = false, streaming_ = false, peer_sent_data_ = false;
};

/// The subprotocols a WebSocket upgrade offers (`Sec-WebSocket-Protocol`, comma-separated,
/// RFC 6455 §4.1), trimmed, empty ones dropped.
std::vector<std::string> websocket_protocols(const std::string& header) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < header.size()) {
    size_t end = header.find(',', at);
    if (end == std::string::npos) end = header.size();
    std::string p = header.substr(at, end - at);
    p.erase(0, p.find_first_not_of(" \t"));
    p.erase(p.find_last_not_of(" \t") + 1);
    if (!p.empty()) out.push_back(std::move(p));
    at = end + 1;
  }
  return out;
}

/// The key a browser's WebSocket offers as a subprotocol (browsers cannot set Authorization on
/// one): `Sec-WebSocket-Protocol: larql, bearer.KEY` gives KEY; "" when none is offered.
std::string websocket_key(const std::string& protocols) {
  for (const auto& p : websocket_protocols(protocols))
    if (p.rfind("bearer.", 0) == 0) return p.substr(7);
  return "";
}

/// What reading one /v1/stream message gave: a text message, a binary one (refused: messages are
/// JSON text), or nothing (the socket closed or failed).
enum class WsRead { Text, Binary, Gone };

/// The error frame that answers a binary message (RFC 6455 §5.6: JSON goes in text frames).
std::string ws_binary_refusal() {
  return ws_result_frame(nullptr, 400, "application/json",
                         error_json("binary WebSocket messages are not read: each /v1/stream message is a JSON text "
                                    "message (a text frame)",
                                    "invalid_request_error", "", "binary_message"));
}

/// The "id" of a /v1/stream message, or null when it has none (or is not JSON).
nlohmann::json ws_message_id(const std::string& text) {
  const auto m = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return m.is_object() && m.contains("id") ? m["id"] : nlohmann::json(nullptr);
}

/// A call's answer on the /v1/stream socket: the Responder the routes write to, turned into
/// WebSocket frames tagged with the call's id (server/websocket.h). wait() also reads the socket:
/// a cancel for this call ends it (the route sees "client gone"), other calls queue. `ready`
/// says a message's bytes are already read (server/ws_read_layer.h), so wait() must not poll.
template <class Ws>
class WsResponder : public Responder {
 public:
  WsResponder(Ws& ws, int fd, nlohmann::json id, std::function<WsRead(std::string&)> read_one,
              std::function<bool()> ready, std::deque<std::string>& pending)
      : ws_(ws), fd_(fd), id_(std::move(id)), read_one_(std::move(read_one)), ready_(std::move(ready)),
        pending_(pending) {}

  void send(int status, const std::string& content_type, const std::string& body,
            const std::map<std::string, std::string>& = {}) override {
    write(ws_result_frame(id_, status, content_type, body));
    sent_ = true;
  }
  void start_stream() override {
    sent_ = true;
    streaming_ = true;
  }
  bool event(std::string_view payload) override {
    if (payload == "[DONE]") done_ = true;
    write(ws_event_frame(id_, payload));
    return !gone_ && !cancelled_;
  }
  void end_stream() override {
    if (streaming_ && !done_) write(ws_event_frame(id_, "[DONE]"));
    streaming_ = false;
  }
  bool wait(int notify_fd, std::chrono::milliseconds timeout) override {
    if (gone_ || cancelled_) return false;
    // Messages already read from the socket (sent together with an earlier one) first: poll(2)
    // cannot see them. Bounded, so a flood of messages cannot stall the running call.
    for (int i = 0; i < 64 && ready_(); ++i)
      if (!take_one()) return false;
    pollfd fds[2] = {{fd_, POLLIN, 0}, {notify_fd, POLLIN, 0}};
    const int r = ::poll(fds, 2, static_cast<int>(timeout.count()));
    if (r <= 0 || !(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) return true;
    return take_one();
  }
  bool sent() const { return sent_; }
  bool gone() const { return gone_; }
  bool streaming() const { return streaming_; }

 private:
  /// Reads one message (waiting for it) and acts on it: a cancel of this call ends it (false),
  /// a cancel of a waiting call drops that one, any other message waits its turn in pending_.
  bool take_one() {
    std::string text;
    const WsRead got = read_one_(text);
    if (got == WsRead::Gone) {
      gone_ = true;
      return false;
    }
    if (got == WsRead::Binary) {
      write(ws_binary_refusal());
      return !gone_;
    }
    nlohmann::json id = nullptr;
    try {
      const WsCall c = parse_ws_call(text, Request{});
      id = c.id;
      if (c.cancel && c.id == id_) {
        cancelled_ = true;
        return false;
      }
      if (c.cancel) {  // a call still waiting: drop it, and say it is done
        for (auto it = pending_.begin(); it != pending_.end(); ++it)
          if (ws_message_id(*it) == c.id) {
            pending_.erase(it);
            write(ws_event_frame(c.id, "[DONE]"));
            break;
          }
        return true;
      }
    } catch (const std::exception&) {
      id = ws_message_id(text);  // a bad message: answered in turn, with its id if it has one
    }
    if (pending_.size() >= 16) {
      write(ws_result_frame(id, 429, "application/json",
                            error_json("more than 16 calls wait on this socket; wait for answers", "rate_limit_error")));
    } else {
      pending_.push_back(std::move(text));
    }
    return true;
  }
  void write(const std::string& frame) {
    if (gone_) return;
    beast::error_code ec;
    ws_.text(true);
    ws_.write(net::buffer(frame), ec);
    if (ec) gone_ = true;
  }
  Ws& ws_;
  int fd_;
  nlohmann::json id_;
  std::function<WsRead(std::string&)> read_one_;
  std::function<bool()> ready_;
  std::deque<std::string>& pending_;
  bool sent_ = false, streaming_ = false, done_ = false, gone_ = false, cancelled_ = false;
};

void set_timeout(int fd, int option, int seconds) {
  timeval tv{};
  tv.tv_sec = seconds;
  ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv);
}

}  // namespace

HttpServer::HttpServer(HttpOptions opt, Handler handler) : opt_(std::move(opt)), handler_(std::move(handler)) {
  if (opt_.port < 0 || opt_.port > 65535)
    throw Error(ErrorKind::InvalidArgument, "port " + std::to_string(opt_.port) + " is outside 0-65535");
  if (opt_.tls_cert.empty() != opt_.tls_key.empty())
    throw Error(ErrorKind::InvalidArgument, "TLS needs both a certificate and a key (--tls-cert and --tls-key)");
  if (!opt_.tls_cert.empty()) {
    tls_ = std::make_shared<ssl::context>(ssl::context::tls_server);
    tls_->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                      ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    beast::error_code ec;
    tls_->use_certificate_chain_file(opt_.tls_cert, ec);
    if (ec) throw Error(ErrorKind::InvalidArgument, "cannot use the TLS certificate " + opt_.tls_cert + ": " + ec.message());
    tls_->use_private_key_file(opt_.tls_key, ssl::context::pem, ec);
    if (ec) throw Error(ErrorKind::InvalidArgument, "cannot use the TLS key " + opt_.tls_key + ": " + ec.message());
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(opt_.port);
  if (int rc = ::getaddrinfo(opt_.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    throw Error(ErrorKind::InvalidArgument, "cannot resolve host \"" + opt_.host + "\": " + gai_strerror(rc));
  std::string why;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      break;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0)
    throw Error(ErrorKind::Io, "cannot listen on " + opt_.host + ":" + port + (why.empty() ? "" : ": " + why));
}

HttpServer::~HttpServer() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

bool HttpServer::rate_ok(const std::string& client) {
  if (opt_.rate_limit_per_min <= 0) return true;
  const auto now = std::chrono::steady_clock::now();
  const double burst = std::max(1.0, opt_.rate_limit_per_min / 6.0);  // ten seconds' worth
  std::lock_guard<std::mutex> lock(rate_mu_);
  if (buckets_.size() > 100000) buckets_.clear();  // bounded memory under address churn
  auto [it, fresh] = buckets_.try_emplace(client, Bucket{burst, now});
  Bucket& b = it->second;
  if (!fresh) {
    const double dt = std::chrono::duration<double>(now - b.last).count();
    b.tokens = std::min(burst, b.tokens + dt * opt_.rate_limit_per_min / 60.0);
    b.last = now;
  }
  if (b.tokens < 1.0) return false;
  b.tokens -= 1.0;
  return true;
}

void HttpServer::watch(int fd, std::chrono::steady_clock::time_point deadline, bool idle) {
  std::lock_guard<std::mutex> lock(fds_mu_);
  auto it = fds_.find(fd);
  if (it != fds_.end()) it->second = Watch{deadline, idle};
}

void HttpServer::run() {
  // Cuts the connections whose watched read is past its deadline (and, draining, the idle ones).
  auto cut_expired = [this] {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(fds_mu_);
    for (auto& [fd, w] : fds_)
      if (now >= w.deadline || (stopping_ && w.idle)) {
        ::shutdown(fd, SHUT_RDWR);
        w = Watch{};
      }
  };
  while (!stopping_) {
    cut_expired();
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    char host[INET6_ADDRSTRLEN] = "";
    if (ss.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, host, sizeof host);
    else if (ss.ss_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, host, sizeof host);
    if (connections_.load() >= opt_.max_connections) {
      const std::string body = error_json("too many connections", "server_error");
      const std::string busy = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                               "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
      [[maybe_unused]] ssize_t n = ::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL);
      ::close(fd);
      continue;
    }
    ++connections_;
    {
      std::lock_guard<std::mutex> lock(fds_mu_);
      fds_[fd] = Watch{};
    }
    std::thread([this, fd, peer = std::string(host)] {
      try {
        serve_connection(fd, peer);
      } catch (...) {
      }
      {
        std::lock_guard<std::mutex> lock(fds_mu_);
        fds_.erase(fd);
      }
      --connections_;
    }).detach();
  }
  ::close(listen_fd_);
  listen_fd_ = -1;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(opt_.drain_timeout_s);
  while (connections_.load() > 0 && std::chrono::steady_clock::now() < until) {
    cut_expired();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (opt_.on_drain_end) {
    opt_.on_drain_end();
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (connections_.load() > 0 && std::chrono::steady_clock::now() < grace) {
      cut_expired();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // The drain is over: cut what is left (a stream still running, an idle kept-alive connection)
  // and wait for every connection thread to end, so none outlives the routes it calls.
  {
    std::lock_guard<std::mutex> lock(fds_mu_);
    for (const auto& [fd, w] : fds_) ::shutdown(fd, SHUT_RDWR);
  }
  while (connections_.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void HttpServer::serve_connection(int fd, std::string peer) {
  // Reads are bounded by their own deadlines (serve_stream, the TLS handshake).
  set_timeout(fd, SO_SNDTIMEO, opt_.read_timeout_s);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  net::io_context ioc;
  tcp::socket sock(ioc);
  beast::error_code ec;
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  sock.assign(ss.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
  if (ec) {
    ::close(fd);
    return;
  }
  if (tls_) {
    ssl::stream<tcp::socket> stream(std::move(sock), *tls_);
    // The handshake, bounded by read_timeout_s like a request (non-blocking reads and poll()).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt_.read_timeout_s);
    stream.next_layer().non_blocking(true, ec);
    for (;;) {
      ec = {};
      stream.handshake(ssl::stream_base::server, ec);
      if (ec != net::error::would_block && ec != net::error::try_again) break;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (stopping_ || left.count() <= 0) break;
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 200)));
    }
    beast::error_code ignored;
    stream.next_layer().non_blocking(false, ignored);
    if (!ec) serve_stream(stream, fd, peer);
    stream.shutdown(ec);
    stream.next_layer().close(ec);
  } else {
    serve_stream(sock, fd, peer);
    sock.shutdown(tcp::socket::shutdown_both, ec);
    sock.close(ec);
  }
}

template <class Stream>
void HttpServer::serve_stream(Stream& sock, int fd, const std::string& peer) {
  beast::error_code ec;
  beast::flat_buffer buf;
  while (!stopping_) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(opt_.max_body_bytes);
    parser.header_limit(64 * 1024);
    // The whole request — or the wait for the next one on a kept-alive connection — must arrive
    // within read_timeout_s: a client that trickles bytes (slowloris) is dropped. Asio's blocking
    // reads ignore SO_RCVTIMEO (they poll without a timeout), so the socket reads non-blocking
    // here and this loop waits with poll() up to the deadline.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt_.read_timeout_s);
    auto& raw = beast::get_lowest_layer(sock);
    beast::error_code ignored;
    raw.non_blocking(true, ignored);
    for (;;) {
      ec = {};
      http::read_some(sock, buf, parser, ec);
      if (!ec && parser.is_done()) break;
      const bool again = ec == net::error::would_block || ec == net::error::try_again;
      if (ec && !again) break;
      if (!ec) continue;  // progress; the request is not complete yet
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (stopping_ || left.count() <= 0) {
        ec = net::error::timed_out;
        break;
      }
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 200)));
    }
    raw.non_blocking(false, ignored);  // responses are written blocking (bounded by SO_SNDTIMEO)
    if (ec == http::error::end_of_stream || ec == net::error::eof) break;
    const unsigned version = parser.get().version() ? parser.get().version() : 11;
    if (ec) {
      if (ec == http::error::body_limit) {
        SocketResponder<Stream> r(sock, fd, version, false, {});
        r.send(413, "application/json",
               error_json("the request body is larger than " + std::to_string(opt_.max_body_bytes) + " bytes",
                          "invalid_request_error", "", "body_too_large"));
      } else if (ec != net::error::would_block && ec != net::error::try_again && ec != net::error::timed_out &&
                 ec != net::error::connection_reset) {
        SocketResponder<Stream> r(sock, fd, version, false, {});
        r.send(400, "application/json", error_json("malformed HTTP request: " + ec.message(), "invalid_request_error"));
      }
      break;
    }
    const auto& msg = parser.get();
    Request req;
    req.method = std::string(msg.method_string());
    const std::string target(msg.target());
    const size_t q = target.find('?');
    req.path = target.substr(0, q);
    if (q != std::string::npos) req.query = target.substr(q + 1);
    for (const auto& f : msg) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      req.headers[name] = std::string(f.value());
    }
    req.body = msg.body();
    req.client = peer;
    if (opt_.trust_proxy) {
      std::string xff = req.header("x-forwarded-for");
      if (!xff.empty()) {
        xff = xff.substr(0, xff.find(','));
        xff.erase(0, xff.find_first_not_of(" \t"));
        xff.erase(xff.find_last_not_of(" \t") + 1);
        if (!xff.empty()) req.client = xff;
      }
    }
    std::map<std::string, std::string> common;
    if (!opt_.cors_origins.empty()) {
      const std::string origin = req.header("origin");
      const bool any = std::find(opt_.cors_origins.begin(), opt_.cors_origins.end(), "*") != opt_.cors_origins.end();
      if (any || std::find(opt_.cors_origins.begin(), opt_.cors_origins.end(), origin) != opt_.cors_origins.end()) {
        common["Access-Control-Allow-Origin"] = any ? "*" : origin;
        common["Access-Control-Allow-Headers"] = "Authorization, Content-Type, X-Api-Key, X-Session-Id";
        common["Access-Control-Allow-Methods"] = "GET, POST, DELETE, OPTIONS";
        if (!any) common["Vary"] = "Origin";
      }
    }
    const bool keep_alive = msg.keep_alive() && !stopping_;
    SocketResponder<Stream> r(sock, fd, version, keep_alive, common);
    if (req.method == "OPTIONS") {
      r.send(common.empty() ? 403 : 204, "text/plain", "");
    } else if (!opt_.api_key.empty() && req.path != "/health" &&
               !(opt_.public_path && (req.method == "GET" || req.method == "HEAD") && opt_.public_path(req.path))) {
      std::string offered = req.header("authorization");
      // The scheme is case-insensitive (RFC 9110 §11.1).
      std::string scheme = offered.substr(0, 7);
      std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
      if (scheme == "bearer ") offered = offered.substr(7);
      else offered = req.header("x-api-key");
      if (offered.empty()) offered = websocket_key(req.header("sec-websocket-protocol"));
      if (offered.empty() || !key_matches(offered, opt_.api_key)) {
        r.send(401, "application/json",
               error_json(offered.empty() ? "this server wants an API key (Authorization: Bearer KEY)"
                                          : "the API key is not valid",
                          reason_type(401), "", "invalid_api_key"),
               {{"WWW-Authenticate", "Bearer"}});
      }
    }
    if (!r.sent() && req.method != "OPTIONS" && req.path != "/health" && !rate_ok(req.client)) {
      r.send(429, "application/json",
             error_json("rate limit: more than " + std::to_string(static_cast<int>(opt_.rate_limit_per_min)) +
                            " requests per minute from " + req.client,
                        reason_type(429), "", "rate_limit_exceeded"),
             {{"Retry-After", std::to_string(static_cast<int>(std::ceil(60.0 / opt_.rate_limit_per_min)))}});
    }
    if (!r.sent() && beast::websocket::is_upgrade(msg)) {
      if (req.path != "/v1/stream") {
        r.send(404, "application/json", error_json("WebSocket is served at /v1/stream only", reason_type(404)));
        break;
      }
      // RFC 6455 §4.2.2: the server answers with one of the protocols offered, and browsers fail
      // a socket whose offer got none. `larql` is the one this server speaks; `bearer.KEY` only
      // carries the key (echoing it would put the key in the response).
      const auto offered = websocket_protocols(req.header("sec-websocket-protocol"));
      if (!offered.empty() && std::find(offered.begin(), offered.end(), "larql") == offered.end()) {
        r.send(400, "application/json",
               error_json("Sec-WebSocket-Protocol offers no protocol this server speaks: offer \"larql\" (with "
                          "\"bearer.KEY\" beside it to send the API key)",
                          reason_type(400), "", "unsupported_subprotocol"));
        break;
      }
      // Bytes past the upgrade request (frames sent before the 101 arrived) go to the socket.
      serve_websocket(sock, fd, msg, req, beast::buffers_to_string(buf.data()));
      break;
    }
    if (!r.sent()) {
      try {
        handler_(req, r);
      } catch (const std::exception& e) {
        if (!r.sent()) r.send(500, "application/json", error_json(e.what(), "server_error"));
      }
      if (r.streaming()) r.end_stream();
      if (!r.sent()) r.send(500, "application/json", error_json("the route gave no answer", "server_error"));
    }
    if (r.gone() || !keep_alive) break;
  }
}

template <class Stream, class Upgrade>
void HttpServer::serve_websocket(Stream& sock, int fd, const Upgrade& upgrade, const Request& req,
                                 std::string already_read) {
  namespace websocket = beast::websocket;
  using Ws = websocket::stream<WsReadLayer<Stream>>;
  Ws ws(sock, std::move(already_read));
  ws.read_message_max(opt_.max_body_bytes);
  const auto offered = websocket_protocols(req.header("sec-websocket-protocol"));
  const bool offered_larql = std::find(offered.begin(), offered.end(), "larql") != offered.end();
  ws.set_option(websocket::stream_base::decorator([offered_larql](websocket::response_type& res) {
    res.set(http::field::server, "larql");
    if (offered_larql) res.set(http::field::sec_websocket_protocol, "larql");
  }));
  beast::error_code ec;
  watch(fd, std::chrono::steady_clock::now() + std::chrono::seconds(opt_.read_timeout_s), false);
  ws.accept(upgrade, ec);
  if (ec) {
    unwatch(fd);
    return;
  }
  // One message, bounded: the wait for its first byte by ws_idle_timeout_s (idle: a drain cuts
  // it), the rest by read_timeout_s. Control frames (ping, close) are answered inside read().
  auto read_one = [&](std::string& out, bool idle) {
    const int limit = idle ? opt_.ws_idle_timeout_s : opt_.read_timeout_s;
    watch(fd, std::chrono::steady_clock::now() + std::chrono::seconds(limit), idle);
    beast::flat_buffer b;
    beast::error_code rec;
    ws.read(b, rec);
    unwatch(fd);
    if (rec) return WsRead::Gone;
    if (!ws.got_text()) return WsRead::Binary;
    out = beast::buffers_to_string(b.data());
    return WsRead::Text;
  };
  std::deque<std::string> pending;
  auto reply = [&](const std::string& frame) {
    beast::error_code wec;
    ws.text(true);
    ws.write(net::buffer(frame), wec);
    return !wec;
  };
  while (!stopping_) {
    std::string text;
    if (!pending.empty()) {
      text = std::move(pending.front());
      pending.pop_front();
    } else if (const WsRead got = read_one(text, true); got == WsRead::Gone) {
      break;
    } else if (got == WsRead::Binary) {
      if (!reply(ws_binary_refusal())) break;
      continue;
    }
    WsCall call;
    try {
      call = parse_ws_call(text, req);
    } catch (const std::exception& e) {
      if (!reply(ws_result_frame(ws_message_id(text), 400, "application/json",
                                 error_json(e.what(), "invalid_request_error"))))
        break;
      continue;
    }
    if (call.cancel) continue;  // nothing of that id runs now (a finished call's cancel is late)
    if (!rate_ok(call.request.client)) {
      if (!reply(ws_result_frame(call.id, 429, "application/json",
                                 error_json("rate limit: too many calls from " + call.request.client,
                                            reason_type(429), "", "rate_limit_exceeded"))))
        break;
      continue;
    }
    WsResponder<Ws> r(ws, fd, call.id, [&](std::string& out) { return read_one(out, false); },
                      [&] { return ws.next_layer().ready(); }, pending);
    try {
      handler_(call.request, r);
    } catch (const std::exception& e) {
      if (!r.sent()) r.send(500, "application/json", error_json(e.what(), "server_error"));
    }
    if (r.streaming()) r.end_stream();
    if (!r.sent()) r.send(500, "application/json", error_json("the route gave no answer", "server_error"));
    if (r.gone()) return;
  }
  watch(fd, std::chrono::steady_clock::now() + std::chrono::seconds(2), true);
  ws.close(websocket::close_code::going_away, ec);
  unwatch(fd);
}

}  // namespace larql::server
