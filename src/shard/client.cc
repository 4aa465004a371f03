// The client side of a split model (shard/shard.h): ShardClient, RemoteFfn and the checks that a
// set of shards makes one model with the local part.
#include <algorithm>

#include <grpc/health/v1/health.grpc.pb.h>
#include <larql/shard/v1/shard.grpc.pb.h>
#include "shard/shard.h"
#include "shard/tls.h"
#include "shard/wire.h"
#include "util/error.h"

namespace larql::shard {
namespace {

namespace pb = ::larql::shard::v1;
namespace hpb = ::grpc::health::v1;

std::string range(int64_t b, int64_t e) { return b + 1 == e ? std::to_string(b) : std::to_string(b) + "-" + std::to_string(e - 1); }

}  // namespace

std::string ShardInfo::describe() const {
  std::string s = address + " (layers " + range(layer_begin, layer_end);
  if (n_experts > 0 && (expert_begin != 0 || expert_end != n_experts)) s += ", experts " + range(expert_begin, expert_end);
  return s + ")";
}

struct ShardClient::Impl {
  std::string address;
  std::chrono::milliseconds timeout;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::Shard::Stub> stub;
  std::unique_ptr<hpb::Health::Stub> health;
  std::string who;     ///< for messages: the address, then ShardInfo::describe()
  std::string expect;  ///< wire::identity of the shard as Info described it at connect

