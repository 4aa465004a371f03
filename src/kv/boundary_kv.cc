#include "kv/boundary_kv.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <random>

#include "compute/logits.h"
#include "kv/standard.h"
#include "kv/state_file.h"
#include "util/error.h"

namespace larql {
namespace {

std::string archive_dir_for(const BoundaryKvOptions& o) { return o.archive_dir.empty() ? "./larql-archive" : o.archive_dir; }

uint64_t random_u64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

std::string fresh_sequence_id() {
  char buf[32];
  std::snprintf(buf, sizeof buf, "seq-%016llx", static_cast<unsigned long long>(random_u64()));
  return buf;
}

void check_sequence_id(const std::string& id) {
  const bool ok = !id.empty() && id != "." && id != ".." &&
                  std::all_of(id.begin(), id.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
                  });
  if (!ok)
    throw Error(ErrorKind::InvalidArgument, "boundary-kv: sequence_id '" + id +
                                                "' is not a plain file name (accepted: letters, digits, '.', '_', '-')");
}

void check_options(const BoundaryKvOptions& o) {
  if (o.chunk_tokens <= 0)
    throw Error(ErrorKind::InvalidArgument, "boundary-kv: chunk_tokens must be positive, got " + std::to_string(o.chunk_tokens));
  if (!o.sequence_id.empty()) check_sequence_id(o.sequence_id);
}

}  // namespace

BoundaryKvEngine::BoundaryKvEngine(std::shared_ptr<Forward> forward, BoundaryKvOptions opts)
    : fwd_(std::move(forward)), opts_(std::move(opts)) {
  check_options(opts_);
  check_engine_window("boundary-kv", opts_.window, fwd_->config());
  cache_ = KvCache(fwd_->config(), opts_.window, true);
  set_sequence(opts_.sequence_id);
}

void BoundaryKvEngine::set_sequence(const std::string& id) {
  seq_id_ = id;
  archive_path_ = id.empty() ? "" : (std::filesystem::path(archive_dir_for(opts_)) / id).string();
}

void BoundaryKvEngine::emit(boundary::FrameKind kind, const float* residual) {
  const ModelConfig& c = fwd_->config();
  std::vector<float> lg(static_cast<size_t>(c.vocab));
  fwd_->logits(residual, 1, lg.data());
  const boundary::Confidence conf = boundary::confidence_of(lg.data(), c.vocab);
  bool agrees = false;
  const bool confident = conf.top1_prob >= opts_.gate.min_top1_prob && conf.log_prob_margin >= opts_.gate.min_log_prob_margin;
  if (confident && opts_.gate.require_agreement) {  // only pay the second lm_head pass when it matters
    const auto p = boundary::encode(boundary::Codec::Int8Clip3Sigma, residual, c.hidden);
    std::vector<float> hat(static_cast<size_t>(c.hidden));
    boundary::decode(boundary::Codec::Int8Clip3Sigma, p.data(), p.size(), c.hidden, hat.data());
    fwd_->logits(hat.data(), 1, lg.data());
    agrees = compute::argmax(lg.data(), c.vocab) == conf.top1_token;
  }
  boundary::Frame f;
  f.kind = kind;
  f.token_start = static_cast<uint64_t>(pending_start_);
  f.tokens = pending_;
  f.position = f.token_start + f.tokens.size() - 1;
  f.codec = boundary::choose_codec(conf, opts_.gate, agrees);
  f.log_prob_margin = conf.log_prob_margin;
  f.top1_prob = conf.top1_prob;
  f.top1_token = conf.top1_token;
  f.payload = boundary::encode(f.codec, residual, c.hidden);
  boundary::archive_append(archive_path_, f);
  ++stats_.frames;
  ++(f.codec == boundary::Codec::Bf16 ? stats_.bf16_frames : stats_.int8_frames);
  stats_.payload_bytes += f.payload.size();
  pending_start_ = static_cast<int64_t>(f.position) + 1;
  pending_.clear();
}

