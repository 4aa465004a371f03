#include "kv/unlimited_context.h"

#include <algorithm>

#include "kv/state_file.h"
#include "util/error.h"

namespace larql {

UnlimitedContextEngine::UnlimitedContextEngine(std::shared_ptr<Forward> forward, int64_t window, bool sink)
    : fwd_(std::move(forward)), window_(window), sink_on_(sink) {
  if (window_ <= 0) throw Error(ErrorKind::InvalidArgument, "unlimited-context: window must be positive, got " + std::to_string(window_));
  check_engine_window("unlimited-context", window_, fwd_->config());
  for (int64_t l = 0; l < fwd_->config().n_layers; ++l)
    if (!sliding(l)) global_.push_back(l);
  reset();
}

bool UnlimitedContextEngine::sliding(int64_t li) const { return fwd_->config().layers[static_cast<size_t>(li)].sliding; }

LayerKv UnlimitedContextEngine::fresh_layer(int64_t li) const {
  const ModelConfig& c = fwd_->config();
  // Sliding layers: their own span, for good (and no sink: their mask never shows position 0
  // past it). Global layers: from position 0, with the sink kept apart once it leaves.
  if (sliding(li)) return LayerKv(c.kv_dim(), c.layers[static_cast<size_t>(li)].window);
  return LayerKv(c.kv_dim(), 0, sink_on_ ? 1 : 0);
}

void UnlimitedContextEngine::reset() {
  const ModelConfig& c = fwd_->config();
  tokens_.clear();
  win_id_ = 0;
  cur_len_ = 0;
  started_ = false;
  kv_.clear();
  for (int64_t l = 0; l < c.n_layers; ++l) kv_.push_back(fresh_layer(l));
}

void UnlimitedContextEngine::close_window() {
  // Window k closes: each global layer drops window k-1 and keeps window k (now the previous
  // window) and the sink.
  const int64_t kvd = fwd_->config().kv_dim();
  const int64_t from = win_id_ * window_, to = from + window_;
  for (int64_t li : global_) {
    LayerKv& kv = kv_[static_cast<size_t>(li)];
    LayerKv next(kvd, 0, kv.sink_capacity());
    next.reset_to(from);
    next.append(kv.k_at(from), kv.v_at(from), to - from);
    next.set_sink(kv.sink_k(), kv.sink_v(), kv.sink_rows());
    kv = std::move(next);
  }
  ++win_id_;
  cur_len_ = 0;
}

std::vector<float> UnlimitedContextEngine::process(const int32_t* tokens, int64_t n) {
  const ModelConfig& c = fwd_->config();
  check_context(n_past() + n, c);
  std::vector<float> x;
  while (n > 0) {
    if (cur_len_ == window_) close_window();
    const int64_t m = std::min({n, window_ - cur_len_, fwd_->chunk()});
    x.resize(static_cast<size_t>(m * c.hidden));
    const int64_t pos0 = n_past();
    fwd_->embed(tokens, m, x.data());
    for (int64_t l = 0; l < c.n_layers; ++l) fwd_->layer(l, x.data(), m, pos0, kv_[static_cast<size_t>(l)]);
    tokens_.insert(tokens_.end(), tokens, tokens + m);
    cur_len_ += m;
    tokens += m;
    n -= m;
  }
  return std::vector<float>(x.end() - c.hidden, x.end());
}

std::vector<float> UnlimitedContextEngine::prefill(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) throw Error(ErrorKind::EmptyPrompt, "prefill: the prompt has no tokens");
  reset();
  auto out = process(tokens.data(), static_cast<int64_t>(tokens.size()));
  started_ = true;
  return out;
}

std::vector<float> UnlimitedContextEngine::decode_step(int32_t token) {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "decode_step before prefill");
  return process(&token, 1);
}

WindowKv UnlimitedContextEngine::current_window_kv() const {
  const int64_t kvd = fwd_->config().kv_dim();
  WindowKv w;
  w.first_pos = win_id_ * window_;
  w.rows = cur_len_;
  const int64_t end = w.first_pos + w.rows;
  for (const LayerKv& l : kv_) {
    const int64_t first = std::min(end, std::max(w.first_pos, l.first_pos()));
    w.layer_first.push_back(first);
    w.k.emplace_back(l.k_at(first), l.k_at(first) + (end - first) * kvd);
    w.v.emplace_back(l.v_at(first), l.v_at(first) + (end - first) * kvd);
  }
  return w;
}

