// A model split over processes (docs/sharding.md): a shard serves the part of a model it holds
// (ModelPart: a layer range, an expert range) over gRPC (src/shard/proto/larql/shard/v1/
// shard.proto); a client holding the rest runs attention locally and the FFN on the shards
// (RemoteFfn), or hands residual rows through the shards' layers (pipeline, ShardClient::
// run_layers). gRPC C++ brings deadlines, cancellation, TLS and the standard health service; this
// header speaks larql's types only.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "inference/ffn.h"
#include "inference/forward.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace larql::shard {

/// How a shard serves.
struct ServerOptions {
  std::string host = "127.0.0.1";  ///< a loopback address unless told otherwise
  int port = 0;                    ///< 0: the system picks a free port (ShardServer::port())
  std::string tls_cert, tls_key;   ///< PEM files: serve TLS (both or neither)
  std::string client_ca;           ///< PEM file: require client certificates signed by it (mTLS)
  bool insecure = false;           ///< allow plaintext on a non-loopback address
  int64_t max_rows = 4096;         ///< rows one call may carry
  int64_t max_sequences = 64;      ///< pipeline sequences kept (least recently used dropped)
  int sequence_ttl_s = 600;        ///< a pipeline sequence idle this long is dropped
  int debug_delay_ms = 0;          ///< testing only: answer every call this much later
};

/// The gRPC server of one shard: the Shard service over `model` (a whole model or a part) and
/// the standard health service (grpc.health.v1, "" and "larql.shard.v1.Shard" SERVING). Calls run
/// concurrently, each on its own Forward over `pool`.
class ShardServer {
 public:
  /// Bind and start serving. Errors: Error{InvalidArgument} for a non-loopback host without TLS
  /// (unless insecure), a TLS file missing or only one of cert/key; Error{Io} when the address
  /// cannot be bound (naming it).
  ShardServer(std::shared_ptr<const Model> model, std::shared_ptr<ThreadPool> pool, const ServerOptions& opt);
  ~ShardServer();
  ShardServer(const ShardServer&) = delete;
  ShardServer& operator=(const ShardServer&) = delete;

  /// The port bound.
  int port() const;
  /// Block until shutdown() (from another thread).
  void wait();
  /// Stop accepting calls; calls in flight get until `grace` to finish, then are cancelled.
  void shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// A client's TLS: `ca` verifies the shard's certificate (empty: plaintext); `cert` + `key` are
/// the client's own certificate for a shard that requires one (mTLS).
struct ClientTls {
  std::string ca, cert, key;
  /// For a certificate issued to a name other than the address's host (tests: "localhost").
  std::string server_name;
};

/// What a shard reported about itself (its InfoReply).
struct ShardInfo {
  std::string address;  ///< "host:port" as the client dialled it
  std::string model, fingerprint, architecture, version;
  int64_t n_layers = 0, hidden = 0;
  int64_t layer_begin = 0, layer_end = 0;
  int64_t n_experts = 0, expert_begin = 0, expert_end = 0;
  bool attention = false, ffn = false;
  int64_t max_rows = 0;
  /// "host:port (layers 0-8)" for messages.
  std::string describe() const;
};

/// One shard, dialled once (a channel reused by every call; gRPC reconnects by itself). Every call
/// has a deadline (`timeout`). After a call fails in transport or a health check finds the shard
/// down, the next call first asks Info again with a short deadline (kProbeDeadline: a request made
/// while the shard is known down fails within it, not after `timeout`) and refuses a shard that
/// came back serving another model or another part (never a silent wrong answer). Thread-safe.
/// Errors of every call: Error{BackendUnavailable} naming the shard and gRPC's status (unreachable,
/// deadline exceeded, refused certificate, restarted on another model, ...); Error{InvalidArgument}
/// when the shard says the request was bad; Error{Cancelled} when the shard says the call was
/// cancelled.
class ShardClient {
 public:
  /// The deadline of the Info probe before a call to a shard that failed (or the timeout, if shorter).
  static constexpr std::chrono::milliseconds kProbeDeadline{1000};

  /// Dial and ask Info. Errors: as above; Error{InvalidArgument} for a malformed address.
  ShardClient(const std::string& address, const ClientTls& tls, std::chrono::milliseconds timeout);
  ~ShardClient();

  const ShardInfo& info() const { return info_; }

  /// out [n, hidden] = the FFN of `layer` on the normed rows h [n, hidden] (Ffn::run's contract).
  void walk_ffn(int64_t layer, const float* h, int64_t n, float* out);
  /// Residual rows x [n, hidden] through layers [begin, end) of the shard for sequence `seq`
  /// starting at `position` (0: a new sequence), in place. Returns the shard's K/V end.
  int64_t run_layers(const std::string& seq, int64_t begin, int64_t end, int64_t position, float* x, int64_t n,
                     int64_t window = 0, bool sink = false);
  /// Mixture of experts: the outputs of the experts this shard holds among `chosen` [n, k] on the
  /// rows h [n, hidden] into y [n*k, hidden] (slot t*k+j = expert chosen[t*k+j] on row t); the
  /// slots it filled are set to 1 in `filled` [n*k] (others untouched).
  void experts(int64_t layer, const float* h, int64_t n, int64_t k, const int32_t* chosen, float* y, uint8_t* filled);
  /// Drop a pipeline sequence on the shard; whether it existed. `deadline` 0: the client's timeout.
  bool end_sequence(const std::string& seq, std::chrono::milliseconds deadline = std::chrono::milliseconds(0));
  /// Whether the last call failed in transport (the next call asks Info first).
  bool suspect() const { return suspect_.load(); }
  /// The standard health check (grpc.health.v1 Check of ""): true when SERVING within `deadline`
  /// (0: the client's timeout) and Info still describes the part connected to; false marks the
  /// shard suspect (the next call probes it first). Never throws.
  bool healthy(std::chrono::milliseconds deadline = std::chrono::milliseconds(0));

