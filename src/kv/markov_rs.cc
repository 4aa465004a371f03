#include "kv/markov_rs.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kv/state_file.h"
#include "util/error.h"
#include "util/half.h"

namespace larql {

const char* cold_codec_name(ColdCodec codec) {
  switch (codec) {
    case ColdCodec::F32: return "f32";
    case ColdCodec::Bf16: return "bf16";
    case ColdCodec::Int8: return "int8";
  }
  return "?";
}

bool MarkovRsEngine::residual_is_sufficient(const ModelConfig& c, std::string* why) {
  // Architectures whose layers satisfy (a)-(c) of the header comment. Gemma 3: K/V of layer l
  // = rope(k_norm(Wk attn_norm(x_l)), pos, base_l, scale_l), V likewise without rope/norm;
  // causal or sliding-window mask; no per-layer token embeddings.
  static const std::vector<std::string> kVerified = {"gemma3"};
  auto fail = [&](const std::string& s) {
    if (why) *why = s;
    return false;
  };
  if (std::find(kVerified.begin(), kVerified.end(), c.arch) == kVerified.end())
    return fail("architecture '" + c.arch + "' is not verified to have a residual stream that is a sufficient "
                "statistic for its K/V (verified: gemma3)");
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
  switch (codec_) {
    case ColdCodec::F32: words_per_row_ = c.hidden; break;
    case ColdCodec::Bf16: words_per_row_ = (c.hidden + 1) / 2; break;
    case ColdCodec::Int8: words_per_row_ = 1 + (c.hidden + 3) / 4; break;
  }
  for (int64_t li = 0; li < c.n_layers; ++li) {
    const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
    // Sliding: the next query at position n sees [n - window + 1, n], so window - 1 old rows.
    const int64_t retain = lc.sliding ? std::max<int64_t>(1, lc.window - 1) : 0;
    int64_t keep = window_;
    if (retain > 0) keep = keep > 0 ? std::min(keep, retain) : retain;
    kv_keep_.push_back(keep);
    retain_.push_back(retain);
  }
  layers_ = fresh_layers();
}

std::string MarkovRsEngine::name() const { return codec_ == ColdCodec::F32 ? "markov-rs" : "markov-rs-codec"; }

std::vector<MarkovRsEngine::Layer> MarkovRsEngine::fresh_layers() const {
  const ModelConfig& c = fwd_->config();
  std::vector<Layer> out;
  for (int64_t li = 0; li < c.n_layers; ++li)
    out.push_back({LayerKv(c.kv_dim(), kv_keep_[static_cast<size_t>(li)]), RowStore<float>(c.hidden),
                   RowStore<uint32_t>(words_per_row_)});
  return out;
}

int64_t MarkovRsEngine::retain_lo(int64_t li, int64_t n) const {
  const int64_t retain = retain_[static_cast<size_t>(li)];
  return retain > 0 ? std::max<int64_t>(0, n - retain) : 0;
}

int64_t MarkovRsEngine::hot_lo(int64_t li, int64_t n) const {
  const int64_t keep = kv_keep_[static_cast<size_t>(li)];
  return keep > 0 ? std::max<int64_t>(0, n - keep) : 0;
}

int64_t cold_codec_words(ColdCodec codec, int64_t hidden) {
  switch (codec) {
    case ColdCodec::F32: return hidden;
    case ColdCodec::Bf16: return (hidden + 1) / 2;
    case ColdCodec::Int8: return 1 + (hidden + 3) / 4;
  }
  return hidden;
}

void encode_cold_row(ColdCodec codec, int64_t H, const float* x, uint32_t* out) {
  const int64_t words_per_row_ = cold_codec_words(codec, H);
  switch (codec) {
    case ColdCodec::F32: std::memcpy(out, x, static_cast<size_t>(H) * 4); break;
    case ColdCodec::Bf16: {
      std::fill(out, out + words_per_row_, 0u);
      for (int64_t i = 0; i < H; ++i)
        out[i / 2] |= static_cast<uint32_t>(f32_to_bf16(x[i])) << (16 * (i % 2));
      break;
    }
    case ColdCodec::Int8: {
      float amax = 0;
      for (int64_t i = 0; i < H; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float scale = amax / 127.0f;
      std::memcpy(out, &scale, 4);
      uint32_t* q = out + 1;
      std::fill(q, q + (words_per_row_ - 1), 0u);
      for (int64_t i = 0; i < H; ++i) {
        float r = scale > 0 ? std::nearbyint(x[i] / scale) : 0.0f;
        r = std::clamp(r, -127.0f, 127.0f);
        const auto b = static_cast<uint8_t>(static_cast<int8_t>(r));
        q[i / 4] |= static_cast<uint32_t>(b) << (8 * (i % 4));
      }
      break;
    }
  }
}

void decode_cold_row(ColdCodec codec, int64_t H, const uint32_t* in, float* x) {
  switch (codec) {
    case ColdCodec::F32: std::memcpy(x, in, static_cast<size_t>(H) * 4); break;
    case ColdCodec::Bf16:
      for (int64_t i = 0; i < H; ++i) x[i] = bf16_to_f32(static_cast<uint16_t>(in[i / 2] >> (16 * (i % 2))));
      break;
    case ColdCodec::Int8: {
      float scale;
      std::memcpy(&scale, in, 4);
      const uint32_t* q = in + 1;
      for (int64_t i = 0; i < H; ++i)
        x[i] = static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(q[i / 4] >> (8 * (i % 4))))) * scale;
      break;
    }
  }
}