std::vector<float> BoundaryKvEngine::run(const int32_t* tokens, int64_t n) {
  const ModelConfig& c = fwd_->config();
  const int64_t pos0 = cache_.n_past();
  check_context(pos0 + n, c);
  std::vector<float> x(static_cast<size_t>(n * c.hidden));
  fwd_->forward(tokens, n, cache_, x.data());
  for (int64_t i = 0; i < n; ++i) {
    pending_.push_back(tokens[i]);
    if ((pos0 + i + 1) % opts_.chunk_tokens == 0) emit(boundary::FrameKind::Boundary, x.data() + i * c.hidden);
  }
  last_hidden_.assign(x.end() - c.hidden, x.end());
  return last_hidden_;
}

std::vector<float> BoundaryKvEngine::prefill(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) throw Error(ErrorKind::EmptyPrompt, "prefill: the prompt has no tokens");
  cache_.clear();
  started_ = false;
  pending_.clear();
  pending_start_ = 0;
  set_sequence(opts_.sequence_id.empty() ? fresh_sequence_id() : opts_.sequence_id);
  archive_uid_ = random_u64();
  boundary::archive_create(archive_path_, {fwd_->model().fingerprint(), seq_id_, archive_uid_,
                                           static_cast<uint32_t>(fwd_->config().hidden)});
  auto out = run(tokens.data(), static_cast<int64_t>(tokens.size()));
  started_ = true;
  return out;
}

std::vector<float> BoundaryKvEngine::decode_step(int32_t token) {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "decode_step before prefill");
  return run(&token, 1);
}

void BoundaryKvEngine::flush() {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "boundary-kv: flush before prefill");
  if (!pending_.empty()) emit(boundary::FrameKind::Flush, last_hidden_.data());
}

std::unique_ptr<BoundaryKvEngine> BoundaryKvEngine::resume(std::shared_ptr<Forward> forward, BoundaryKvOptions opts) {
  if (opts.sequence_id.empty())
    throw Error(ErrorKind::InvalidArgument, "boundary-kv: resuming from an archive needs its sequence_id");
  auto e = std::make_unique<BoundaryKvEngine>(std::move(forward), std::move(opts));
  const ModelConfig& c = e->fwd_->config();
  const boundary::Archive a = boundary::archive_read(e->archive_path_);
  e->archive_uid_ = a.header.uid;
  if (a.header.fingerprint != e->fwd_->model().fingerprint())
    throw Error(ErrorKind::InvalidArgument, e->archive_path_ + ": archive was written with another model (fingerprint " +
                                                a.header.fingerprint + ", this model " + e->fwd_->model().fingerprint() + ")");
  if (a.header.hidden != static_cast<uint32_t>(c.hidden) || a.header.sequence_id != e->opts_.sequence_id)
    throw Error(ErrorKind::InvalidArgument, e->archive_path_ + ": archive is for sequence '" + a.header.sequence_id +
                                                "' at hidden " + std::to_string(a.header.hidden));
  const std::vector<int32_t> tokens = a.tokens();
  if (tokens.empty()) throw Error(ErrorKind::InvalidArgument, e->archive_path_ + ": archive has no frames to resume from");
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n > c.context_length)
    throw Error(ErrorKind::ContextOverflow, e->archive_path_ + ": " + std::to_string(n) + " archived tokens exceed the context length");
  // Replay: the archived tokens through the same forward pass (the archive is already written).
  std::vector<float> x(static_cast<size_t>(n * c.hidden));
  e->fwd_->forward(tokens.data(), n, e->cache_, x.data());
  for (size_t i = 0; i < a.frames.size(); ++i) {
    const boundary::Frame& f = a.frames[i];
    const auto again = boundary::encode(f.codec, x.data() + f.position * c.hidden, c.hidden);
    if (again != f.payload)
      throw Error(ErrorKind::InvariantViolation, e->archive_path_ + ": replay does not reproduce frame " + std::to_string(i) +
                                                     " (position " + std::to_string(f.position) + ")");
  }
  e->last_hidden_.assign(x.end() - c.hidden, x.end());
  e->pending_start_ = n;
  e->started_ = true;
  return e;
}

