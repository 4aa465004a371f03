#include "kv/standard.h"

#include "kv/state_file.h"
#include "util/error.h"

namespace larql {

StandardEngine::StandardEngine(std::shared_ptr<Forward> forward, int64_t window)
    : fwd_(std::move(forward)), window_(window), cache_(fwd_->config(), window) {}

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

EngineInfo StandardEngine::info() const {
  return {"standard", "cpu", window_ > 0 ? "window=" + std::to_string(window_) : ""};
}

EngineMemory StandardEngine::memory() const { return {cache_.bytes(), 0, window_}; }

void StandardEngine::save_state(const std::string& path) const {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "save_state before prefill");
  StateWriter w(path, {"standard", info().config, fwd_->model().fingerprint(), static_cast<uint64_t>(n_past()), session_});
  for (int64_t i = 0; i < cache_.n_layers(); ++i) write_layer_kv(w, cache_.layer(i));
  w.close();
}

void StandardEngine::load_state(const std::string& path) {
  StateReader r(path);
  const StateHeader h = r.header("standard", fwd_->model().fingerprint(), info().config);
  if (h.n_past > static_cast<uint64_t>(fwd_->config().context_length))
    throw Error(ErrorKind::Format, path + ": n_past " + std::to_string(h.n_past) + " exceeds the context length");
  KvCache fresh(fwd_->config(), window_);
  for (int64_t i = 0; i < fresh.n_layers(); ++i)
    read_layer_kv(r, fresh.layer(i), static_cast<int64_t>(h.n_past), -1, "layer " + std::to_string(i));
  r.expect_end();
  session_ = h.session;
  cache_ = std::move(fresh);
  started_ = h.n_past > 0;
}

}  // namespace larql
