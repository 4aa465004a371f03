// `larql serve MODEL --grpc-port P [--layers A-B] [--experts A-B]`: serve a part of a model to
// clients and routers over gRPC (docs/sharding.md).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace larql::cli {

struct ShardServeArgs {
  int grpc_port = -1;  ///< -1: not a shard
  std::string grpc_host = "127.0.0.1";
  std::string layers, experts;
  std::string cert, key, client_ca;
  bool insecure = false;
  bool ffn_only = false;
  int64_t max_rows = 4096;
  int64_t max_sequences = 64;
  int sequence_ttl_s = 600;
  int debug_delay_ms = 0;
};

/// The shard flags on `larql serve`.
void add_shard_serve_flags(CLI::App* cmd, ShardServeArgs& a);

/// Load the part of `model` the flags name and serve it until SIGINT/SIGTERM.
void serve_shard(const std::string& model, int threads, const ShardServeArgs& a);

}  // namespace larql::cli