EngineInfo BoundaryKvEngine::info() const {
  std::string cfg = "chunk_tokens=" + std::to_string(opts_.chunk_tokens);
  if (!opts_.sequence_id.empty()) cfg += ",sequence_id=" + opts_.sequence_id;
  if (opts_.window > 0) cfg += ",window=" + std::to_string(opts_.window);
  return {"boundary-kv", "cpu", cfg};
}

EngineMemory BoundaryKvEngine::memory() const {
  return {cache_.bytes() + pending_.size() * sizeof(int32_t), 0, opts_.window};
}

void BoundaryKvEngine::save_state(const std::string& path) const {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "save_state before prefill");
  StateWriter w(path, {"boundary-kv", info().config, fwd_->model().fingerprint(), static_cast<uint64_t>(n_past()), session_});
  for (int64_t i = 0; i < cache_.n_layers(); ++i) write_layer_kv(w, cache_.layer(i));
  write_sink_rows(w, cache_);
  w.u64(static_cast<uint64_t>(pending_start_));
  w.u64(pending_.size());
  for (int32_t t : pending_) w.u64(static_cast<uint64_t>(static_cast<uint32_t>(t)));
  w.floats(last_hidden_.data(), last_hidden_.size());
  w.u64(archive_uid_);
  w.u64(seq_id_.size());
  w.bytes(seq_id_.data(), seq_id_.size());
  w.close();
}

void BoundaryKvEngine::load_state(const std::string& path) {
  StateReader r(path);
  const StateHeader h = r.header("boundary-kv", fwd_->model().fingerprint(), info().config);
  const ModelConfig& c = fwd_->config();
  if (h.n_past > static_cast<uint64_t>(c.context_length))
    throw Error(ErrorKind::Format, path + ": n_past " + std::to_string(h.n_past) + " exceeds the context length");
  KvCache fresh(c, opts_.window, true);
  for (int64_t i = 0; i < fresh.n_layers(); ++i)
    read_layer_kv(r, fresh.layer(i), static_cast<int64_t>(h.n_past), -1, "layer " + std::to_string(i));
  read_sink_rows(r, fresh, static_cast<int64_t>(h.n_past));
  const uint64_t start = r.u64(), count = r.u64();
  if (count > h.n_past || start + count != h.n_past)
    throw Error(ErrorKind::Format, path + ": pending tokens " + std::to_string(start) + "+" + std::to_string(count) +
                                       " do not end at n_past " + std::to_string(h.n_past));
  std::vector<int32_t> pending(static_cast<size_t>(count));
  for (auto& t : pending) t = static_cast<int32_t>(static_cast<uint32_t>(r.u64()));
  std::vector<float> last(static_cast<size_t>(c.hidden));
  r.floats(last.data(), last.size());
  const uint64_t uid = r.u64(), id_len = r.u64();
  if (id_len > 255) throw Error(ErrorKind::Format, path + ": sequence id of " + std::to_string(id_len) + " bytes");
  std::string id(static_cast<size_t>(id_len), '\0');
  r.bytes(id.data(), id.size());
  r.expect_end();
  check_sequence_id(id);
  const std::string archive =
      (std::filesystem::path(archive_dir_for(opts_)) / (opts_.sequence_id.empty() ? id : opts_.sequence_id)).string();
  const boundary::Archive a = boundary::archive_read(archive);
  if (a.header.uid != uid || a.header.sequence_id != id)
    throw Error(ErrorKind::InvalidArgument, archive + ": this archive (sequence '" + a.header.sequence_id +
                                                "') is not the one the state " + path + " was saved with (sequence '" +
                                                id + "'); another run replaced it");
  const uint64_t covered = a.frames.empty() ? 0 : a.frames.back().position + 1;
  if (a.header.fingerprint != fwd_->model().fingerprint() || covered != start)
    throw Error(ErrorKind::InvalidArgument, archive + ": archive covers " + std::to_string(covered) +
                                                " tokens but the state's unarchived tokens start at " + std::to_string(start));
  set_sequence(id);
  archive_uid_ = uid;
  cache_ = std::move(fresh);
  pending_ = std::move(pending);
  pending_start_ = static_cast<int64_t>(start);
  last_hidden_ = std::move(last);
  session_ = h.session;
  started_ = h.n_past > 0;
}

}  // namespace larql