void MarkovRsEngine::encode_row(const float* x, uint32_t* out) const {
  encode_cold_row(codec_, fwd_->config().hidden, x, out);
}

void MarkovRsEngine::decode_row(const uint32_t* in, float* x) const {
  decode_cold_row(codec_, fwd_->config().hidden, in, x);
}

void MarkovRsEngine::settle(std::vector<Layer>& layers, int64_t n) const {
  std::vector<uint32_t> enc(static_cast<size_t>(words_per_row_));
  for (int64_t li = 0; li < static_cast<int64_t>(layers.size()); ++li) {
    Layer& L = layers[static_cast<size_t>(li)];
    const int64_t keep_lo = retain_lo(li, n), lo = hot_lo(li, n);
    L.cold.drop_before(keep_lo);  // first, so rows moved below land right after what is left
    if (L.hot.first_pos() < lo) {
      for (int64_t pos = std::max(L.hot.first_pos(), keep_lo); pos < lo; ++pos) {
        if (L.cold.rows() == 0 || L.cold.end_pos() != pos) L.cold.reset_to(pos);
        encode_row(L.hot.at(pos), enc.data());
        L.cold.append(enc.data(), 1);
      }
      L.hot.drop_before(lo);
    }
    if (L.cold.rows() == 0) L.cold.reset_to(L.hot.first_pos());
    L.kv.evict();
  }
}

void MarkovRsEngine::derive_kv(int64_t li, const float* x, int64_t n, int64_t pos0, float* k, float* v) {
  const ModelConfig& c = fwd_->config();
  for (int64_t off = 0; off < n; off += Forward::kChunk) {
    const int64_t m = std::min(Forward::kChunk, n - off);
    fwd_->kv_from_residual(li, x + off * c.hidden, m, pos0 + off, k + off * c.kv_dim(), v + off * c.kv_dim());
  }
}

