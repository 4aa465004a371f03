// libFuzzer target for `larql serve`'s request path: arbitrary bytes arrive on a loopback
// connection to a real HttpServer + Api (the OpenAI routes) over the synthetic model, so Beast's
// HTTP parser, the shared checks (body limit, key, CORS), the JSON body reader and every
// route's field validation, tokenisation and generation see hostile input. The harness reads the
// answer until the server closes; ASan/UBSan catch memory errors, libFuzzer's -timeout a hang.
// Run via scripts/fuzz.sh (seeds: fuzz/corpus/serve/, one HTTP request per file), without leak
// detection: at exit, connection threads may be mid-request and their thread_local scratch
// (attention scores, RoPE tables) is reported as leaked.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>

#include "inference/forward.h"
#include "kv/registry.h"
#include "model/model.h"
#include "server/http.h"
#include "server/routes.h"
#include "server/scheduler.h"
#include "testlib/synthetic_model.h"
#include "tokenizer/tokenizer.h"

namespace {

struct World {
  std::unique_ptr<larql::testing::SyntheticModel> sm;
  std::shared_ptr<larql::Model> model;
  std::shared_ptr<larql::Forward> fwd;
  std::unique_ptr<larql::server::Scheduler> sched;
  std::unique_ptr<larql::server::HttpServer> http;
  std::unique_ptr<larql::server::Api> api;
  std::thread runner;
  int port = 0;
};

World& world() {
  static World* w = [] {
    ::signal(SIGPIPE, SIG_IGN);
    auto* x = new World;  // lives for the process (the server thread runs until exit)
    x->sm = larql::testing::make_synthetic_model();
    x->model = larql::Model::load(x->sm->path);
    x->fwd = std::make_shared<larql::Forward>(x->model, 1);
    larql::Tokenizer tok(x->model->source().vocabulary());
    larql::server::SchedulerOptions so;
    so.max_batch = 4;
    so.max_queue = 8;
    x->sched = std::make_unique<larql::server::Scheduler>(x->fwd, tok, so);
    larql::server::HttpOptions ho;
    ho.port = 0;
    ho.max_body_bytes = 64 << 10;
    ho.read_timeout_s = 2;
    ho.cors_origins = {"http://example.test"};
    larql::server::ApiOptions ao;
    ao.model_id = "synthetic";
    ao.default_engine = larql::parse_engine_spec("standard");
    ao.request_timeout_s = 5;
    x->http = std::make_unique<larql::server::HttpServer>(
        ho, [x](const larql::server::Request& q, larql::server::Responder& r) { (*x->api)(q, r); });
    x->api = std::make_unique<larql::server::Api>(x->fwd, tok, *x->sched, x->http.get(), ao);
    x->port = x->http->port();
    x->runner = std::thread([x] { x->http->run(); });
    x->runner.detach();
    return x;
  }();
  return *w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(w.port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    size_t sent = 0;
    while (sent < size) {
      const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    ::shutdown(fd, SHUT_WR);  // end of the client's bytes: the server answers, then closes
    char buf[4096];
    while (::recv(fd, buf, sizeof buf, 0) > 0) {
    }
  }
  ::close(fd);
  // One input at a time: wait until the server has finished with it (a route may still compute
  // after the client closed), so inputs do not pile up and a crash belongs to this input.
  for (int i = 0; i < 10000 && w.http->connections() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return 0;
}
