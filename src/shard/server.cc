// The shard's gRPC server (shard/shard.h ShardServer; docs/sharding.md).
#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/health_check_service_interface.h>

#include <map>
#include <mutex>
#include <thread>

#include <larql/shard/v1/shard.grpc.pb.h>
#include "shard/shard.h"
#include "shard/tls.h"
#include "shard/walk_ffn.h"
#include "shard/wire.h"
#include "util/error.h"

namespace larql::shard {
namespace {

namespace pb = ::larql::shard::v1;
using Clock = std::chrono::steady_clock;

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

/// One pipeline sequence's K/V on this shard.
struct Sequence {
  std::mutex busy;
  KvCache cache;
  int64_t window = 0;
  bool sink = false;
  Clock::time_point last_used;
};

}  // namespace

struct ShardServer::Impl final : pb::Shard::Service {
  std::shared_ptr<const Model> model;
  std::shared_ptr<ThreadPool> pool;
  ServerOptions opt;
  std::unique_ptr<grpc::Server> server;
  int bound_port = 0;

  std::mutex forwards_mu;
  std::vector<std::unique_ptr<Forward>> idle_forwards;  ///< scratch reused across calls
  std::mutex seq_mu;
  std::map<std::string, std::shared_ptr<Sequence>> sequences;

  /// A Forward for one call, back to the free list when the lease ends.
  struct Lease {
    Impl* impl;
    std::unique_ptr<Forward> f;
    ~Lease() {
      f->set_layer_progress({});
      const std::lock_guard<std::mutex> lk(impl->forwards_mu);
      impl->idle_forwards.push_back(std::move(f));
    }
  };
  Lease lease(grpc::ServerContext* ctx) {
    std::unique_ptr<Forward> f;
    {
      const std::lock_guard<std::mutex> lk(forwards_mu);
      if (!idle_forwards.empty()) {
        f = std::move(idle_forwards.back());
        idle_forwards.pop_back();
      }
    }
    if (!f) f = std::make_unique<Forward>(model, pool);
    // A client that left (or whose deadline passed) stops the work at the next layer.
    f->set_layer_progress([ctx](int64_t) {
      if (ctx->IsCancelled()) throw Error(ErrorKind::Cancelled, "the client cancelled the call");
    });
    return Lease{this, std::move(f)};
  }

  std::string self;  ///< wire::identity of this shard

  /// ABORTED (as an Error kind the status maps to) unless `expect` is empty or this shard.
  void check_expect(const std::string& expect) const {
    if (expect.empty() || expect == self) return;
    throw Error(ErrorKind::Unsupported, "this shard serves " + self + ", not " + expect +
                                            " (restarted on another file or part?): refused");
  }

