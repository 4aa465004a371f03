// `larql serve MODEL --grpc-port P`: a shard (docs/sharding.md).
#include "cli/serve_shard.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <thread>

#include "cli/common.h"
#include "model/model.h"
#include "shard/shard.h"
#include "util/error.h"

namespace larql::cli {

void add_shard_serve_flags(CLI::App* cmd, ShardServeArgs& a) {
  const char* g = "Shard (gRPC; docs/sharding.md)";
  add_int_flag(cmd, "--grpc-port", a.grpc_port, 0, 65535,
               "serve this model (or the part --layers/--experts name) over gRPC on this port instead of HTTP "
               "(0: any free port, printed at start)")
      ->group(g);
  cmd->add_option("--grpc-host", a.grpc_host, "address the gRPC shard listens on (default 127.0.0.1)")->group(g);
  cmd->add_option("--layers", a.layers, "hold only these layers, inclusive: A-B (needs --grpc-port)")->group(g);
  cmd->add_option("--experts", a.experts, "hold only these experts of every layer, inclusive: A-B (needs --grpc-port)")
      ->group(g);
  cmd->add_option("--grpc-cert", a.cert, "PEM certificate of the shard (TLS); needs --grpc-key")
      ->check(CLI::ExistingFile)
      ->group(g);
  cmd->add_option("--grpc-key", a.key, "PEM key of --grpc-cert")->check(CLI::ExistingFile)->group(g);
  cmd->add_option("--grpc-client-ca", a.client_ca,
                  "require client certificates signed by this PEM CA (mTLS); calls without one are refused")
      ->check(CLI::ExistingFile)
      ->group(g);
  cmd->add_flag("--grpc-insecure", a.insecure, "allow plaintext gRPC on an address other than loopback")->group(g);
  cmd->add_flag("--ffn-only", a.ffn_only,
                "hold only the FFN weights (and norms) of the layers: WalkFfn/Experts, no RunLayers; what a vindex "
                "`slice --preset server` holds")
      ->group(g);
  add_int_flag(cmd, "--max-rows", a.max_rows, 1, 1 << 20, "rows one gRPC call may carry (default 4096)")->group(g);
  add_int_flag(cmd, "--max-sequences", a.max_sequences, 1, 1 << 20,
               "pipeline sequences (RunLayers) kept; the least recently used go (default 64)")
      ->group(g);
  add_int_flag(cmd, "--sequence-ttl", a.sequence_ttl_s, 1, 86400 * 30,
               "seconds an idle pipeline sequence is kept (default 600)")
      ->group(g);
  // Fault-injection for the tests (a shard slower than its callers' deadline).
  add_int_flag(cmd, "--debug-delay-ms", a.debug_delay_ms, 0, 3600000, "answer every call this much later")->group("");
}

void serve_shard(const std::string& model, int threads, const ShardServeArgs& a) {
  ModelPart part;
  part.embedding = false;  // a shard never embeds tokens nor computes logits
  part.attention = !a.ffn_only;
  if (!a.layers.empty()) std::tie(part.layer_begin, part.layer_end) = ModelPart::parse_range(a.layers, "--layers");
  if (!a.experts.empty()) std::tie(part.expert_begin, part.expert_end) = ModelPart::parse_range(a.experts, "--experts");
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  const std::string path = resolve_model(model);
  std::shared_ptr<const Model> m = Model::load(path, part);
  auto pool = std::make_shared<ThreadPool>(threads);
  shard::ServerOptions so;
  so.host = a.grpc_host;
  so.port = a.grpc_port;
  so.tls_cert = a.cert;
  so.tls_key = a.key;
  so.client_ca = a.client_ca;
  so.insecure = a.insecure;
  so.max_rows = a.max_rows;
  so.max_sequences = a.max_sequences;
  so.sequence_ttl_s = a.sequence_ttl_s;
  so.debug_delay_ms = a.debug_delay_ms;
  shard::ShardServer server(m, pool, so);

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    std::fprintf(stderr, "larql serve: %s received, stopping the shard\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    server.shutdown();
  });
  std::fprintf(stderr, "larql serve: shard of %s holding %s (%d threads, %s)\n", path.c_str(),
               m->part().describe(m->config()).c_str(), pool->size(),
               a.cert.empty() ? "plaintext" : a.client_ca.empty() ? "TLS" : "mutual TLS");
  const std::string shown = a.grpc_host.find(':') != std::string::npos ? "[" + a.grpc_host + "]" : a.grpc_host;
  std::printf("listening on grpc://%s:%d\n", shown.c_str(), server.port());
  std::fflush(stdout);
  server.wait();
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  std::fprintf(stderr, "larql serve: stopped\n");
}

}  // namespace larql::cli