  void prepare(grpc::ClientContext& ctx) const { ctx.set_deadline(std::chrono::system_clock::now() + timeout); }
};

ShardClient::ShardClient(const std::string& address, const ClientTls& tls, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  const size_t colon = address.rfind(':');
  if (address.empty() || colon == std::string::npos || colon == 0 || colon + 1 == address.size() ||
      address.size() - colon > 6 || address.find_first_not_of("0123456789", colon + 1) != std::string::npos ||
      std::stol(address.substr(colon + 1)) < 1 || std::stol(address.substr(colon + 1)) > 65535)
    throw Error(ErrorKind::InvalidArgument, "shard address \"" + address + "\": expected HOST:PORT with a port of 1 to 65535");
  if (timeout.count() <= 0) throw Error(ErrorKind::InvalidArgument, "the shard timeout must be positive");
  impl_->address = address;
  impl_->who = address;
  impl_->timeout = timeout;
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!tls.ca.empty()) {
    grpc::SslCredentialsOptions so;
    so.pem_root_certs = tls::read_certificates(tls.ca, "the shard CA");
    if (tls.cert.empty() != tls.key.empty())
      throw Error(ErrorKind::InvalidArgument, "give the client certificate and key together");
    if (!tls.cert.empty()) {
      so.pem_cert_chain = tls::read_certificates(tls.cert, "the client certificate");
      so.pem_private_key = tls::read_private_key(tls.key, "the client key");
      tls::check_key_pair(so.pem_cert_chain, so.pem_private_key, tls.cert, tls.key);
    }
    creds = grpc::SslCredentials(so);
  } else {
    if (!tls.cert.empty() || !tls.key.empty())
      throw Error(ErrorKind::InvalidArgument, "a client certificate needs the shard CA too (TLS)");
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // bounded by what we ask for; the shard bounds what it accepts
  args.SetMaxSendMessageSize(-1);
  if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  // A shard that restarts is dialled again within a quarter second, then at most every 2 s.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 250);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  impl_->channel = grpc::CreateCustomChannel(address, creds, args);
  impl_->stub = pb::Shard::NewStub(impl_->channel);
  impl_->health = hpb::Health::NewStub(impl_->channel);

  grpc::ClientContext ctx;
  impl_->prepare(ctx);
  pb::InfoReply r;
  const grpc::Status s = impl_->stub->Info(&ctx, pb::InfoRequest{}, &r);
  if (!s.ok()) wire::throw_status(s, address, "Info");
  info_.address = address;
  info_.model = r.model();
  info_.fingerprint = r.fingerprint();
  info_.architecture = r.architecture();
  info_.version = r.version();
  info_.n_layers = r.n_layers();
  info_.hidden = r.hidden();
  info_.layer_begin = r.layer_begin();
  info_.layer_end = r.layer_end();
  info_.n_experts = r.n_experts();
  info_.expert_begin = r.expert_begin();
  info_.expert_end = r.expert_end();
  info_.attention = r.attention();
  info_.ffn = r.ffn();
  info_.max_rows = r.max_rows();
  if (info_.hidden <= 0 || info_.n_layers <= 0 || info_.layer_begin >= info_.layer_end || info_.layer_end > info_.n_layers ||
      info_.max_rows <= 0)
    throw Error(ErrorKind::BackendFailure, "shard " + address + ": Info answered an impossible part (layers " +
                                               std::to_string(info_.layer_begin) + ".." + std::to_string(info_.layer_end) +
                                               " of " + std::to_string(info_.n_layers) + ")");
  impl_->who = info_.describe();
  impl_->expect = wire::identity(info_.fingerprint, info_.layer_begin, info_.layer_end, info_.expert_begin,
                                 info_.expert_end, info_.attention, info_.ffn);
}

ShardClient::~ShardClient() = default;

void ShardClient::fail(const void* status, const char* call) {
  const auto& s = *static_cast<const grpc::Status*>(status);
  const auto code = s.error_code();
  if (code != grpc::StatusCode::INVALID_ARGUMENT && code != grpc::StatusCode::OUT_OF_RANGE &&
      code != grpc::StatusCode::FAILED_PRECONDITION)
    suspect_ = true;
  wire::throw_status(s, impl_->who, call);
}

void ShardClient::reverify() {
  if (!suspect_.load()) return;
  // A shard that failed (a call, or a health check) is probed with a short deadline: a request made
  // while it is known down fails in about a second, not after the whole call deadline.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::min(impl_->timeout, kProbeDeadline));
  pb::InfoReply r;
  const grpc::Status s = impl_->stub->Info(&ctx, pb::InfoRequest{}, &r);
  if (!s.ok()) wire::throw_status(s, impl_->who, "Info");
  if (r.fingerprint() != info_.fingerprint || static_cast<int64_t>(r.layer_begin()) != info_.layer_begin ||
      static_cast<int64_t>(r.layer_end()) != info_.layer_end || static_cast<int64_t>(r.expert_begin()) != info_.expert_begin ||
      static_cast<int64_t>(r.expert_end()) != info_.expert_end || r.ffn() != info_.ffn)
    throw Error(ErrorKind::BackendUnavailable,
                "shard " + impl_->who + " came back serving something else: " + r.model() + " layers " +
                    range(r.layer_begin(), r.layer_end()) + " (fingerprint " + r.fingerprint() + "); refused");
  suspect_ = false;
}

void ShardClient::walk_ffn(int64_t layer, const float* h, int64_t n, float* out) {
  reverify();
  const int64_t H = info_.hidden;
  for (int64_t off = 0; off < n; off += info_.max_rows) {  // a long prefill chunk in pieces the shard takes
    const int64_t m = std::min(info_.max_rows, n - off);
    pb::WalkFfnRequest q;
    q.set_layer(static_cast<uint32_t>(layer));
    q.set_reply_dtype(pb::F32);
    q.set_expect(impl_->expect);
    wire::encode_rows(h + off * H, m, H, pb::F32, q.mutable_rows());
    grpc::ClientContext ctx;
    impl_->prepare(ctx);
    pb::WalkFfnReply r;
    const grpc::Status s = impl_->stub->WalkFfn(&ctx, q, &r);
    if (!s.ok()) fail(&s, "WalkFfn");
    thread_local std::vector<float> rows;
    if (wire::decode_rows(r.rows(), H, m, "WalkFfn reply", rows) != m)
      throw Error(ErrorKind::BackendFailure, "shard " + impl_->who + ": WalkFfn answered a different number of rows");
    std::copy(rows.begin(), rows.end(), out + off * H);
  }
}

void ShardClient::experts(int64_t layer, const float* h, int64_t n, int64_t k, const int32_t* chosen, float* y,
                          uint8_t* filled) {
  reverify();
  const int64_t H = info_.hidden;
  for (int64_t off = 0; off < n; off += info_.max_rows) {
    const int64_t m = std::min(info_.max_rows, n - off);
    pb::ExpertsRequest q;
    q.set_layer(static_cast<uint32_t>(layer));
    q.set_k(static_cast<uint32_t>(k));
    q.set_reply_dtype(pb::F32);
    q.set_expect(impl_->expect);
    wire::encode_rows(h + off * H, m, H, pb::F32, q.mutable_rows());
    for (int64_t s = off * k; s < (off + m) * k; ++s) q.add_experts(static_cast<uint32_t>(chosen[s]));
    grpc::ClientContext ctx;
    impl_->prepare(ctx);
    pb::ExpertsReply r;
    const grpc::Status st = impl_->stub->Experts(&ctx, q, &r);
    if (!st.ok()) fail(&st, "Experts");
    const int64_t got = r.slots_size();
    if (got == 0) continue;
    thread_local std::vector<float> rows;
    if (wire::decode_rows(r.rows(), H, m * k, "Experts reply", rows) != got)
      throw Error(ErrorKind::BackendFailure, "shard " + impl_->who + ": Experts answered rows for a different number of slots");
    for (int64_t i = 0; i < got; ++i) {
      const int64_t slot = r.slots(static_cast<int>(i));
      if (slot < 0 || slot >= m * k)
        throw Error(ErrorKind::BackendFailure, "shard " + impl_->who + ": Experts answered slot " + std::to_string(slot) +
                                                   " of " + std::to_string(m * k));
      std::copy_n(rows.begin() + i * H, H, y + (off * k + slot) * H);
      filled[off * k + slot] = 1;
    }
  }
}

int64_t ShardClient::run_layers(const std::string& seq, int64_t begin, int64_t end, int64_t position, float* x, int64_t n,
                                int64_t window, bool sink) {
  reverify();
  const int64_t H = info_.hidden;
  int64_t n_past = position;
  for (int64_t off = 0; off < n; off += info_.max_rows) {
    const int64_t m = std::min(info_.max_rows, n - off);
    pb::RunLayersRequest q;
    q.set_sequence_id(seq);
    q.set_expect(impl_->expect);
    q.set_layer_begin(static_cast<uint32_t>(begin));
    q.set_layer_end(static_cast<uint32_t>(end));
    q.set_position(static_cast<uint64_t>(position + off));
    q.set_window(static_cast<uint32_t>(window));
    q.set_sink(sink);
    wire::encode_rows(x + off * H, m, H, pb::F32, q.mutable_rows());
    grpc::ClientContext ctx;
    impl_->prepare(ctx);
    pb::RunLayersReply r;
    const grpc::Status s = impl_->stub->RunLayers(&ctx, q, &r);
    if (!s.ok()) fail(&s, "RunLayers");
    thread_local std::vector<float> rows;
    if (wire::decode_rows(r.rows(), H, m, "RunLayers reply", rows) != m)
      throw Error(ErrorKind::BackendFailure, "shard " + impl_->who + ": RunLayers answered a different number of rows");
    std::copy(rows.begin(), rows.end(), x + off * H);
    n_past = static_cast<int64_t>(r.n_past());
  }
  return n_past;
}

bool ShardClient::end_sequence(const std::string& seq, std::chrono::milliseconds deadline) {
  pb::EndSequenceRequest q;
  q.set_sequence_id(seq);
  grpc::ClientContext ctx;
  if (deadline.count() > 0)
    ctx.set_deadline(std::chrono::system_clock::now() + std::min(deadline, impl_->timeout));
  else
    impl_->prepare(ctx);
  pb::EndSequenceReply r;
  const grpc::Status s = impl_->stub->EndSequence(&ctx, q, &r);
  if (!s.ok()) fail(&s, "EndSequence");
  return r.existed();
}

bool ShardClient::healthy(std::chrono::milliseconds deadline) {
  grpc::ClientContext ctx;
  if (deadline.count() > 0)
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  else
    impl_->prepare(ctx);
  hpb::HealthCheckRequest q;
  hpb::HealthCheckResponse r;
  const grpc::Status s = impl_->health->Check(&ctx, q, &r);
  // Down (or serving something else): the next call probes it briefly first (reverify).
  auto down = [this] {
    suspect_ = true;
    return false;
  };
  if (!s.ok() || r.status() != hpb::HealthCheckResponse::SERVING) return down();
  // Serving, but serving what the client connected to? (a shard restarted on another file is down)
  grpc::ClientContext ic;
  ic.set_deadline(ctx.deadline());
  pb::InfoReply i;
  if (!impl_->stub->Info(&ic, pb::InfoRequest{}, &i).ok()) return down();
  if (wire::identity(i.fingerprint(), i.layer_begin(), i.layer_end(), i.expert_begin(), i.expert_end(), i.attention(),
                     i.ffn()) != impl_->expect)
    return down();
  return true;
}

std::vector<std::shared_ptr<ShardClient>> dial_shards(const Model& local, const std::string& spec, const ClientTls& tls,
                                                     std::chrono::milliseconds timeout) {
  const ModelConfig& c = local.config();
  std::vector<std::string> addrs;
  for (size_t p = 0; p <= spec.size();) {
    const size_t q = std::min(spec.find(',', p), spec.size());
    if (q == p) throw Error(ErrorKind::InvalidArgument, "shard list \"" + spec + "\": an empty entry");
    addrs.push_back(spec.substr(p, q - p));
    p = q + 1;
  }
  if (addrs.empty()) throw Error(ErrorKind::InvalidArgument, "no shard addresses in \"" + spec + "\"");
  std::vector<std::shared_ptr<ShardClient>> shards;
  for (const auto& a : addrs) {
    for (const auto& s : shards)
      if (s->info().address == a) throw Error(ErrorKind::InvalidArgument, "shard " + a + " is listed twice");
    auto s = std::make_shared<ShardClient>(a, tls, timeout);
    const ShardInfo& i = s->info();
    if (i.fingerprint != local.fingerprint() || i.n_layers != c.n_layers || i.hidden != c.hidden ||
        i.architecture != c.arch || i.n_experts != c.n_experts)
      throw Error(ErrorKind::InvalidArgument,
                  "shard " + i.describe() + " serves another model: " + i.model + " (" + i.architecture + ", " +
                      std::to_string(i.n_layers) + " layers, fingerprint " + i.fingerprint + "), but this one is " +
                      local.path() + " (" + c.arch + ", " + std::to_string(c.n_layers) + " layers, fingerprint " +
                      local.fingerprint() + ")");
    shards.push_back(std::move(s));
  }
  return shards;
}

ShardMap connect_ffn_shards(const Model& local, const std::string& spec, const ClientTls& tls,
                            std::chrono::milliseconds timeout) {
  const ModelConfig& c = local.config();
  const int64_t E = c.n_experts;
  const std::vector<std::shared_ptr<ShardClient>> shards = dial_shards(local, spec, tls, timeout);
  ShardMap by_layer(static_cast<size_t>(c.n_layers));
  for (const auto& s : shards) {
    const ShardInfo& i = s->info();
    if (!i.ffn) throw Error(ErrorKind::InvalidArgument, "shard " + i.describe() + " holds no FFN weights");
    if (E > 0 && i.expert_begin >= i.expert_end)
      throw Error(ErrorKind::InvalidArgument, "shard " + i.describe() + " holds no experts");
    for (int64_t li = i.layer_begin; li < i.layer_end; ++li) {
      auto& parts = by_layer[static_cast<size_t>(li)];
      bool placed = false;
      for (auto& part : parts) {
        const ShardInfo& o = part[0]->info();
        const bool same = o.layer_begin == i.layer_begin && o.layer_end == i.layer_end &&
                          o.expert_begin == i.expert_begin && o.expert_end == i.expert_end;
        const bool overlap = E == 0 || (i.expert_begin < o.expert_end && o.expert_begin < i.expert_end);
        if (same) {
          part.push_back(s);  // a replica
          placed = true;
          break;
        }
        if (overlap)
          throw Error(ErrorKind::InvalidArgument,
                      "layer " + std::to_string(li) + (E > 0 ? " and its experts" : "") + " are held by shards of different parts: " +
                          o.describe() + " and " + i.describe() + " (replicas must hold the same part)");
      }
      if (!placed) parts.push_back(Replicas{s});
    }
  }
  std::string missing;
  for (int64_t li = 0; li < c.n_layers; ++li) {
    auto& parts = by_layer[static_cast<size_t>(li)];
    int64_t covered = 0;
    for (const auto& part : parts) covered += E > 0 ? part[0]->info().expert_end - part[0]->info().expert_begin : 1;
    if (covered != (E > 0 ? E : 1))
      missing += (missing.empty() ? "" : ", ") + std::to_string(li) +
                 (parts.empty() || E == 0 ? "" : " (" + std::to_string(E - covered) + " experts)");
    std::sort(parts.begin(), parts.end(),
              [](const Replicas& x, const Replicas& y) { return x[0]->info().expert_begin < y[0]->info().expert_begin; });
  }
  if (!missing.empty()) {
    std::string held;
    for (const auto& sh : shards) held += (held.empty() ? "" : ", ") + sh->info().describe();
    throw Error(ErrorKind::InvalidArgument, "no shard holds the FFN of layer(s) " + missing + " (the shards: " + held + ")");
  }
  return by_layer;
}

void with_replica(const Replicas& r, std::atomic<size_t>& first_pref, const std::string& what,
                  const std::function<void(ShardClient&)>& call) {
  if (r.empty()) throw Error(ErrorKind::InvalidArgument, "no shard for " + what);
  const size_t k = r.size(), first = first_pref.load() % k;
  std::string errors;
  for (size_t t = 0; t < k; ++t) {
    const size_t i = (first + t) % k;
    try {
      call(*r[i]);
      if (i != first) first_pref.store(i);  // prefer the one that answered
      return;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::BackendUnavailable || k == 1) throw;
      errors += std::string(errors.empty() ? "" : "; ") + e.what();
    }
  }
  throw Error(ErrorKind::BackendUnavailable, "every replica of " + what + " failed: " + errors);
}

