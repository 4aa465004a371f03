#include "kv/standard.h"

#include <algorithm>

#include "kv/state_file.h"
#include "util/error.h"

namespace larql {

void write_sink_rows(StateWriter& w, const KvCache& cache) {
  for (int64_t i = 0; i < cache.n_layers(); ++i) {
    const LayerKv& l = cache.layer(i);
    if (l.sink_capacity() == 0) continue;
    w.u64(static_cast<uint64_t>(l.sink_rows()));
    w.floats(l.sink_k(), static_cast<size_t>(l.sink_rows() * l.kv_dim()));
    w.floats(l.sink_v(), static_cast<size_t>(l.sink_rows() * l.kv_dim()));
  }
}

void read_sink_rows(StateReader& r, KvCache& cache, int64_t n_past) {
  for (int64_t i = 0; i < cache.n_layers(); ++i) {
    LayerKv& l = cache.layer(i);
    if (l.sink_capacity() == 0) continue;
    const uint64_t rows = r.u64();
    const int64_t want = std::min(l.sink_capacity(), n_past);
    if (rows != static_cast<uint64_t>(want))
      throw Error(ErrorKind::Format, r.path() + ": layer " + std::to_string(i) + " has " + std::to_string(rows) +
                                         " sink rows, expected " + std::to_string(want));
    std::vector<float> k(static_cast<size_t>(rows) * static_cast<size_t>(l.kv_dim())), v(k.size());
    r.floats(k.data(), k.size());
    r.floats(v.data(), v.size());
    l.set_sink(k.data(), v.data(), static_cast<int64_t>(rows));
  }
}

StandardEngine::StandardEngine(std::shared_ptr<Forward> forward, int64_t window, bool sink)
    : fwd_(std::move(forward)), window_(window), sink_(sink) {
  check_engine_window("standard", window_, fwd_->config());
  cache_ = KvCache(fwd_->config(), window_, sink_);
}

std::vector<float> StandardEngine::run(const int32_t* tokens, int64_t n) {
  const ModelConfig& c = fwd_->config();
  check_context(cache_.n_past() + n, c);
  std::vector<float> x(static_cast<size_t>(n * c.hidden));
  fwd_->forward(tokens, n, cache_, x.data());
  return std::vector<float>(x.end() - c.hidden, x.end());
}

std::vector<float> StandardEngine::prefill(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) throw Error(ErrorKind::EmptyPrompt, "prefill: the prompt has no tokens");
  cache_.clear();
  started_ = false;
  auto out = run(tokens.data(), static_cast<int64_t>(tokens.size()));
  started_ = true;
  return out;
}

std::vector<float> StandardEngine::decode_step(int32_t token) {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "decode_step before prefill");
  return run(&token, 1);
}

std::vector<float> StandardEngine::extend(const std::vector<int32_t>& tokens) {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "extend before prefill");
  if (tokens.empty()) throw Error(ErrorKind::EmptyPrompt, "extend: no tokens");
  return run(tokens.data(), static_cast<int64_t>(tokens.size()));
}

void StandardEngine::decode_batch(Forward& runner, std::span<BatchStep> steps) {
  std::vector<Forward::BatchItem> items(steps.size());
  const int64_t H = runner.config().hidden;
  for (size_t i = 0; i < steps.size(); ++i) {
    BatchStep& s = steps[i];
    const std::string where = "standard decode_batch: step " + std::to_string(i);
    if (s.engine == nullptr) throw Error(ErrorKind::InvalidArgument, where + " has no engine");
    if (&s.engine->fwd_->model() != &runner.model())
      throw Error(ErrorKind::InvalidArgument, where + "'s engine runs another model than the batch");
    if (!s.engine->started_) throw Error(ErrorKind::InvariantViolation, where + ": decode_step before prefill");
    check_context(s.engine->cache_.n_past() + 1, runner.config());
    s.hidden.resize(static_cast<size_t>(H));
    s.cancelled = false;
    items[i] = Forward::BatchItem{s.token, &s.engine->cache_, s.hidden.data(), s.cancel};
  }
  runner.decode_batch(items);  // Error{InvalidArgument} for a repeated engine (a shared cache)
  for (size_t i = 0; i < steps.size(); ++i) steps[i].cancelled = items[i].cancelled;
}

EngineInfo StandardEngine::info() const {
  return {"standard", "cpu", window_ > 0 ? "window=" + std::to_string(window_) + (sink_ ? "" : ",sink=0") : ""};
}

EngineMemory StandardEngine::memory() const { return {cache_.bytes(), 0, window_}; }

void StandardEngine::save_state(const std::string& path) const {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "save_state before prefill");
  StateWriter w(path, {"standard", info().config, fwd_->model().fingerprint(), static_cast<uint64_t>(n_past()), session_});
  for (int64_t i = 0; i < cache_.n_layers(); ++i) write_layer_kv(w, cache_.layer(i));
  write_sink_rows(w, cache_);
  w.close();
}

void StandardEngine::load_state(const std::string& path) {
  StateReader r(path);
  const StateHeader h = r.header("standard", fwd_->model().fingerprint(), info().config);
  if (h.n_past > static_cast<uint64_t>(fwd_->config().context_length))
    throw Error(ErrorKind::Format, path + ": n_past " + std::to_string(h.n_past) + " exceeds the context length");
  KvCache fresh(fwd_->config(), window_, sink_);
  for (int64_t i = 0; i < fresh.n_layers(); ++i)
    read_layer_kv(r, fresh.layer(i), static_cast<int64_t>(h.n_past), -1, "layer " + std::to_string(i));
  read_sink_rows(r, fresh, static_cast<int64_t>(h.n_past));
  r.expect_end();
  session_ = h.session;
  cache_ = std::move(fresh);
  started_ = h.n_past > 0;
}

}  // namespace larql