WindowKv UnlimitedContextEngine::replay(int64_t id) const {
  if (id < 0 || id >= win_id_)
    throw Error(ErrorKind::InvalidArgument, "unlimited-context: replay(" + std::to_string(id) + "): closed windows are 0.." +
                                                std::to_string(win_id_ - 1));
  UnlimitedContextEngine again(fwd_, window_, sink_on_);
  again.prefill(std::vector<int32_t>(tokens_.begin(), tokens_.begin() + (id + 1) * window_));  // lazy close: id stays current
  return again.current_window_kv();
}

EngineInfo UnlimitedContextEngine::info() const {
  return {"unlimited-context", "cpu", "window=" + std::to_string(window_) + (sink_on_ ? "" : ",sink=0")};
}

EngineMemory UnlimitedContextEngine::memory() const {
  size_t hot = 0;
  for (const LayerKv& l : kv_) hot += l.bytes();
  return {hot, tokens_.size() * sizeof(int32_t), window_};
}

// Payload: tokens (u64 each) | per layer write_layer_kv (a sliding layer's span; a global layer's
// previous and current windows) | per global layer with the sink on: u64 sink rows, K, V.
void UnlimitedContextEngine::save_state(const std::string& path) const {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "save_state before prefill");
  StateWriter w(path, {"unlimited-context", info().config, fwd_->model().fingerprint(), static_cast<uint64_t>(n_past()), session_});
  for (int32_t t : tokens_) w.u64(static_cast<uint32_t>(t));
  for (const LayerKv& l : kv_) write_layer_kv(w, l);
  for (const LayerKv& l : kv_) {
    if (l.sink_capacity() == 0) continue;
    w.u64(static_cast<uint64_t>(l.sink_rows()));
    w.floats(l.sink_k(), static_cast<size_t>(l.sink_rows() * l.kv_dim()));
    w.floats(l.sink_v(), static_cast<size_t>(l.sink_rows() * l.kv_dim()));
  }
  w.close();
}

void UnlimitedContextEngine::load_state(const std::string& path) {
  StateReader r(path);
  const StateHeader h = r.header("unlimited-context", fwd_->model().fingerprint(), info().config);
  const ModelConfig& c = fwd_->config();
  if (h.n_past == 0 || h.n_past > static_cast<uint64_t>(c.context_length))
    throw Error(ErrorKind::Format, path + ": n_past " + std::to_string(h.n_past) + " out of range");
  const int64_t n = static_cast<int64_t>(h.n_past);
  if (r.remaining() / sizeof(uint64_t) < static_cast<size_t>(n))
    throw Error(ErrorKind::Format, path + ": truncated token archive");
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = static_cast<int32_t>(static_cast<uint32_t>(r.u64()));
  const int64_t closed = (n - 1) / window_;  // lazy close: a full window stays current
  std::vector<LayerKv> kv;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    kv.push_back(fresh_layer(l));
    const int64_t want_first =
        sliding(l) ? std::max<int64_t>(0, n - kv.back().span()) : std::max<int64_t>(0, (closed - 1) * window_);
    read_layer_kv(r, kv.back(), n, want_first, "layer " + std::to_string(l));
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerKv& layer = kv[static_cast<size_t>(l)];
    if (layer.sink_capacity() == 0) continue;
    const uint64_t rows = r.u64();
    if (rows != 1) throw Error(ErrorKind::Format, path + ": layer " + std::to_string(l) + " has " + std::to_string(rows) + " sink rows, expected 1");
    std::vector<float> k(static_cast<size_t>(c.kv_dim())), v(k.size());
    r.floats(k.data(), k.size());
    r.floats(v.data(), v.size());
    layer.set_sink(k.data(), v.data(), 1);
  }
  r.expect_end();
  session_ = h.session;
  tokens_ = std::move(tokens);
  kv_ = std::move(kv);
  win_id_ = closed;
  cur_len_ = n - closed * window_;
  started_ = true;
}

}  // namespace larql
