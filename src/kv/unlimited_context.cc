#include "kv/unlimited_context.h"

#include <algorithm>

#include "kv/state_file.h"
#include "util/error.h"

namespace larql {

UnlimitedContextEngine::UnlimitedContextEngine(std::shared_ptr<Forward> forward, int64_t window, bool sink)
    : fwd_(std::move(forward)), window_(window), sink_on_(sink) {
  if (window_ <= 0) throw Error(ErrorKind::InvalidArgument, "unlimited-context: window must be positive, got " + std::to_string(window_));
  cur_ = seeded_layers(0);
}

std::vector<LayerKv> UnlimitedContextEngine::seeded_layers(int64_t id) const {
  const ModelConfig& c = fwd_->config();
  std::vector<LayerKv> kv;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    kv.emplace_back(c.kv_dim(), 0);  // no eviction: a window is bounded by construction
    if (id > 0) {
      const Checkpoint& cp = checkpoints_[static_cast<size_t>(id - 1)];
      if (has_sink(id, l)) {
        kv.back().reset_to(cp.pos - 1);
        kv.back().append(sink_.k.data() + l * c.kv_dim(), sink_.v.data() + l * c.kv_dim(), 1);
      } else {
        kv.back().reset_to(cp.pos);
      }
      kv.back().append(cp.k.data() + l * c.kv_dim(), cp.v.data() + l * c.kv_dim(), 1);
    } else {
      kv.back().reset_to(0);
    }
  }
  return kv;
}

bool UnlimitedContextEngine::has_sink(int64_t id, int64_t layer) const {
  // Window 1 of a 1-token window: the checkpoint is position 0 itself.
  return sink_on_ && id > 0 && id * window_ - 1 > 0 && !fwd_->config().layers[static_cast<size_t>(layer)].sliding;
}

void UnlimitedContextEngine::run_piece(std::vector<LayerKv>& kv, const int32_t* tokens, int64_t m, int64_t pos0, float* x) {
  const ModelConfig& c = fwd_->config();
  fwd_->embed(tokens, m, x);
  for (int64_t l = 0; l < c.n_layers; ++l) fwd_->layer(l, x, m, pos0, kv[static_cast<size_t>(l)]);
}

void UnlimitedContextEngine::close_window() {
  const ModelConfig& c = fwd_->config();
  Checkpoint cp;
  cp.pos = win_id_ * window_ + cur_len_ - 1;
  cp.k.resize(static_cast<size_t>(c.n_layers * c.kv_dim()));
  cp.v.resize(cp.k.size());
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerKv& kv = cur_[static_cast<size_t>(l)];
    std::copy_n(kv.k_at(cp.pos), c.kv_dim(), cp.k.begin() + l * c.kv_dim());
    std::copy_n(kv.v_at(cp.pos), c.kv_dim(), cp.v.begin() + l * c.kv_dim());
  }
  checkpoints_.push_back(std::move(cp));
  if (win_id_ == 0) {  // the sink: position 0 of every layer
    sink_.pos = 0;
    sink_.k.resize(static_cast<size_t>(c.n_layers * c.kv_dim()));
    sink_.v.resize(sink_.k.size());
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const LayerKv& kv = cur_[static_cast<size_t>(l)];
      std::copy_n(kv.k_at(0), c.kv_dim(), sink_.k.begin() + l * c.kv_dim());
      std::copy_n(kv.v_at(0), c.kv_dim(), sink_.v.begin() + l * c.kv_dim());
    }
  }
  ++win_id_;
  cur_len_ = 0;
  cur_ = seeded_layers(win_id_);
}

std::vector<float> UnlimitedContextEngine::process(const int32_t* tokens, int64_t n) {
  const ModelConfig& c = fwd_->config();
  check_context(n_past() + n, c);
  std::vector<float> x;
  while (n > 0) {
    if (cur_len_ == window_) close_window();
    const int64_t m = std::min({n, window_ - cur_len_, Forward::kChunk});
    x.resize(static_cast<size_t>(m * c.hidden));
    run_piece(cur_, tokens, m, n_past(), x.data());
    tokens_.insert(tokens_.end(), tokens, tokens + m);
    cur_len_ += m;
    tokens += m;
    n -= m;
  }
  return std::vector<float>(x.end() - c.hidden, x.end());
}

std::vector<float> UnlimitedContextEngine::prefill(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) throw Error(ErrorKind::EmptyPrompt, "prefill: the prompt has no tokens");
  tokens_.clear();
  checkpoints_.clear();
  sink_ = {};
  win_id_ = 0;
  cur_len_ = 0;
  cur_ = seeded_layers(0);
  started_ = false;
  auto out = process(tokens.data(), static_cast<int64_t>(tokens.size()));
  started_ = true;
  return out;
}

std::vector<float> UnlimitedContextEngine::decode_step(int32_t token) {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "decode_step before prefill");
  return process(&token, 1);
}

WindowKv UnlimitedContextEngine::window_kv_of(const std::vector<LayerKv>& kv, int64_t first_pos) const {
  const ModelConfig& c = fwd_->config();
  WindowKv w;
  w.first_pos = first_pos;
  w.rows = kv.empty() ? 0 : kv[0].end_pos() - first_pos;
  for (const LayerKv& l : kv) {
    w.k.emplace_back(l.k_at(first_pos), l.k_at(first_pos) + w.rows * c.kv_dim());
    w.v.emplace_back(l.v_at(first_pos), l.v_at(first_pos) + w.rows * c.kv_dim());
  }
  return w;
}

