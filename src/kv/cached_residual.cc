#include "kv/cached_residual.h"

#include <algorithm>
#include <cstring>

#include "kv/state_file.h"
#include "util/error.h"

namespace larql {

CachedResidualEngine::CachedResidualEngine(std::shared_ptr<Forward> forward, int64_t window,
                                           std::vector<ColdCodec> policy, ResidualEngineIdentity identity)
    : fwd_(std::move(forward)), window_(std::max<int64_t>(0, window)), policy_(std::move(policy)), id_(std::move(identity)) {
  const ModelConfig& c = fwd_->config();
  std::string why;
  if (!MarkovRsEngine::residual_is_sufficient(c, &why))
    throw Error(ErrorKind::BackendUnavailable, id_.name + ": " + why);
  if (static_cast<int64_t>(policy_.size()) != c.n_layers)
    throw Error(ErrorKind::InvariantViolation, id_.name + ": policy has " + std::to_string(policy_.size()) +
                                                   " layers, the model " + std::to_string(c.n_layers));
  tiers_ = ResidualTierLimits(c, window_);
  for (int64_t li = 0; li < c.n_layers; ++li) layers_.push_back(fresh_layer(li));
}

CachedResidualEngine::Layer CachedResidualEngine::fresh_layer(int64_t li) const {
  const ModelConfig& c = fwd_->config();
  return {RowStore<float>(c.kv_dim()), RowStore<float>(c.kv_dim()), RowStore<float>(c.hidden),
          RowStore<uint32_t>(cold_codec_words(policy_[static_cast<size_t>(li)], c.hidden))};
}

void CachedResidualEngine::settle(int64_t n, bool rederive) {
  const ModelConfig& c = fwd_->config();
  for (int64_t li = 0; li < c.n_layers; ++li) {
    Layer& L = layers_[static_cast<size_t>(li)];
    const ColdCodec codec = policy_[static_cast<size_t>(li)];
    const int64_t keep_lo = tiers_.retain_lo(li, n), lo = tiers_.hot_lo(li, n);
    L.k.drop_before(keep_lo);
    L.v.drop_before(keep_lo);
    const int64_t first = settle_layer_tiers(tiers_, li, n, codec, c.hidden, L.cold, L.hot);
    if (rederive && codec != ColdCodec::F32 && lo > first) derive_cold(li, first, lo);  // batch-invariant: as row by row
  }
}

void CachedResidualEngine::derive_cold(int64_t li, int64_t a, int64_t b) {
  const ModelConfig& c = fwd_->config();
  Layer& L = layers_[static_cast<size_t>(li)];
  const ColdCodec codec = policy_[static_cast<size_t>(li)];
  for (int64_t off = a; off < b; off += fwd_->chunk()) {
    const int64_t m = std::min(fwd_->chunk(), b - off);
    row_.resize(static_cast<size_t>(m * c.hidden));
    for (int64_t j = 0; j < m; ++j) decode_cold_row(codec, c.hidden, L.cold.at(off + j), row_.data() + j * c.hidden);
    if (L.k.first_pos() > off || L.k.end_pos() < off + m)
      throw Error(ErrorKind::BackendFailure, id_.name + ": layer " + std::to_string(li) +
                                                 " has no K/V rows for cold positions [" + std::to_string(off) + ", " +
                                                 std::to_string(off + m) + ")");
    fwd_->kv_from_residual(li, row_.data(), m, off, L.k.mut_at(off), L.v.mut_at(off));
  }
}

void CachedResidualEngine::set_layer_codec(int64_t li, ColdCodec codec) {
  const ModelConfig& c = fwd_->config();
  Layer& L = layers_[static_cast<size_t>(li)];
  const ColdCodec old = policy_[static_cast<size_t>(li)];
  RowStore<uint32_t> cold(cold_codec_words(codec, c.hidden));
  cold.reset_to(L.cold.first_pos());
  std::vector<float> x(static_cast<size_t>(c.hidden));
  std::vector<uint32_t> enc(static_cast<size_t>(cold.width()));
  for (int64_t pos = L.cold.first_pos(); pos < L.cold.end_pos(); ++pos) {
    decode_cold_row(old, c.hidden, L.cold.at(pos), x.data());
    encode_cold_row(codec, c.hidden, x.data(), enc.data());
    cold.append(enc.data(), 1);
  }
  L.cold = std::move(cold);
  policy_[static_cast<size_t>(li)] = codec;
  if (L.cold.rows() > 0) derive_cold(li, L.cold.first_pos(), L.cold.end_pos());
}

std::vector<float> CachedResidualEngine::prefill(const std::vector<int32_t>& tokens) {
  const ModelConfig& c = fwd_->config();
  if (tokens.empty()) throw Error(ErrorKind::EmptyPrompt, "prefill: the prompt has no tokens");
  const int64_t n = static_cast<int64_t>(tokens.size());
  check_context(n, c);
  started_ = false;
  n_past_ = 0;
  layers_.clear();
  for (int64_t li = 0; li < c.n_layers; ++li) layers_.push_back(fresh_layer(li));
  // Chunked like standard's forward, and each query sees what a decode step at its position
  // would: its newest kv_keep + 1 positions exact, older ones (a lossy layer's cold tier) through
  // the round trip — AttendMask::alt for rows that turn cold within the chunk, the cached cold
  // K/V for rows already cold. So prefill == token-by-token decode, bit for bit.
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
      if (L.k.rows() == 0) {
        L.k.reset_to(off);
        L.v.reset_to(off);
      }
      L.k.append(k_.data(), m);
      L.v.append(v_.data(), m);
      const int64_t lo = lc.sliding ? std::max<int64_t>(0, off - lc.window + 1) : 0;
      if (L.k.first_pos() > lo || L.k.end_pos() != off + m)
        throw Error(ErrorKind::BackendFailure, id_.name + ": prefill of layer " + std::to_string(li) + " needs K/V [" +
                                                   std::to_string(lo) + ", " + std::to_string(off + m) + ") but holds [" +
                                                   std::to_string(L.k.first_pos()) + ", " + std::to_string(L.k.end_pos()) + ")");
      const KvSpan span{L.k.at(lo), L.v.at(lo), lo, off + m - lo};
      const AttendMask mask = prefill_roundtrip_mask(*fwd_, li, policy_[static_cast<size_t>(li)],
                                                     tiers_.kv_keep[static_cast<size_t>(li)], L.hot, lo, off + m, ak, av);
      fwd_->attend(li, q_.data(), m, off, span, attn_.data(), mask);
      fwd_->finish_layer(li, attn_.data(), m, x.data(), off);
    }
    settle(off + m, true);  // rows leaving the hot tier: encoded, their K/V re-derived
  }
  n_past_ = n;
  started_ = true;
  return std::vector<float>(x.end() - c.hidden, x.end());
}