RemoteFfn::RemoteFfn(Replicas replicas) : replicas_(std::move(replicas)) {
  if (replicas_.empty()) throw Error(ErrorKind::InvalidArgument, "RemoteFfn: no shard");
}

void RemoteFfn::run(Forward& f, int64_t layer, const float* h, int64_t n, float* out) {
  (void)f;
  with_replica(replicas_, first_, "layer " + std::to_string(layer),
               [&](ShardClient& c) { c.walk_ffn(layer, h, n, out); });
}

RemoteMoeFfn::RemoteMoeFfn(std::vector<Replicas> parts) : parts_(std::move(parts)) {
  if (parts_.empty()) throw Error(ErrorKind::InvalidArgument, "RemoteMoeFfn: no shard");
}

void RemoteMoeFfn::run(Forward& f, int64_t layer, const float* h, int64_t n, float* out) {
  const ModelConfig& c = f.config();
  const int64_t H = c.hidden, K = c.n_experts_used;
  thread_local std::vector<int32_t> chosen;
  thread_local std::vector<float> weights, y;
  thread_local std::vector<uint8_t> filled;
  chosen.resize(static_cast<size_t>(n * K));
  weights.resize(static_cast<size_t>(n * K));
  y.assign(static_cast<size_t>(n * K * H), 0.0f);
  moe_route(f, layer, h, n, chosen.data(), weights.data());
  std::vector<uint8_t> total(static_cast<size_t>(n * K), 0);
  for (const Replicas& part : parts_) {
    // Preference is per call here (RemoteMoeFfn keeps no state): the first replica that answers.
    std::atomic<size_t> first{0};
    with_replica(part, first, "layer " + std::to_string(layer) + " experts " + part[0]->info().describe(), [&](ShardClient& s) {
      filled.assign(static_cast<size_t>(n * K), 0);
      s.experts(layer, h, n, K, chosen.data(), y.data(), filled.data());
    });
    for (size_t i = 0; i < total.size(); ++i) total[i] = static_cast<uint8_t>(total[i] + filled[i]);
  }
  for (size_t i = 0; i < total.size(); ++i)
    if (total[i] != 1)
      throw Error(ErrorKind::BackendFailure, "layer " + std::to_string(layer) + ": expert " + std::to_string(chosen[i]) +
                                                 " of row " + std::to_string(i / static_cast<size_t>(K)) + " came back from " +
                                                 std::to_string(total[i]) + " shards (expected exactly one)");
  moe_combine(f, layer, h, n, weights.data(), y.data(), out);
}