  void delay(grpc::ServerContext* ctx) const {
    const auto until = Clock::now() + std::chrono::milliseconds(opt.debug_delay_ms);
    while (Clock::now() < until && !ctx->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  template <class Fn>
  grpc::Status guarded(grpc::ServerContext* ctx, Fn&& fn) {
    try {
      if (opt.debug_delay_ms > 0) delay(ctx);
      if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
      fn();
      return grpc::Status::OK;
    } catch (const std::exception& e) {
      return wire::to_status(e);
    }
  }

  grpc::Status Info(grpc::ServerContext* ctx, const pb::InfoRequest*, pb::InfoReply* r) override {
    return guarded(ctx, [&] {
      const ModelConfig& c = model->config();
      const ModelPart& p = model->part();
      std::string name = model->path();
      while (!name.empty() && name.back() == '/') name.pop_back();
      r->set_model(name.substr(name.find_last_of('/') + 1));
      r->set_fingerprint(model->fingerprint());
      r->set_architecture(c.arch);
      r->set_n_layers(static_cast<uint32_t>(c.n_layers));
      r->set_hidden(static_cast<uint32_t>(c.hidden));
      r->set_layer_begin(static_cast<uint32_t>(p.layer_begin));
      r->set_layer_end(static_cast<uint32_t>(p.layer_end));
      r->set_n_experts(static_cast<uint32_t>(c.n_experts));
      r->set_expert_begin(static_cast<uint32_t>(p.expert_begin));
      r->set_expert_end(static_cast<uint32_t>(p.expert_end));
      r->set_attention(p.attention);
      r->set_ffn(p.ffn);
      r->set_version(LARQL_VERSION);
      r->set_max_rows(static_cast<uint32_t>(opt.max_rows));
    });
  }

  grpc::Status WalkFfn(grpc::ServerContext* ctx, const pb::WalkFfnRequest* q, pb::WalkFfnReply* r) override {
    return guarded(ctx, [&] {
      const ModelConfig& c = model->config();
      const int64_t layer = q->layer();
      check_expect(q->expect());  // a request for another shard is refused as such first
      Lease l = lease(ctx);
      check_walk_ffn_layer(*l.f, layer, "WalkFfn");  // before the rows: a layer not held is named first
      thread_local std::vector<float> h, out;
      const int64_t n = wire::decode_rows(q->rows(), c.hidden, opt.max_rows, "WalkFfn rows", h);
      out.resize(static_cast<size_t>(n * c.hidden));
      walk_ffn(*l.f, layer, h.data(), n, opt.max_rows, out.data());
      wire::encode_rows(out.data(), n, c.hidden, q->reply_dtype() == pb::BF16 ? pb::BF16 : pb::F32, r->mutable_rows());
    });
  }

  /// Drop sequences idle past the TTL, then the least recently used past max_sequences (never a
  /// busy one). seq_mu held.
  void evict_sequences() {
    const auto now = Clock::now();
    for (auto it = sequences.begin(); it != sequences.end();) {
      const bool idle = now - it->second->last_used > std::chrono::seconds(opt.sequence_ttl_s);
      it = idle && it->second.use_count() == 1 ? sequences.erase(it) : std::next(it);
    }
    while (static_cast<int64_t>(sequences.size()) > opt.max_sequences) {
      auto lru = sequences.end();
      for (auto it = sequences.begin(); it != sequences.end(); ++it)
        if (it->second.use_count() == 1 && (lru == sequences.end() || it->second->last_used < lru->second->last_used))
          lru = it;
      if (lru == sequences.end()) break;
      sequences.erase(lru);
    }
  }

  grpc::Status RunLayers(grpc::ServerContext* ctx, const pb::RunLayersRequest* q, pb::RunLayersReply* r) override {
    return guarded(ctx, [&] {
      const ModelConfig& c = model->config();
      check_expect(q->expect());
      const std::string& id = q->sequence_id();
      if (id.empty() || id.size() > 128)
        throw Error(ErrorKind::InvalidArgument, "RunLayers: sequence_id must be 1 to 128 bytes (got " +
                                                    std::to_string(id.size()) + ")");
      const int64_t begin = q->layer_begin(), end = q->layer_end();
      if (begin >= end || end > c.n_layers)
        throw Error(ErrorKind::InvalidArgument, "RunLayers: layers [" + std::to_string(begin) + ", " +
                                                    std::to_string(end) + ") are not a range of the model's " +
                                                    std::to_string(c.n_layers) + " layers");
      const int64_t window = q->window();
      if (window < 0 || window > c.context_length)
        throw Error(ErrorKind::InvalidArgument, "RunLayers: window " + std::to_string(window) + " is out of range");
      thread_local std::vector<float> x;
      const int64_t n = wire::decode_rows(q->rows(), c.hidden, opt.max_rows, "RunLayers rows", x);
      const uint64_t pos = q->position();
      if (pos + static_cast<uint64_t>(n) > static_cast<uint64_t>(c.context_length))
        throw Error(ErrorKind::ContextOverflow, "RunLayers: positions " + std::to_string(pos) + ".." +
                                                    std::to_string(pos + n - 1) + " pass the model's context of " +
                                                    std::to_string(c.context_length));
      std::shared_ptr<Sequence> s;
      {
        const std::lock_guard<std::mutex> lk(seq_mu);
        evict_sequences();
        auto it = sequences.find(id);
        if (pos == 0) {
          if (it != sequences.end() && it->second.use_count() > 1)
            throw Error(ErrorKind::InvariantViolation, "RunLayers: sequence " + id + " is busy with another call");
          s = std::make_shared<Sequence>();
          s->cache = KvCache(c, window, q->sink());
          s->window = window;
          s->sink = q->sink();
          sequences[id] = s;
        } else {
          if (it == sequences.end())
            throw Error(ErrorKind::InvariantViolation, "RunLayers: sequence " + id +
                                                           " is not held here (never started, ended or expired); start it "
                                                           "again at position 0");
          s = it->second;
        }
        s->last_used = Clock::now();
      }
      std::unique_lock<std::mutex> busy(s->busy, std::try_to_lock);
      if (!busy.owns_lock())
        throw Error(ErrorKind::InvariantViolation, "RunLayers: sequence " + id + " is busy with another call");
      if (pos != 0 && (s->window != window || s->sink != q->sink()))
        throw Error(ErrorKind::InvalidArgument, "RunLayers: sequence " + id + " was started with window " +
                                                    std::to_string(s->window) + (s->sink ? " and a sink" : "") +
                                                    "; a call may not change it");
      const int64_t have = s->cache.layer(begin).end_pos();
      if (static_cast<int64_t>(pos) > have)
        throw Error(ErrorKind::InvariantViolation, "RunLayers: sequence " + id + " holds positions up to " +
                                                       std::to_string(have) + " here; the call starts at " +
                                                       std::to_string(pos));
      if (static_cast<int64_t>(pos) < have)  // a rewind: drop what follows
        for (int64_t li = 0; li < c.n_layers; ++li) s->cache.layer(li).truncate(static_cast<int64_t>(pos));
      Lease l = lease(ctx);
      try {
        l.f->run_layers(begin, end, x.data(), n, s->cache);
      } catch (...) {
        // Part of the rows may be in some layers' K/V: the sequence is no longer usable.
        const std::lock_guard<std::mutex> lk(seq_mu);
        busy.unlock();
        if (auto it = sequences.find(id); it != sequences.end() && it->second == s) sequences.erase(it);
        throw;
      }
      r->set_n_past(static_cast<uint64_t>(s->cache.layer(begin).end_pos()));
      wire::encode_rows(x.data(), n, c.hidden, pb::F32, r->mutable_rows());
    });
  }

  grpc::Status Experts(grpc::ServerContext* ctx, const pb::ExpertsRequest* q, pb::ExpertsReply* r) override {
    return guarded(ctx, [&] {
      const ModelConfig& c = model->config();
      const int64_t layer = q->layer();
      check_expect(q->expect());
      if (c.n_experts == 0) throw Error(ErrorKind::InvalidArgument, "Experts: this model is not a mixture of experts");
      if (layer >= c.n_layers)
        throw Error(ErrorKind::InvalidArgument, "Experts: layer " + std::to_string(layer) + " is past the model's " +
                                                    std::to_string(c.n_layers) + " layers");
      require_ffn_weights(*model, layer);
      const int64_t k = q->k();
      if (k < 1 || k > c.n_experts)
        throw Error(ErrorKind::InvalidArgument, "Experts: k = " + std::to_string(k) + "; the model has " +
                                                    std::to_string(c.n_experts) + " experts");
      thread_local std::vector<float> h, y, held;
      const int64_t n = wire::decode_rows(q->rows(), c.hidden, opt.max_rows, "Experts rows", h);
      if (q->experts_size() != n * k)
        throw Error(ErrorKind::InvalidArgument, "Experts: " + std::to_string(q->experts_size()) + " expert ids for " +
                                                    std::to_string(n) + " rows of " + std::to_string(k));
      std::vector<int32_t> chosen(static_cast<size_t>(n * k));
      for (int64_t s = 0; s < n * k; ++s) {
        const uint32_t e = q->experts(static_cast<int>(s));
        if (e >= static_cast<uint32_t>(c.n_experts))
          throw Error(ErrorKind::InvalidArgument, "Experts: expert " + std::to_string(e) + " is not one of the model's " +
                                                      std::to_string(c.n_experts));
        chosen[static_cast<size_t>(s)] = static_cast<int32_t>(e);
      }
      y.resize(static_cast<size_t>(n * k * c.hidden));
      Lease l = lease(ctx);
      moe_expert_outputs(*l.f, layer, h.data(), n, k, chosen.data(), y.data(), /*held_only=*/true);
      held.clear();
      const ModelPart& p = model->part();
      for (int64_t s = 0; s < n * k; ++s) {
        if (!p.has_expert(chosen[static_cast<size_t>(s)])) continue;
        r->add_slots(static_cast<uint32_t>(s));
        held.insert(held.end(), y.begin() + s * c.hidden, y.begin() + (s + 1) * c.hidden);
      }
      const int64_t m = r->slots_size();
      if (m > 0)
        wire::encode_rows(held.data(), m, c.hidden, q->reply_dtype() == pb::BF16 ? pb::BF16 : pb::F32, r->mutable_rows());
      else
        r->mutable_rows()->set_width(static_cast<uint32_t>(c.hidden));
    });
  }

  grpc::Status EndSequence(grpc::ServerContext* ctx, const pb::EndSequenceRequest* q, pb::EndSequenceReply* r) override {
    return guarded(ctx, [&] {
      const std::lock_guard<std::mutex> lk(seq_mu);
      r->set_existed(sequences.erase(q->sequence_id()) > 0);
    });
  }
};

ShardServer::ShardServer(std::shared_ptr<const Model> model, std::shared_ptr<ThreadPool> pool, const ServerOptions& opt)
    : impl_(std::make_unique<Impl>()) {
  if (model == nullptr || pool == nullptr) throw Error(ErrorKind::InvalidArgument, "ShardServer: no model or pool");
  impl_->model = std::move(model);
  impl_->pool = std::move(pool);
  impl_->opt = opt;
  {
    const ModelPart& p = impl_->model->part();
    impl_->self = wire::identity(impl_->model->fingerprint(), p.layer_begin, p.layer_end, p.expert_begin, p.expert_end,
                                 p.attention, p.ffn);
  }
  if (opt.max_rows < 1 || opt.max_rows > (1 << 20))
    throw Error(ErrorKind::InvalidArgument, "max rows per call must be 1 to 1048576");
  if (opt.max_sequences < 1) throw Error(ErrorKind::InvalidArgument, "max sequences must be at least 1");
  if (opt.tls_cert.empty() != opt.tls_key.empty())
    throw Error(ErrorKind::InvalidArgument, "give the shard's TLS certificate and key together");
  const bool tls = !opt.tls_cert.empty();
  if (!opt.client_ca.empty() && !tls)
    throw Error(ErrorKind::InvalidArgument, "a client CA (mTLS) needs the shard's own TLS certificate and key");
  if (!tls && !is_loopback(opt.host) && !opt.insecure)
    throw Error(ErrorKind::InvalidArgument, "the shard would listen on " + opt.host +
                                                " without TLS: give a certificate and key (and a client CA), or allow "
                                                "plaintext explicitly (--grpc-insecure)");
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (tls) {
    grpc::SslServerCredentialsOptions so(opt.client_ca.empty()
                                             ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                             : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    if (!opt.client_ca.empty()) so.pem_root_certs = tls::read_certificates(opt.client_ca, "the client CA");
    const std::string cert = tls::read_certificates(opt.tls_cert, "the TLS certificate");
    const std::string key = tls::read_private_key(opt.tls_key, "the TLS key");
    tls::check_key_pair(cert, key, opt.tls_cert, opt.tls_key);
    so.pem_key_cert_pairs.push_back({key, cert});
    creds = grpc::SslServerCredentials(so);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder b;
  const std::string host = opt.host.find(':') != std::string::npos && opt.host.front() != '[' ? "[" + opt.host + "]" : opt.host;
  const std::string addr = host + ":" + std::to_string(opt.port);
  b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a second shard on a port in use is an error, not a twin
  b.AddListeningPort(addr, creds, &impl_->bound_port);
  b.RegisterService(impl_.get());
  // The largest message: an Experts reply of every row's k experts.
  const int bytes = wire::max_message_bytes(opt.max_rows * std::max<int64_t>(1, impl_->model->config().n_experts_used),
                                            impl_->model->config().hidden);
  b.SetMaxReceiveMessageSize(bytes);
  b.SetMaxSendMessageSize(bytes);
  impl_->server = b.BuildAndStart();
  if (!impl_->server || impl_->bound_port == 0)
    throw Error(ErrorKind::Io, "the shard cannot listen on " + addr + " (in use, or not an address of this machine)");
  if (auto* h = impl_->server->GetHealthCheckService()) {
    h->SetServingStatus(true);
    h->SetServingStatus("larql.shard.v1.Shard", true);
  }
}

ShardServer::~ShardServer() {
  if (impl_ && impl_->server) impl_->server->Shutdown(std::chrono::system_clock::now());
}

int ShardServer::port() const { return impl_->bound_port; }

void ShardServer::wait() { impl_->server->Wait(); }

void ShardServer::shutdown(std::chrono::milliseconds grace) {
  if (auto* h = impl_->server->GetHealthCheckService()) h->SetServingStatus(false);
  impl_->server->Shutdown(std::chrono::system_clock::now() + grace);
}

}  // namespace larql::shard
