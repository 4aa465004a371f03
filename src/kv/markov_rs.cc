#include "kv/markov_rs.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kv/state_file.h"
#include "model/arch.h"
#include "util/error.h"
#include "util/half.h"

namespace larql {

bool MarkovRsEngine::residual_is_sufficient(const ModelConfig& c, std::string* why) {
  // The family's architecture record says whether its layers satisfy (a)-(c) of the header
  // comment (model/arch.h ArchRecord::residual_sufficient), verified by the engine contract
  // tests on a model of the family.
  auto fail = [&](const std::string& s) {
    if (why) *why = s;
    return false;
  };
  const ArchRecord* rec = find_arch(c.arch);
  if (rec == nullptr || !rec->residual_sufficient) {
    std::string verified;
    for (const ArchRecord* r : arch_records())
      if (r->residual_sufficient) verified += (verified.empty() ? "" : ", ") + std::string(r->arch);
    return fail("architecture '" + c.arch + "' is not verified to have a residual stream that is a sufficient "
                "statistic for its K/V (verified: " + verified + ")");
  }
  if (static_cast<int64_t>(c.layers.size()) != c.n_layers) return fail("per-layer config does not cover every layer");
  for (const LayerConfig& l : c.layers)
    if (l.sliding && l.window <= 0) return fail("a sliding layer has no window");
  return true;
}

MarkovRsEngine::MarkovRsEngine(std::shared_ptr<Forward> forward, int64_t window, ColdCodec codec)
    : fwd_(std::move(forward)), window_(std::max<int64_t>(0, window)), codec_(codec) {
  const ModelConfig& c = fwd_->config();
  std::string why;
  if (!residual_is_sufficient(c, &why))
    throw Error(ErrorKind::BackendUnavailable, name() + ": " + why);
  words_per_row_ = cold_codec_words(codec_, c.hidden);
  tiers_ = ResidualTierLimits(c, window_);
  layers_ = fresh_layers();
}

std::string MarkovRsEngine::name() const { return codec_ == ColdCodec::F32 ? "markov-rs" : "markov-rs-codec"; }

std::vector<MarkovRsEngine::Layer> MarkovRsEngine::fresh_layers() const {
  const ModelConfig& c = fwd_->config();
  std::vector<Layer> out;
  for (int64_t li = 0; li < c.n_layers; ++li)
    out.push_back({LayerKv(c.kv_dim(), tiers_.kv_keep[static_cast<size_t>(li)]), RowStore<float>(c.hidden),
                   RowStore<uint32_t>(words_per_row_)});
  return out;
}

void MarkovRsEngine::decode_row(const uint32_t* in, float* x) const {
  decode_cold_row(codec_, fwd_->config().hidden, in, x);
}

void MarkovRsEngine::settle(std::vector<Layer>& layers, int64_t n) const {
  for (int64_t li = 0; li < static_cast<int64_t>(layers.size()); ++li) {
    Layer& L = layers[static_cast<size_t>(li)];
    settle_layer_tiers(tiers_, li, n, codec_, fwd_->config().hidden, L.cold, L.hot);
    L.kv.evict();
  }
}

void MarkovRsEngine::derive_kv(int64_t li, const float* x, int64_t n, int64_t pos0, float* k, float* v) {
  const ModelConfig& c = fwd_->config();
  for (int64_t off = 0; off < n; off += fwd_->chunk()) {
    const int64_t m = std::min(fwd_->chunk(), n - off);
    fwd_->kv_from_residual(li, x + off * c.hidden, m, pos0 + off, k + off * c.kv_dim(), v + off * c.kv_dim());
  }
}

KvSpan MarkovRsEngine::attend_span(Layer& L, int64_t li, int64_t lo, int64_t end) {
  const int64_t H = fwd_->config().hidden, kvd = fwd_->config().kv_dim();
  const int64_t kv_first = L.kv.first_pos();
  if (lo >= kv_first) return {L.kv.k_at(lo), L.kv.v_at(lo), lo, end - lo};
  // Cold positions [lo, kv_first): re-derive K/V from the (round-tripped) residuals.
  if (L.cold.first_pos() > lo || L.cold.end_pos() != kv_first)
    throw Error(ErrorKind::BackendFailure,
                name() + ": layer " + std::to_string(li) + " needs cold rows [" + std::to_string(lo) + ", " +
                    std::to_string(kv_first) + ") but holds [" + std::to_string(L.cold.first_pos()) + ", " +
                    std::to_string(L.cold.end_pos()) + ")");
  const int64_t ncold = kv_first - lo, total = end - lo;
  cold_x_.resize(static_cast<size_t>(ncold * H));
  for (int64_t j = 0; j < ncold; ++j) decode_row(L.cold.at(lo + j), cold_x_.data() + j * H);
  span_k_.resize(static_cast<size_t>(total * kvd));
  span_v_.resize(static_cast<size_t>(total * kvd));
  derive_kv(li, cold_x_.data(), ncold, lo, span_k_.data(), span_v_.data());
  const size_t hot_floats = static_cast<size_t>((total - ncold) * kvd);
  std::memcpy(span_k_.data() + ncold * kvd, L.kv.k_at(kv_first), hot_floats * sizeof(float));
  std::memcpy(span_v_.data() + ncold * kvd, L.kv.v_at(kv_first), hot_floats * sizeof(float));
  return {span_k_.data(), span_v_.data(), lo, total};
}

std::vector<float> MarkovRsEngine::prefill(const std::vector<int32_t>& tokens) {
  const ModelConfig& c = fwd_->config();
  if (tokens.empty()) throw Error(ErrorKind::EmptyPrompt, "prefill: the prompt has no tokens");
  const int64_t n = static_cast<int64_t>(tokens.size());
  check_context(n, c);
  started_ = false;
  n_past_ = 0;
  layers_ = fresh_layers();
  // Chunked like standard's forward, recording the residual entering every layer; each query sees
  // what a decode step at its position would: cold positions through K/V derived from the decoded
  // cold tier, positions that turn cold within the chunk through the round trip (AttendMask::alt),
  // the newest kv_keep + 1 exact. So prefill == token-by-token decode, bit for bit.
  std::vector<float> x, ak, av;
  for (int64_t off = 0; off < n; off += fwd_->chunk()) {
    const int64_t m = std::min(fwd_->chunk(), n - off);
    x.assign(static_cast<size_t>(m * c.hidden), 0.0f);
    q_.resize(static_cast<size_t>(m * c.q_dim()));
    attn_.resize(q_.size());
    k_.resize(static_cast<size_t>(m * c.kv_dim()));
    v_.resize(k_.size());
    fwd_->embed(tokens.data() + off, m, x.data());
    for (int64_t li = 0; li < c.n_layers; ++li) {
      Layer& L = layers_[static_cast<size_t>(li)];
      const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
      L.hot.append(x.data(), m);
      fwd_->qkv(li, x.data(), m, off, q_.data(), k_.data(), v_.data());
      L.kv.append(k_.data(), v_.data(), m);
      const int64_t lo = lc.sliding ? std::max<int64_t>(0, off - lc.window + 1) : 0;
      const KvSpan span = attend_span(L, li, lo, off + m);
      const AttendMask mask =
          prefill_roundtrip_mask(*fwd_, li, codec_, tiers_.kv_keep[static_cast<size_t>(li)], L.hot, lo, off + m, ak, av);
      fwd_->attend(li, q_.data(), m, off, span, attn_.data(), mask);
      fwd_->finish_layer(li, attn_.data(), m, x.data(), off);
    }
    settle(layers_, off + m);
  }
  n_past_ = n;
  started_ = true;
  return std::vector<float>(x.end() - c.hidden, x.end());
}

std::vector<float> MarkovRsEngine::decode_step(int32_t token) {
  const ModelConfig& c = fwd_->config();
  if (!started_) throw Error(ErrorKind::InvariantViolation, "decode_step before prefill");
  const int64_t p = n_past_;
  check_context(p + 1, c);
  const int64_t H = c.hidden, kvd = c.kv_dim();
  x_.resize(static_cast<size_t>(H));
  q_.resize(static_cast<size_t>(c.q_dim()));
  attn_.resize(static_cast<size_t>(c.q_dim()));
  k_.resize(static_cast<size_t>(kvd));
  v_.resize(static_cast<size_t>(kvd));
  fwd_->embed(&token, 1, x_.data());  // validates the id before any state changes
  for (int64_t li = 0; li < c.n_layers; ++li) {
    Layer& L = layers_[static_cast<size_t>(li)];
    const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
    L.hot.append(x_.data(), 1);
    fwd_->qkv(li, x_.data(), 1, p, q_.data(), k_.data(), v_.data());
    L.kv.append(k_.data(), v_.data(), 1);
    const int64_t lo = lc.sliding ? std::max<int64_t>(0, p - lc.window + 1) : 0;
    const KvSpan span = attend_span(L, li, lo, p + 1);
    fwd_->attend(li, q_.data(), 1, p, span, attn_.data());
    fwd_->finish_layer(li, attn_.data(), 1, x_.data(), p);
  }
  n_past_ = p + 1;
  settle(layers_, n_past_);
  return x_;
}

std::string MarkovRsEngine::config_string(int64_t window, ColdCodec codec) {
  std::string cfg = window > 0 ? "window=" + std::to_string(window) : "";
  if (codec != ColdCodec::F32) {
    if (!cfg.empty()) cfg += ',';
    cfg += "codec=";
    cfg += cold_codec_name(codec);
  }
  return cfg;
}

EngineInfo MarkovRsEngine::info() const { return {name(), "cpu", config_string(window_, codec_)}; }

EngineMemory MarkovRsEngine::memory() const {
  EngineMemory m;
  for (const Layer& L : layers_) {
    m.hot_bytes += L.kv.bytes() + L.hot.bytes();
    m.cold_bytes += L.cold.bytes();
  }
  m.window_tokens = window_;
  return m;
}

void MarkovRsEngine::save_state(const std::string& path) const {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "save_state before prefill");
  StateWriter w(path, {name(), info().config, fwd_->model().fingerprint(), static_cast<uint64_t>(n_past_), session_});
  for (const Layer& L : layers_) write_residual_tiers(w, L.cold, L.hot);
  w.close();
}