std::vector<float> MarkovRsEngine::prefill(const std::vector<int32_t>& tokens) {
  const ModelConfig& c = fwd_->config();
  if (tokens.empty()) throw Error(ErrorKind::EmptyPrompt, "prefill: the prompt has no tokens");
  const int64_t n = static_cast<int64_t>(tokens.size());
  check_context(n, c);
  started_ = false;
  n_past_ = 0;
  std::vector<Layer> layers = fresh_layers();
  // The prompt runs exactly like standard's forward (full precision, chunked), recording the
  // residual entering every layer; the tiers are settled after each chunk to bound memory.
  KvCache tmp(c, 0);
  std::vector<float> x;
  for (int64_t off = 0; off < n; off += Forward::kChunk) {
    const int64_t m = std::min(Forward::kChunk, n - off);
    x.assign(static_cast<size_t>(m * c.hidden), 0.0f);
    fwd_->embed(tokens.data() + off, m, x.data());
    for (int64_t li = 0; li < c.n_layers; ++li) {
      layers[static_cast<size_t>(li)].hot.append(x.data(), m);
      fwd_->layer(li, x.data(), m, off, tmp.layer(li));
    }
    settle(layers, off + m);
  }
  // Hot K/V (derivative) from the prompt's own K/V: the same numbers kv_from_residual gives.
  for (int64_t li = 0; li < c.n_layers; ++li) {
    Layer& L = layers[static_cast<size_t>(li)];
    const LayerKv& t = tmp.layer(li);
    const int64_t first = L.hot.first_pos(), rows = n - first;
    if (first < t.first_pos())
      throw Error(ErrorKind::BackendFailure, name() + ": prefill K/V of layer " + std::to_string(li) + " start at " +
                                                 std::to_string(t.first_pos()) + ", hot tier at " + std::to_string(first));
    L.kv.reset_to(first);
    if (rows > 0) L.kv.append(t.k_at(first), t.v_at(first), rows);
  }
  layers_ = std::move(layers);
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
    const int64_t kv_first = L.kv.first_pos();
    KvSpan span;
    if (lo >= kv_first) {
      span = {L.kv.k_at(lo), L.kv.v_at(lo), lo, p + 1 - lo};
    } else {
      // Cold positions [lo, kv_first): re-derive K/V from the (round-tripped) residuals.
      if (L.cold.first_pos() > lo || L.cold.end_pos() != kv_first)
        throw Error(ErrorKind::BackendFailure,
                    name() + ": layer " + std::to_string(li) + " needs cold rows [" + std::to_string(lo) + ", " +
                        std::to_string(kv_first) + ") but holds [" + std::to_string(L.cold.first_pos()) + ", " +
                        std::to_string(L.cold.end_pos()) + ")");
      const int64_t ncold = kv_first - lo, total = p + 1 - lo;
      cold_x_.resize(static_cast<size_t>(ncold * H));
      for (int64_t j = 0; j < ncold; ++j) decode_row(L.cold.at(lo + j), cold_x_.data() + j * H);
      span_k_.resize(static_cast<size_t>(total * kvd));
      span_v_.resize(static_cast<size_t>(total * kvd));
      derive_kv(li, cold_x_.data(), ncold, lo, span_k_.data(), span_v_.data());
      const size_t hot_floats = static_cast<size_t>((total - ncold) * kvd);
      std::memcpy(span_k_.data() + ncold * kvd, L.kv.k_at(kv_first), hot_floats * sizeof(float));
      std::memcpy(span_v_.data() + ncold * kvd, L.kv.v_at(kv_first), hot_floats * sizeof(float));
      span = {span_k_.data(), span_v_.data(), lo, total};
    }
    fwd_->attend(li, q_.data(), 1, p, span, attn_.data());
    fwd_->finish_layer(li, attn_.data(), 1, x_.data());
  }
  n_past_ = p + 1;
  settle(layers_, n_past_);
  return x_;
}

