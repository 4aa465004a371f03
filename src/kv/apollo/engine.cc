#include "kv/apollo/engine.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "kv/state_file.h"
#include "tokenizer/tokenizer.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace larql {

ApolloEngine::ApolloEngine(std::shared_ptr<Forward> forward, ApolloOptions options)
    : fwd_(std::move(forward)), opt_(std::move(options)), cache_(fwd_->config(), 0) {
  const ModelConfig& c = fwd_->config();
  if (opt_.store.empty())
    throw Error(ErrorKind::RetrievalMiss,
                "apollo: no store attached (give store=PATH; build one with `larql apollo build DOCUMENT -o PATH`)");
  {  // one spelling per file, so a state saved with one path resumes with another
    std::error_code ec;
    const auto canonical = std::filesystem::weakly_canonical(opt_.store, ec);
    if (!ec) opt_.store = canonical.string();
  }
  if (opt_.layer < 0) opt_.layer = std::lround(c.n_layers * 7.0 / 8.0);
  if (opt_.layer >= c.n_layers)
    throw Error(ErrorKind::InvalidArgument, "apollo: layer=" + std::to_string(opt_.layer) + " but the model has " +
                                                std::to_string(c.n_layers) + " layers (0.." + std::to_string(c.n_layers - 1) + ")");
  if (!(opt_.coef >= 0) || !std::isfinite(opt_.coef))
    throw Error(ErrorKind::InvalidArgument, "apollo: coef must be a finite number >= 0");
  const Tokenizer tok = Tokenizer(fwd_->model().source().vocabulary());
  bos_ = tok.bos_id();
  store_ = std::make_shared<const ApolloStore>(load_apollo_store(opt_.store, fwd_->model().fingerprint(), c.vocab));
  register_input(opt_.store, "the engine's store");
  router_ = std::make_unique<ApolloRouter>(*store_, tok, opt_.min_coverage);
}

std::vector<int32_t> ApolloEngine::strip_bos(const std::vector<int32_t>& tokens) const {
  if (!tokens.empty() && tokens.front() == bos_) return std::vector<int32_t>(tokens.begin() + 1, tokens.end());
  return tokens;
}

ApolloRoute ApolloEngine::route(const std::vector<int32_t>& tokens) const { return router_->route(strip_bos(tokens)); }

std::vector<float> ApolloEngine::prefill(const std::vector<int32_t>& tokens) {
  const ModelConfig& c = fwd_->config();
  const std::vector<int32_t> query = strip_bos(tokens);
  route_ = {};
  if (query.empty()) throw Error(ErrorKind::EmptyPrompt, "prefill: the prompt has no tokens");
  started_ = false;
  cache_.clear();
  injected_.clear();
  route_ = router_->route(query);
  if (!route_.retrieved()) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "best window %lld covers %.1f%% of the query's content weight, below %.1f%%",
                  static_cast<long long>(route_.best), 100.0 * route_.coverage, 100.0 * opt_.min_coverage);
    throw Error(ErrorKind::RetrievalMiss, "apollo: the query matches no passage of " + opt_.store + " (" +
                                              (route_.best < 0 ? std::string("no content word of the query is in the store") : buf) + ")");
  }
  std::vector<int32_t> ctx;
  if (bos_ >= 0) ctx.push_back(bos_);
  const std::vector<int32_t> passage = store_->window_tokens_of(route_.window);
  ctx.insert(ctx.end(), passage.begin(), passage.end());
  ctx.insert(ctx.end(), store_->separator.begin(), store_->separator.end());
  ctx.insert(ctx.end(), query.begin(), query.end());
  const auto n = static_cast<int64_t>(ctx.size());
  check_context(n, c);
  std::vector<float> x(static_cast<size_t>((n - 1) * c.hidden));
  if (n > 1) fwd_->forward(ctx.data(), n - 1, cache_, x.data());
  // The last position: layers below `layer`, the injection, then the rest.
  std::vector<float> last(static_cast<size_t>(c.hidden));
  fwd_->embed(&ctx.back(), 1, last.data());
  const int64_t pos = n - 1;
  for (int64_t li = 0; li < opt_.layer; ++li) fwd_->layer(li, last.data(), 1, pos, cache_.layer(li));
  if (opt_.coef > 0) {
    injected_ = router_->entries_for(query, route_.window, opt_.top_k);
    double sum = 0;
    for (const auto& [t, coef] : injected_) sum += coef;
    std::vector<float> e(static_cast<size_t>(c.hidden));
    for (const auto& [t, coef] : injected_) {
      fwd_->embed(&t, 1, e.data());
      const auto s = static_cast<float>(opt_.coef * coef / sum);
      for (int64_t i = 0; i < c.hidden; ++i) last[static_cast<size_t>(i)] += s * e[static_cast<size_t>(i)];
    }
  }
  for (int64_t li = opt_.layer; li < c.n_layers; ++li) fwd_->layer(li, last.data(), 1, pos, cache_.layer(li));
  started_ = true;
  return last;
}

std::vector<float> ApolloEngine::decode_step(int32_t token) {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "decode_step before prefill");
  const ModelConfig& c = fwd_->config();
  check_context(cache_.n_past() + 1, c);
  std::vector<float> x(static_cast<size_t>(c.hidden));
  fwd_->forward(&token, 1, cache_, x.data());
  return x;
}

EngineInfo ApolloEngine::info() const {
  char coef[32];
  std::snprintf(coef, sizeof coef, "%g", opt_.coef);
  return {"apollo", "cpu",
          "layer=" + std::to_string(opt_.layer) + ",coef=" + coef + ",top_k=" + std::to_string(opt_.top_k) +
              ",store=" + opt_.store};
}

EngineMemory ApolloEngine::memory() const { return {cache_.bytes(), store_->bytes(), 0}; }

void ApolloEngine::save_state(const std::string& path) const {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "save_state before prefill");
  StateWriter w(path, {"apollo", info().config, fwd_->model().fingerprint(), static_cast<uint64_t>(n_past()), session_});
  for (int64_t i = 0; i < cache_.n_layers(); ++i) write_layer_kv(w, cache_.layer(i));
  w.close();
}

void ApolloEngine::load_state(const std::string& path) {
  StateReader r(path);
  const StateHeader h = r.header("apollo", fwd_->model().fingerprint(), info().config);
  if (h.n_past == 0 || h.n_past > static_cast<uint64_t>(fwd_->config().context_length))
    throw Error(ErrorKind::Format, path + ": n_past " + std::to_string(h.n_past) + " is out of range");
  KvCache fresh(fwd_->config(), 0);
  for (int64_t i = 0; i < fresh.n_layers(); ++i)
    read_layer_kv(r, fresh.layer(i), static_cast<int64_t>(h.n_past), -1, "layer " + std::to_string(i));
  r.expect_end();
  session_ = h.session;
  cache_ = std::move(fresh);
  route_ = {};
  injected_.clear();
  started_ = true;
}

}  // namespace larql