  struct Impl;

 private:
  /// Before a call: after a transport failure, Info again and compare (see the class comment).
  void reverify();
  /// After a failed call: remember a transport failure, then throw the status as an Error.
  [[noreturn]] void fail(const void* status, const char* call);

  std::unique_ptr<Impl> impl_;
  ShardInfo info_;
  std::atomic<bool> suspect_{false};
};

/// The shards holding one part (a layer range and expert range): one, or several replicas of the
/// same part (tried in turn).
using Replicas = std::vector<std::shared_ptr<ShardClient>>;
/// For each layer, the parts that together hold its FFN: one for a dense model or a shard holding
/// every expert; for expert shards, one per expert range, the ranges partitioning the experts.
using ShardMap = std::vector<std::vector<Replicas>>;

/// Dial every "host:port" of a comma-separated list (each once: a repeated one is refused) and
/// check that each serves the local model: its architecture, sizes and fingerprint equal the
/// local model's (a shard of another model file is refused, naming both fingerprints).
/// Errors: Error{InvalidArgument} for those and a malformed list; Error{BackendUnavailable} for a
/// shard that does not answer.
std::vector<std::shared_ptr<ShardClient>> dial_shards(const Model& local, const std::string& spec, const ClientTls& tls,
                                                     std::chrono::milliseconds timeout);

/// Dial every "host:port" of a comma-separated list and check the set against the local model:
/// each shard's architecture, sizes and fingerprint equal the local model's (a shard of another
/// model file is refused, naming both fingerprints), and every (layer, expert) of the FFN is held
/// by exactly one part: shards of the same layer and expert ranges are replicas of it; a gap, or
/// parts that overlap without being equal, is an error naming the layers, experts and shards.
/// Errors: Error{InvalidArgument} for those, Error{BackendUnavailable} for a shard that does not
/// answer (every shard must answer at start).
ShardMap connect_ffn_shards(const Model& local, const std::string& spec, const ClientTls& tls,
                            std::chrono::milliseconds timeout);

/// The FFN of one layer run on a shard that holds it: Ffn::run sends the rows (a prefill chunk, a
/// decode step or a batch of sequences at once) and copies the answer. Bit-identical to running
/// the layer's FFN locally (the shard runs the same kernels on the same rows; rows are
/// independent). When a replica fails in transport the next one is tried (then the failed one is
/// tried last until it answers again); when all fail, Error{BackendUnavailable} names each.
/// No mutable state beyond that preference, so one may serve many Forwards at once.
class RemoteFfn final : public Ffn {
 public:
  explicit RemoteFfn(Replicas replicas);
  void run(Forward& f, int64_t layer, const float* h, int64_t n, float* out) override;

 private:
  Replicas replicas_;
  std::atomic<size_t> first_{0};  ///< the replica tried first
};

/// A mixture-of-experts layer whose routed experts run on expert shards: the router, the weighted
/// sum and the shared expert run here (the local part holds them: ModelPart with an empty expert
/// range), each part's experts on its shards (Experts calls, replicas tried in turn). The stages
/// are MoeFfn's (inference/ffn.h moe_route, moe_expert_outputs, moe_combine), so rows are MoeFfn's
/// bit for bit. Errors: as RemoteFfn; Error{BackendFailure} when the shards' answers leave a
/// slot unfilled or fill one twice.
class RemoteMoeFfn final : public Ffn {
 public:
  explicit RemoteMoeFfn(std::vector<Replicas> parts);
  void run(Forward& f, int64_t layer, const float* h, int64_t n, float* out) override;

 private:
  std::vector<Replicas> parts_;
};

/// set_ffn on every layer of `f`: a RemoteFfn where one part holds the whole FFN, a RemoteMoeFfn
/// where expert shards share it (as connect_ffn_shards returns them).
void attach_remote_ffn(Forward& f, const ShardMap& by_layer);

/// Try `call` on each replica in turn, starting at `first` (updated to the one that answered);
/// a BackendUnavailable moves on, anything else is thrown. All failing: Error{BackendUnavailable}
/// naming `what` and each replica's error.
void with_replica(const Replicas& r, std::atomic<size_t>& first, const std::string& what,
                  const std::function<void(ShardClient&)>& call);

/// "remote:HOST:PORT[,HOST:PORT...]" -> "HOST:PORT[,...]"; "" when `spec` is not a remote spec.
std::string remote_ffn_addresses(const std::string& spec);

}  // namespace larql::shard