std::vector<float> CachedResidualEngine::decode_step(int32_t token) {
  const ModelConfig& c = fwd_->config();
  if (!started_) throw Error(ErrorKind::InvariantViolation, "decode_step before prefill");
  const int64_t p = n_past_;
  check_context(p + 1, c);
  x_.resize(static_cast<size_t>(c.hidden));
  q_.resize(static_cast<size_t>(c.q_dim()));
  attn_.resize(static_cast<size_t>(c.q_dim()));
  k_.resize(static_cast<size_t>(c.kv_dim()));
  v_.resize(static_cast<size_t>(c.kv_dim()));
  fwd_->embed(&token, 1, x_.data());
  for (int64_t li = 0; li < c.n_layers; ++li) {
    Layer& L = layers_[static_cast<size_t>(li)];
    const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
    L.hot.append(x_.data(), 1);
    fwd_->qkv(li, x_.data(), 1, p, q_.data(), k_.data(), v_.data());
    L.k.append(k_.data(), 1);
    L.v.append(v_.data(), 1);
    const int64_t lo = lc.sliding ? std::max<int64_t>(0, p - lc.window + 1) : 0;
    if (L.k.first_pos() > lo || L.k.end_pos() != p + 1)
      throw Error(ErrorKind::BackendFailure, id_.name + ": layer " + std::to_string(li) + " needs K/V [" +
                                                 std::to_string(lo) + ", " + std::to_string(p + 1) + ") but holds [" +
                                                 std::to_string(L.k.first_pos()) + ", " + std::to_string(L.k.end_pos()) + ")");
    const KvSpan span{L.k.at(lo), L.v.at(lo), lo, p + 1 - lo};
    fwd_->attend(li, q_.data(), 1, p, span, attn_.data());
    fwd_->finish_layer(li, attn_.data(), 1, x_.data(), p);
  }
  n_past_ = p + 1;
  settle(n_past_, true);
  return x_;
}