void attach_remote_ffn(Forward& f, const ShardMap& by_layer) {
  if (static_cast<int64_t>(by_layer.size()) != f.config().n_layers)
    throw Error(ErrorKind::InvalidArgument, "attach_remote_ffn: one entry per layer expected");
  std::vector<std::pair<const ShardClient*, std::shared_ptr<Ffn>>> made;  // one Ffn per part (or set of parts)
  for (int64_t li = 0; li < f.config().n_layers; ++li) {
    const auto& parts = by_layer[static_cast<size_t>(li)];
    const ShardClient* key = parts.at(0).at(0).get();
    auto it = std::find_if(made.begin(), made.end(), [key](const auto& p) { return p.first == key; });
    if (it == made.end()) {
      std::shared_ptr<Ffn> ffn;
      if (parts.size() == 1)
        ffn = std::make_shared<RemoteFfn>(parts[0]);
      else
        ffn = std::make_shared<RemoteMoeFfn>(parts);
      made.emplace_back(key, std::move(ffn));
      it = std::prev(made.end());
    }
    f.set_ffn(li, it->second);
  }
}

std::string remote_ffn_addresses(const std::string& spec) {
  static const std::string kPrefix = "remote:";
  return spec.rfind(kPrefix, 0) == 0 ? spec.substr(kPrefix.size()) : "";
}

}  // namespace larql::shard