WindowKv UnlimitedContextEngine::current_window_kv() const { return window_kv_of(cur_, win_id_ * window_); }

WindowKv UnlimitedContextEngine::replay(int64_t id) {
  if (id < 0 || id >= win_id_)
    throw Error(ErrorKind::InvalidArgument, "unlimited-context: replay(" + std::to_string(id) + "): closed windows are 0.." +
                                                std::to_string(win_id_ - 1));
  const ModelConfig& c = fwd_->config();
  std::vector<LayerKv> kv = seeded_layers(id);
  const int64_t first = id * window_;
  std::vector<float> x;
  for (int64_t off = 0; off < window_; off += Forward::kChunk) {
    const int64_t m = std::min(Forward::kChunk, window_ - off);
    x.resize(static_cast<size_t>(m * c.hidden));
    run_piece(kv, tokens_.data() + first + off, m, first + off, x.data());
  }
  return window_kv_of(kv, first);
}

EngineInfo UnlimitedContextEngine::info() const {
  return {"unlimited-context", "cpu", "window=" + std::to_string(window_) + (sink_on_ ? "" : ",sink=0")};
}

EngineMemory UnlimitedContextEngine::memory() const {
  const ModelConfig& c = fwd_->config();
  size_t hot = 0;
  for (const LayerKv& l : cur_) hot += l.bytes();
  const size_t cp = static_cast<size_t>(c.n_layers * c.kv_dim()) * 2 * sizeof(float);
  const size_t sink = win_id_ > 0 && sink_on_ ? cp : 0;
  return {hot, checkpoints_.size() * cp + sink + tokens_.size() * sizeof(int32_t), window_};
}

// Payload: tokens (u64 each) | per checkpoint: u64 pos, k, v [n_layers*kv_dim] | when a window
// has closed and the sink is on: the sink's k, v [n_layers*kv_dim] | per layer: u64 first_pos,
// u64 rows, k, v [rows*kv_dim] of the current window (with its seed rows).
void UnlimitedContextEngine::save_state(const std::string& path) const {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "save_state before prefill");
  StateWriter w(path, {"unlimited-context", info().config, fwd_->model().fingerprint(), static_cast<uint64_t>(n_past()), session_});
  for (int32_t t : tokens_) w.u64(static_cast<uint32_t>(t));
  for (const Checkpoint& cp : checkpoints_) {
    w.u64(static_cast<uint64_t>(cp.pos));
    w.floats(cp.k.data(), cp.k.size());
    w.floats(cp.v.data(), cp.v.size());
  }
  if (win_id_ > 0 && sink_on_) {
    w.floats(sink_.k.data(), sink_.k.size());
    w.floats(sink_.v.data(), sink_.v.size());
  }
  for (const LayerKv& l : cur_) write_layer_kv(w, l);
  w.close();
}

void UnlimitedContextEngine::load_state(const std::string& path) {
  StateReader r(path);
  const StateHeader h = r.header("unlimited-context", fwd_->model().fingerprint(), info().config);
  const ModelConfig& c = fwd_->config();
  if (h.n_past == 0 || h.n_past > static_cast<uint64_t>(c.context_length))
    throw Error(ErrorKind::Format, path + ": n_past " + std::to_string(h.n_past) + " out of range");
  const int64_t n = static_cast<int64_t>(h.n_past);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = static_cast<int32_t>(static_cast<uint32_t>(r.u64()));
  const int64_t closed = (n - 1) / window_;  // lazy close: a full window stays current
  std::vector<Checkpoint> cps(static_cast<size_t>(closed));
  for (int64_t i = 0; i < closed; ++i) {
    Checkpoint& cp = cps[static_cast<size_t>(i)];
    cp.pos = static_cast<int64_t>(r.u64());
    if (cp.pos != (i + 1) * window_ - 1) throw Error(ErrorKind::Format, path + ": checkpoint " + std::to_string(i) + " at a wrong position");
    cp.k.resize(static_cast<size_t>(c.n_layers * c.kv_dim()));
    cp.v.resize(cp.k.size());
    r.floats(cp.k.data(), cp.k.size());
    r.floats(cp.v.data(), cp.v.size());
  }
  Checkpoint sink;
  if (closed > 0 && sink_on_) {
    sink.k.resize(static_cast<size_t>(c.n_layers * c.kv_dim()));
    sink.v.resize(sink.k.size());
    r.floats(sink.k.data(), sink.k.size());
    r.floats(sink.v.data(), sink.v.size());
  }
  const int64_t first = closed * window_;
  std::vector<LayerKv> cur;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const int64_t seed_first = closed > 0 ? first - 1 - (has_sink(closed, l) ? 1 : 0) : first;
    cur.emplace_back(c.kv_dim(), 0);
    read_layer_kv(r, cur.back(), n, seed_first, "layer " + std::to_string(l) + " window");
  }
  r.expect_end();
  session_ = h.session;
  tokens_ = std::move(tokens);
  checkpoints_ = std::move(cps);
  sink_ = std::move(sink);
  cur_ = std::move(cur);
  win_id_ = closed;
  cur_len_ = n - first;
  started_ = true;
}

}  // namespace larql
