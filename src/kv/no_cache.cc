#include "kv/no_cache.h"

#include "inference/kv_cache.h"
#include "kv/state_file.h"
#include "util/error.h"

namespace larql {

NoCacheEngine::NoCacheEngine(std::shared_ptr<Forward> forward) : fwd_(std::move(forward)) {}

std::vector<float> NoCacheEngine::run(const std::vector<int32_t>& tokens) {
  const ModelConfig& c = fwd_->config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  check_context(n, c);
  KvCache cache(c, 0);  // fresh every call: no state survives between steps
  std::vector<float> x(static_cast<size_t>(n * c.hidden));
  fwd_->forward(tokens.data(), n, cache, x.data());
  return std::vector<float>(x.end() - c.hidden, x.end());
}

std::vector<float> NoCacheEngine::prefill(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) throw Error(ErrorKind::EmptyPrompt, "prefill: the prompt has no tokens");
  tokens_.clear();
  auto out = run(tokens);  // throws before any state changes
  tokens_ = tokens;
  return out;
}

std::vector<float> NoCacheEngine::decode_step(int32_t token) {
  if (tokens_.empty()) throw Error(ErrorKind::InvariantViolation, "decode_step before prefill");
  std::vector<int32_t> next = tokens_;
  next.push_back(token);
  auto out = run(next);
  tokens_ = std::move(next);
  return out;
}

EngineInfo NoCacheEngine::info() const { return {"no-cache", "cpu", ""}; }

EngineMemory NoCacheEngine::memory() const { return {tokens_.size() * sizeof(int32_t), 0, 0}; }

void NoCacheEngine::save_state(const std::string& path) const {
  if (tokens_.empty()) throw Error(ErrorKind::InvariantViolation, "save_state before prefill");
  StateWriter w(path, {"no-cache", info().config, fwd_->model().fingerprint(), static_cast<uint64_t>(n_past()), session_});
  for (int32_t t : tokens_) w.u64(static_cast<uint64_t>(static_cast<uint32_t>(t)));
  w.close();
}

void NoCacheEngine::load_state(const std::string& path) {
  StateReader r(path);
  const StateHeader h = r.header("no-cache", fwd_->model().fingerprint());
  if (h.n_past == 0 || h.n_past > static_cast<uint64_t>(fwd_->config().context_length))
    throw Error(ErrorKind::Format, path + ": n_past " + std::to_string(h.n_past) + " is out of range");
  std::vector<int32_t> toks(static_cast<size_t>(h.n_past));
  for (auto& t : toks) {
    const uint64_t v = r.u64();
    if (v >= static_cast<uint64_t>(fwd_->config().vocab))
      throw Error(ErrorKind::Format, path + ": token id " + std::to_string(v) + " is outside the vocabulary");
    t = static_cast<int32_t>(v);
  }
  r.expect_end();
  session_ = h.session;
  tokens_ = std::move(toks);
}

}  // namespace larql