EngineInfo MarkovRsEngine::info() const {
  std::string cfg = window_ > 0 ? "window=" + std::to_string(window_) : "";
  if (codec_ != ColdCodec::F32) cfg += (cfg.empty() ? "" : ",") + std::string("codec=") + cold_codec_name(codec_);
  return {name(), "cpu", cfg};
}

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
  StateWriter w(path, {name(), info().config, fwd_->model().fingerprint(), static_cast<uint64_t>(n_past_)});
  for (const Layer& L : layers_) {
    w.u64(static_cast<uint64_t>(L.cold.first_pos()));
    w.u64(static_cast<uint64_t>(L.cold.rows()));
    if (L.cold.rows() > 0)  // encoded words, written bit for bit
      w.floats(reinterpret_cast<const float*>(L.cold.at(L.cold.first_pos())),
               static_cast<size_t>(L.cold.rows() * words_per_row_));
    w.u64(static_cast<uint64_t>(L.hot.first_pos()));
    w.u64(static_cast<uint64_t>(L.hot.rows()));
    if (L.hot.rows() > 0) w.floats(L.hot.at(L.hot.first_pos()), static_cast<size_t>(L.hot.rows() * L.hot.width()));
  }
  w.close();
}

void MarkovRsEngine::load_state(const std::string& path) {
  const ModelConfig& c = fwd_->config();
  StateReader r(path);
  const StateHeader h = r.header(name(), fwd_->model().fingerprint());
  if (h.config != info().config)
    throw Error(ErrorKind::InvariantViolation, path + ": state has config '" + h.config + "', engine has '" + info().config + "'");
  if (h.n_past == 0 || h.n_past > static_cast<uint64_t>(c.context_length))
    throw Error(ErrorKind::Format, path + ": n_past " + std::to_string(h.n_past) + " is out of range");
  const int64_t n = static_cast<int64_t>(h.n_past);
  std::vector<Layer> layers = fresh_layers();
  std::vector<float> k, v;
  for (int64_t li = 0; li < c.n_layers; ++li) {
    Layer& L = layers[static_cast<size_t>(li)];
    const int64_t want_cold = retain_lo(li, n), want_hot = hot_lo(li, n);
    const uint64_t cold_first = r.u64(), cold_rows = r.u64();
    if (cold_first != static_cast<uint64_t>(want_cold) || cold_first + cold_rows != static_cast<uint64_t>(want_hot))
      throw Error(ErrorKind::Format, path + ": layer " + std::to_string(li) + " cold rows [" + std::to_string(cold_first) +
                                         ", +" + std::to_string(cold_rows) + ") do not match the tiers at n_past " +
                                         std::to_string(n));
    std::vector<uint32_t> words(static_cast<size_t>(cold_rows * static_cast<uint64_t>(words_per_row_)));
    r.floats(reinterpret_cast<float*>(words.data()), words.size());
    L.cold.reset_to(want_cold);
    L.cold.append(words.data(), static_cast<int64_t>(cold_rows));
    const uint64_t hot_first = r.u64(), hot_rows = r.u64();
    if (hot_first != static_cast<uint64_t>(want_hot) || hot_first + hot_rows != h.n_past)
      throw Error(ErrorKind::Format, path + ": layer " + std::to_string(li) + " hot rows do not end at n_past");
    std::vector<float> res(static_cast<size_t>(hot_rows * static_cast<uint64_t>(c.hidden)));
    r.floats(res.data(), res.size());
    L.hot.reset_to(want_hot);
    L.hot.append(res.data(), static_cast<int64_t>(hot_rows));
    // Re-derive the hot K/V (derivative state) from the residuals.
    k.resize(static_cast<size_t>(hot_rows * static_cast<uint64_t>(c.kv_dim())));
    v.resize(k.size());
    derive_kv(li, res.data(), static_cast<int64_t>(hot_rows), want_hot, k.data(), v.data());
    L.kv.reset_to(want_hot);
    L.kv.append(k.data(), v.data(), static_cast<int64_t>(hot_rows));
  }
  r.expect_end();
  layers_ = std::move(layers);
  n_past_ = n;
  started_ = true;
}

}  // namespace larql