EngineInfo CachedResidualEngine::info() const {
  if (id_.config) return {id_.name, "cpu", *id_.config, user_note_};
  std::string cfg = window_ > 0 ? "window=" + std::to_string(window_) + "," : "";
  cfg += "policy=";
  for (ColdCodec cc : policy_) cfg += cc == ColdCodec::F32 ? 'f' : cc == ColdCodec::Bf16 ? 'b' : 'i';
  if (!note_.empty()) cfg += "," + note_;
  return {id_.name, "cpu", cfg, user_note_};
}

EngineMemory CachedResidualEngine::memory() const {
  EngineMemory m;
  for (const Layer& L : layers_) {
    m.hot_bytes += L.k.bytes() + L.v.bytes() + L.hot.bytes();
    m.cold_bytes += L.cold.bytes();
  }
  m.window_tokens = window_;
  return m;
}

void CachedResidualEngine::save_state(const std::string& path) const {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "save_state before prefill");
  StateWriter w(path, {id_.name, info().config, fwd_->model().fingerprint(), static_cast<uint64_t>(n_past_), session_});
  for (const Layer& L : layers_) write_residual_tiers(w, L.cold, L.hot);
  w.close();
}

void CachedResidualEngine::load_state(const std::string& path) {
  const ModelConfig& c = fwd_->config();
  StateReader r(path);
  const StateHeader h = r.header(id_.name, fwd_->model().fingerprint(), info().config);
  if (h.n_past == 0 || h.n_past > static_cast<uint64_t>(c.context_length))
    throw Error(ErrorKind::Format, path + ": n_past " + std::to_string(h.n_past) + " is out of range");
  const int64_t n = static_cast<int64_t>(h.n_past);
  std::vector<Layer> layers;
  for (int64_t li = 0; li < c.n_layers; ++li) layers.push_back(fresh_layer(li));
  for (int64_t li = 0; li < c.n_layers; ++li) {
    Layer& L = layers[static_cast<size_t>(li)];
    const int64_t want_cold = tiers_.retain_lo(li, n), want_hot = tiers_.hot_lo(li, n);
    read_residual_tiers(r, li, want_cold, want_hot, n, L.cold, L.hot);
    // K/V (derivative): cold rows from the round-tripped residuals, hot rows from the residuals.
    const int64_t total = n - want_cold;
    std::vector<float> k(static_cast<size_t>(total * c.kv_dim())), v(k.size());
    for (int64_t off = 0; off < total; off += fwd_->chunk()) {
      const int64_t m = std::min(fwd_->chunk(), total - off);
      std::vector<float> xs(static_cast<size_t>(m * c.hidden));
      for (int64_t j = 0; j < m; ++j) {
        const int64_t pos = want_cold + off + j;
        if (pos < want_hot)
          decode_cold_row(policy_[static_cast<size_t>(li)], c.hidden, L.cold.at(pos), xs.data() + j * c.hidden);
        else
          std::memcpy(xs.data() + j * c.hidden, L.hot.at(pos), static_cast<size_t>(c.hidden) * sizeof(float));
      }
      fwd_->kv_from_residual(li, xs.data(), m, want_cold + off, k.data() + off * c.kv_dim(), v.data() + off * c.kv_dim());
    }
    L.k.reset_to(want_cold);
    L.v.reset_to(want_cold);
    L.k.append(k.data(), total);
    L.v.append(v.data(), total);
  }
  r.expect_end();
  session_ = h.session;
  layers_ = std::move(layers);
  n_past_ = n;
  started_ = true;
}

}  // namespace larql