void MarkovRsEngine::load_state(const std::string& path) {
  const ModelConfig& c = fwd_->config();
  StateReader r(path);
  const StateHeader h = r.header(name(), fwd_->model().fingerprint());
  if (h.config != info().config)
    throw Error(ErrorKind::InvalidArgument, path + ": state has config '" + h.config + "', engine has '" + info().config + "'");
  if (h.n_past == 0 || h.n_past > static_cast<uint64_t>(c.context_length))
    throw Error(ErrorKind::Format, path + ": n_past " + std::to_string(h.n_past) + " is out of range");
  const int64_t n = static_cast<int64_t>(h.n_past);
  std::vector<Layer> layers = fresh_layers();
  std::vector<float> k, v;
  for (int64_t li = 0; li < c.n_layers; ++li) {
    Layer& L = layers[static_cast<size_t>(li)];
    const int64_t want_cold = tiers_.retain_lo(li, n), want_hot = tiers_.hot_lo(li, n);
    read_residual_tiers(r, li, want_cold, want_hot, n, L.cold, L.hot);
    const int64_t hot_rows = L.hot.rows();
    const float* res = hot_rows > 0 ? L.hot.at(want_hot) : nullptr;
    // Re-derive the hot K/V (derivative state) from the residuals.
    k.resize(static_cast<size_t>(hot_rows * c.kv_dim()));
    v.resize(k.size());
    if (hot_rows > 0) derive_kv(li, res, hot_rows, want_hot, k.data(), v.data());
    L.kv.reset_to(want_hot);
    L.kv.append(k.data(), v.data(), hot_rows);
  }
  r.expect_end();
  session_ = h.session;
  layers_ = std::move(layers);
  n_past_ = n;
  started_ = true;
}

}  // namespace larql
