#include "kv/turbo_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "compute/ops.h"
#include "kv/state_file.h"
#include "util/error.h"
#include "util/profile.h"

namespace larql {
namespace {

/// The payload's first word. The first codec (no key transform, no exact window) wrote the bit
/// width (3 or 4) there instead.
constexpr uint64_t kPayloadVersion = 2;
/// Rows per block of the attention kernel's V sum (and of the decode step's parallel split).
constexpr int64_t kBlock = 64;

turbo::Codec make_codec(const Forward& f, int bits) {
  const int64_t d = f.config().head_dim;
  if (bits != 3 && bits != 4)
    throw Error(ErrorKind::InvalidArgument, "turbo-quant: bits = " + std::to_string(bits) + " (accepted: 3, 4)");
  if (d < 2 || (d & (d - 1)) != 0)
    throw Error(ErrorKind::BackendUnavailable, "turbo-quant: head_dim " + std::to_string(d) +
                                                   " is not a power of two (the Walsh-Hadamard rotation needs one)");
  return turbo::Codec(d, bits);
}

// Codes are bytes, padded to a multiple of 4 (the payload stays 4-byte aligned).
void write_bytes(StateWriter& w, const uint8_t* p, size_t n) {
  static constexpr uint8_t kZero[4] = {0, 0, 0, 0};
  w.bytes(p, n);
  w.bytes(kZero, (4 - n % 4) % 4);
}

void read_bytes(StateReader& r, uint8_t* p, size_t n) {
  uint8_t pad[4];
  r.bytes(p, n);
  r.bytes(pad, (4 - n % 4) % 4);
}

/// The attention kernel, shared by prefill and decode so that both produce the same bits.
/// One query position and one KV group: rows t = 0..rows-1 (krow(t, buf) / vrow(t, buf) return
/// the row in the rotated domain, decoding into buf when needed); the group's queries
/// qrot [group, d] (R·(q / a)) and qc [group] (q·c). Score = (qrot·row + qc) · scale, soft-capped
/// when cap > 0; one softmax per head; the V sum in kBlock-row blocks, each summed in row order,
/// the blocks added in block order. out [group, d] (rotated domain). Scratch: scores
/// [group × rows], partial [blocks × group × d]. pool: split the blocks across threads (decode);
/// null: run them here (prefill, already one task per query).
template <class KRow, class VRow>
void attend_rows(ThreadPool* pool, int64_t rows, int64_t group, int64_t d, const float* qrot, const float* qc,
                 float scale, float cap, const KRow& krow, const VRow& vrow, float* scores, float* partial,
                 float* out) {
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
  auto score_blocks = [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf, dots;
    buf.resize(static_cast<size_t>(d));
    dots.resize(static_cast<size_t>(group));
    for (int64_t blk = b; blk < e; ++blk)
      for (int64_t t = blk * kBlock; t < std::min(rows, (blk + 1) * kBlock); ++t) {
        const float* kr = krow(t, buf.data());
        compute::dot_f32_rows(qrot, group, kr, d, dots.data());  // each head's dot_f32, one pass over kr
        for (int64_t h = 0; h < group; ++h) {
          float sc = (dots[static_cast<size_t>(h)] + qc[h]) * scale;
          if (cap > 0) sc = cap * std::tanh(sc / cap);
          scores[h * rows + t] = sc;
        }
      }
  };
  auto v_blocks = [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf, p;
    buf.resize(static_cast<size_t>(d));
    p.resize(static_cast<size_t>(group));
    for (int64_t blk = b; blk < e; ++blk) {
      float* acc = partial + blk * group * d;
      std::fill(acc, acc + group * d, 0.0f);
      for (int64_t t = blk * kBlock; t < std::min(rows, (blk + 1) * kBlock); ++t) {
        const float* vr = vrow(t, buf.data());
        for (int64_t h = 0; h < group; ++h) p[static_cast<size_t>(h)] = scores[h * rows + t];
        compute::axpy_rows(p.data(), vr, acc, group, d);  // each head's axpy, one pass over vr
      }
    }
  };
  if (pool) pool->parallel_for(blocks, score_blocks);
  else score_blocks(0, blocks);
  for (int64_t h = 0; h < group; ++h) compute::softmax(scores + h * rows, rows);
  if (pool) pool->parallel_for(blocks, v_blocks);
  else v_blocks(0, blocks);
  std::fill(out, out + group * d, 0.0f);
  for (int64_t blk = 0; blk < blocks; ++blk)
    for (int64_t i = 0; i < group * d; ++i) out[i] += partial[blk * group * d + i];
}

}  // namespace

TurboQuantEngine::TurboQuantEngine(std::shared_ptr<Forward> forward, int bits, int64_t recent)
    : fwd_(std::move(forward)), bits_(bits), recent_(recent), codec_(make_codec(*fwd_, bits)),
      row_bytes_(static_cast<size_t>(fwd_->config().n_kv_heads) * codec_.bytes_per_vector()) {
  if (recent < 0)
    throw Error(ErrorKind::InvalidArgument, "turbo-quant: recent = " + std::to_string(recent) + " (must be >= 0)");
  init_key_transform();
  clear_layers();
}

void TurboQuantEngine::init_key_transform() {
  const ModelConfig& c = fwd_->config();
  const int64_t d = c.head_dim, half = d / 2;
  kscale_.assign(static_cast<size_t>(c.n_layers), std::vector<float>(static_cast<size_t>(d), 1.0f));
  kinv_ = kscale_;
  kcentre_.assign(static_cast<size_t>(c.n_layers), std::vector<float>(static_cast<size_t>(c.kv_dim()), 0.0f));
  for (int64_t li = 0; li < c.n_layers; ++li) {
    const LayerWeights& w = fwd_->model().weights().layers[static_cast<size_t>(li)];
    if (w.q_norm.size() != static_cast<size_t>(d) || w.k_norm.size() != static_cast<size_t>(d)) continue;
    std::vector<double> eq(static_cast<size_t>(half)), ek(eq.size());
    double mq = 0, mk = 0;
    for (int64_t i = 0; i < half; ++i) {
      const auto u = static_cast<size_t>(i), v = static_cast<size_t>(i + half);
      eq[u] = double(w.q_norm[u]) * w.q_norm[u] + double(w.q_norm[v]) * w.q_norm[v];
      ek[u] = double(w.k_norm[u]) * w.k_norm[u] + double(w.k_norm[v]) * w.k_norm[v];
      mq += eq[u] / half;
      mk += ek[u] / half;
    }
    if (!(mq > 0) || !(mk > 0) || !std::isfinite(mq) || !std::isfinite(mk)) continue;
    for (int64_t i = 0; i < half; ++i) {
      const double a = std::pow(std::max(eq[static_cast<size_t>(i)], 1e-4 * mq) / std::max(ek[static_cast<size_t>(i)], 1e-4 * mk), 0.25);
      for (const int64_t j : {i, i + half}) {
        kscale_[static_cast<size_t>(li)][static_cast<size_t>(j)] = static_cast<float>(a);
        kinv_[static_cast<size_t>(li)][static_cast<size_t>(j)] = static_cast<float>(1.0 / a);
      }
    }
  }
  // The centre: K of BOS at position 0, from one exact forward step.
  const int32_t tok = fwd_->model().source().special_tokens().bos;
  if (tok < 0 || tok >= c.vocab) return;
  KvCache cache(c);
  std::vector<float> x(static_cast<size_t>(c.hidden));
  fwd_->forward(&tok, 1, cache, x.data());
  for (int64_t li = 0; li < c.n_layers; ++li) {
    const float* k0 = cache.layer(li).k_at(0);
    std::copy(k0, k0 + c.kv_dim(), kcentre_[static_cast<size_t>(li)].begin());
  }
}

int64_t TurboQuantEngine::recent_of(int64_t li) const {
  const LayerConfig& lc = fwd_->config().layers[static_cast<size_t>(li)];
  return lc.sliding ? std::min(recent_, lc.window) : recent_;
}

int64_t TurboQuantEngine::exact_rows(const QuantLayer& l) const {
  return static_cast<int64_t>(l.ek.size()) / fwd_->config().kv_dim();
}

void TurboQuantEngine::clear_layers() {
  const ModelConfig& c = fwd_->config();
  layers_.assign(static_cast<size_t>(c.n_layers), QuantLayer{});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const LayerConfig& lc = c.layers[static_cast<size_t>(i)];
    layers_[static_cast<size_t>(i)].keep = lc.sliding ? lc.window : 0;
  }
  n_past_ = 0;
}

void TurboQuantEngine::encode_key(int64_t li, const float* k, uint8_t* out) const {
  // k: one head's row, already centred (k − c); scaled by a here.
  thread_local std::vector<float> t;
  const int64_t d = codec_.dim();
  t.resize(static_cast<size_t>(d));
  const float* a = kscale_[static_cast<size_t>(li)].data();
  for (int64_t i = 0; i < d; ++i) t[static_cast<size_t>(i)] = k[i] * a[i];
  codec_.encode(t.data(), out);
}

void TurboQuantEngine::key_to_domain(int64_t li, int64_t g, const float* k, float* y) const {
  const int64_t d = codec_.dim();
  const float* a = kscale_[static_cast<size_t>(li)].data();
  const float* c = kcentre_[static_cast<size_t>(li)].data() + g * d;
  for (int64_t i = 0; i < d; ++i) y[i] = (k[i] - c[i]) * a[i];
  turbo::rotate(y, d);
}

void TurboQuantEngine::layer_step(int64_t li, float* x, int64_t n, int64_t pos0) {
  const ModelConfig& c = fwd_->config();
  const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
  const int64_t d = c.head_dim, kvh = c.n_kv_heads, kv_dim = c.kv_dim(), q_dim = c.q_dim();
  const int64_t group = c.n_heads / kvh;
  const size_t vb = codec_.bytes_per_vector();
  QuantLayer& l = layers_[static_cast<size_t>(li)];
  if (l.first_pos + rows_total(l) != pos0)
    throw Error(ErrorKind::InvariantViolation, "turbo-quant: layer " + std::to_string(li) + " K/V ends at " +
                                                   std::to_string(l.first_pos + rows_total(l)) + ", expected " +
                                                   std::to_string(pos0));
  q_.resize(static_cast<size_t>(n * q_dim));
  k_.resize(static_cast<size_t>(n * kv_dim));
  v_.resize(static_cast<size_t>(n * kv_dim));
  attn_.resize(static_cast<size_t>(n * q_dim));
  fwd_->qkv(li, x, n, pos0, q_.data(), k_.data(), v_.data());

  // 1. Encode the new rows (once; never touched again). K rows are centred here, scaled in
  //    encode_key.
  const size_t old = l.k.size();
  l.k.resize(old + static_cast<size_t>(n) * row_bytes_);
  l.v.resize(old + static_cast<size_t>(n) * row_bytes_);
  const float* centre = kcentre_[static_cast<size_t>(li)].data();
  {
    const profile::Scope prof(profile::Stage::Codec);
    fwd_->pool().parallel_for(n * kvh, [&](int64_t b, int64_t e) {
      thread_local std::vector<float> kc;
      kc.resize(static_cast<size_t>(d));
      for (int64_t t = b; t < e; ++t) {
        const size_t off = old + static_cast<size_t>(t) * vb;  // row t/kvh, head t%kvh
        const float* k = k_.data() + t * d;
        const float* cg = centre + (t % kvh) * d;
        for (int64_t i = 0; i < d; ++i) kc[static_cast<size_t>(i)] = k[i] - cg[i];
        encode_key(li, kc.data(), l.k.data() + off);
        codec_.encode(v_.data() + t * d, l.v.data() + off);
      }
    });
  }

  // 2. The rows the chunk's queries see, in the rotated domain. Query p sees positions
  //    [lo(p), p]; s is exact iff s > p − R. Decoded: [lo(pos0), pos0 + n − R); exact:
  //    [ex_first, pos0 + n), from the layer's exact rows and the chunk's own.
  const int64_t R = recent_of(li);
  auto lo_of = [&](int64_t p) {
    int64_t lo = l.first_pos + l.start;
    if (lc.sliding) lo = std::max(lo, p - lc.window + 1);
    return lo;
  };
  const int64_t lo0 = lo_of(pos0), dec_end = std::max(lo0, pos0 + n - R);
  const int64_t held = exact_rows(l);
  const int64_t ex_first = std::max(lo0, pos0 - std::min(held, std::max<int64_t>(R - 1, 0)));
  const int64_t n_ex = R > 0 ? pos0 + n - ex_first : 0, n_dec = dec_end - lo0;
  std::optional<profile::Scope> prof_codec(std::in_place, profile::Stage::Codec);
  ekr_.resize(static_cast<size_t>(n_ex * kv_dim));
  evr_.resize(ekr_.size());
  kr_.resize(static_cast<size_t>(n > 1 ? n_dec * kv_dim : 0));
  vr_.resize(kr_.size());
  const int64_t ex_tasks = n_ex * kvh, dec_tasks = n > 1 ? n_dec * kvh : 0;
  fwd_->pool().parallel_for(ex_tasks + dec_tasks, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      if (t < ex_tasks) {  // exact row s = ex_first + t/kvh, head g
        const int64_t s = ex_first + t / kvh, g = t % kvh;
        const float *ks, *vs;
        if (s >= pos0) {
          ks = k_.data() + (s - pos0) * kv_dim + g * d;
          vs = v_.data() + (s - pos0) * kv_dim + g * d;
        } else {
          const int64_t r = held - (pos0 - s);
          ks = l.ek.data() + r * kv_dim + g * d;
          vs = l.ev.data() + r * kv_dim + g * d;
        }
        key_to_domain(li, g, ks, ekr_.data() + t * d);
        float* vd = evr_.data() + t * d;
        std::copy(vs, vs + d, vd);
        turbo::rotate(vd, d);
      } else {  // decoded row s = lo0 + u/kvh (prefill only; decode reads the codes in place)
        const int64_t u = t - ex_tasks;
        const size_t off = static_cast<size_t>(lo0 - l.first_pos) * row_bytes_ + static_cast<size_t>(u) * vb;
        codec_.decode_rotated(l.k.data() + off, kr_.data() + u * d);
        codec_.decode_rotated(l.v.data() + off, vr_.data() + u * d);
      }
    }
  }, 16);

  // 3. Queries: qc = q·c per head, then q' = R·(q / a).
  const float* inv = kinv_[static_cast<size_t>(li)].data();
  qc_.resize(static_cast<size_t>(n * c.n_heads));
  for (int64_t t = 0; t < n * c.n_heads; ++t) {
    float* qh = q_.data() + t * d;
    qc_[static_cast<size_t>(t)] = compute::dot_f32(qh, centre + ((t % c.n_heads) / group) * d, d);
    for (int64_t i = 0; i < d; ++i) qh[i] *= inv[i];
    turbo::rotate(qh, d);
  }
  prof_codec.reset();

  // 4. Attention, one (query, KV group) at a time.
  {
    const profile::Scope prof(profile::Stage::Attention);
    const float scale = c.attn_scale, cap = c.attn_logit_softcap;
    auto one = [&](int64_t i, int64_t g, ThreadPool* pool, std::vector<float>& scores, std::vector<float>& partial) {
      const int64_t p = pos0 + i, lo = lo_of(p), rows = p - lo + 1;
      scores.resize(static_cast<size_t>(group * rows));
      partial.resize(static_cast<size_t>(((rows + kBlock - 1) / kBlock) * group * d));
      const int64_t first_exact = std::max(lo, p - R + 1);  // rows s >= first_exact are exact
      auto exact = [&](const std::vector<float>& buf, int64_t s) { return buf.data() + ((s - ex_first) * kvh + g) * d; };
      auto krow = [&](int64_t t, float* buf) -> const float* {
        const int64_t s = lo + t;
        if (s >= first_exact) return exact(ekr_, s);
        if (n > 1) return kr_.data() + ((s - lo0) * kvh + g) * d;
        codec_.decode_rotated(l.k.data() + static_cast<size_t>(s - l.first_pos) * row_bytes_ + static_cast<size_t>(g) * vb, buf);
        return buf;
      };
      auto vrow = [&](int64_t t, float* buf) -> const float* {
        const int64_t s = lo + t;
        if (s >= first_exact) return exact(evr_, s);
        if (n > 1) return vr_.data() + ((s - lo0) * kvh + g) * d;
        codec_.decode_rotated(l.v.data() + static_cast<size_t>(s - l.first_pos) * row_bytes_ + static_cast<size_t>(g) * vb, buf);
        return buf;
      };
      float* out = attn_.data() + i * q_dim + g * group * d;
      attend_rows(pool, rows, group, d, q_.data() + i * q_dim + g * group * d, qc_.data() + i * c.n_heads + g * group,
                  scale, cap, krow, vrow, scores.data(), partial.data(), out);
      for (int64_t h = 0; h < group; ++h) turbo::rotate(out + h * d, d);
    };
    if (n == 1) {
      thread_local std::vector<float> scores, partial;
      for (int64_t g = 0; g < kvh; ++g) one(0, g, &fwd_->pool(), scores, partial);
    } else {
      fwd_->pool().parallel_for(n * kvh, [&](int64_t b, int64_t e) {
        thread_local std::vector<float> scores, partial;
        for (int64_t t = b; t < e; ++t) one(t / kvh, t % kvh, nullptr, scores, partial);
      });
    }
  }

  // 5. Keep the exact rows of the last R positions; sliding layers keep only their window
  //    (evicted lazily, compacted when half is dead).
  if (R > 0) {
    l.ek.insert(l.ek.end(), k_.begin(), k_.end());
    l.ev.insert(l.ev.end(), v_.begin(), v_.end());
    const int64_t drop = exact_rows(l) - R;
    if (drop > 0) {
      l.ek.erase(l.ek.begin(), l.ek.begin() + static_cast<std::ptrdiff_t>(drop * kv_dim));
      l.ev.erase(l.ev.begin(), l.ev.begin() + static_cast<std::ptrdiff_t>(drop * kv_dim));
    }
  }
  if (l.keep > 0 && live_rows(l) > l.keep) {
    l.start += live_rows(l) - l.keep;
    if (l.start > rows_total(l) / 2) {
      const size_t cut = static_cast<size_t>(l.start) * row_bytes_;
      l.k.erase(l.k.begin(), l.k.begin() + static_cast<std::ptrdiff_t>(cut));
      l.v.erase(l.v.begin(), l.v.begin() + static_cast<std::ptrdiff_t>(cut));
      l.first_pos += l.start;
      l.start = 0;
    }
  }
  fwd_->finish_layer(li, attn_.data(), n, x, pos0);
}

std::vector<float> TurboQuantEngine::run(const int32_t* tokens, int64_t n) {
  const ModelConfig& c = fwd_->config();
  check_context(n_past_ + n, c);
  std::vector<float> x(static_cast<size_t>(std::min(n, fwd_->chunk()) * c.hidden));
  std::vector<float> last(static_cast<size_t>(c.hidden));
  for (int64_t off = 0; off < n; off += fwd_->chunk()) {
    const int64_t m = std::min(fwd_->chunk(), n - off);
    fwd_->embed(tokens + off, m, x.data());
    for (int64_t li = 0; li < c.n_layers; ++li) layer_step(li, x.data(), m, n_past_);
    n_past_ += m;
    std::copy(x.begin() + (m - 1) * c.hidden, x.begin() + m * c.hidden, last.begin());
  }
  return last;
}

std::vector<float> TurboQuantEngine::prefill(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) throw Error(ErrorKind::EmptyPrompt, "prefill: the prompt has no tokens");
  clear_layers();
  started_ = false;
  try {
    auto out = run(tokens.data(), static_cast<int64_t>(tokens.size()));
    started_ = true;
    return out;
  } catch (...) {
    clear_layers();  // never leave a half-written sequence behind
    throw;
  }
}

std::vector<float> TurboQuantEngine::decode_step(int32_t token) {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "decode_step before prefill");
  return run(&token, 1);
}

EngineInfo TurboQuantEngine::info() const {
  std::string config = "bits=" + std::to_string(bits_);
  if (recent_ != kDefaultRecent) config += ",recent=" + std::to_string(recent_);
  return {"turbo-quant", "cpu", config};
}

EngineMemory TurboQuantEngine::memory() const {
  size_t bytes = 0;
  for (const auto& l : layers_) bytes += (static_cast<size_t>(live_rows(l)) * row_bytes_ + l.ek.size() * 4) * 2;
  return {bytes, 0, 0};
}

void TurboQuantEngine::round_trip(int64_t layer, bool is_key, const float* row, float* out) const {
  const ModelConfig& c = fwd_->config();
  const int64_t d = c.head_dim;
  std::vector<uint8_t> enc(codec_.bytes_per_vector());
  std::vector<float> t(static_cast<size_t>(d));
  const float* a = kscale_.at(static_cast<size_t>(layer)).data();
  const float* cen = kcentre_.at(static_cast<size_t>(layer)).data();
  for (int64_t g = 0; g < c.n_kv_heads; ++g) {
    const float* r = row + g * d;
    float* o = out + g * d;
    if (is_key) {
      for (int64_t i = 0; i < d; ++i) t[static_cast<size_t>(i)] = r[i] - cen[g * d + i];
      encode_key(layer, t.data(), enc.data());
      codec_.decode(enc.data(), o);
      for (int64_t i = 0; i < d; ++i) o[i] = o[i] / a[i] + cen[g * d + i];
    } else {
      codec_.encode(r, enc.data());
      codec_.decode(enc.data(), o);
    }
  }
}

void TurboQuantEngine::decoded_rows(int64_t layer, std::vector<float>& k, std::vector<float>& v, int64_t& first_pos) const {
  const ModelConfig& c = fwd_->config();
  const QuantLayer& l = layers_.at(static_cast<size_t>(layer));
  const int64_t rows = live_rows(l), d = c.head_dim, kvh = c.n_kv_heads;
  const size_t vb = codec_.bytes_per_vector(), base = static_cast<size_t>(l.start) * row_bytes_;
  const float* a = kscale_[static_cast<size_t>(layer)].data();
  const float* cen = kcentre_[static_cast<size_t>(layer)].data();
  first_pos = l.first_pos + l.start;
  k.resize(static_cast<size_t>(rows * c.kv_dim()));
  v.resize(k.size());
  for (int64_t t = 0; t < rows * kvh; ++t) {
    float* kd = k.data() + t * d;
    codec_.decode(l.k.data() + base + static_cast<size_t>(t) * vb, kd);
    for (int64_t i = 0; i < d; ++i) kd[i] = kd[i] / a[i] + cen[(t % kvh) * d + i];
    codec_.decode(l.v.data() + base + static_cast<size_t>(t) * vb, v.data() + t * d);
  }
}

void TurboQuantEngine::recent_rows(int64_t layer, std::vector<float>& k, std::vector<float>& v, int64_t& first_pos) const {
  const QuantLayer& l = layers_.at(static_cast<size_t>(layer));
  k = l.ek;
  v = l.ev;
  first_pos = n_past_ - exact_rows(l);
}

// Payload: u64 version (2), u64 bits, u64 head_dim, u64 n_kv_heads, u64 recent; then per layer
// u64 first_pos, u64 rows, the rows' encoded K bytes then V bytes (rows × row_bytes each,
// zero-padded to 4 bytes), u64 exact rows e, f32 K [e, kv_dim], f32 V [e, kv_dim] (the last e
// positions).
void TurboQuantEngine::save_state(const std::string& path) const {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "save_state before prefill");
  const ModelConfig& c = fwd_->config();
  StateWriter w(path, {"turbo-quant", info().config, fwd_->model().fingerprint(), static_cast<uint64_t>(n_past_), session_});
  w.u64(kPayloadVersion);
  w.u64(static_cast<uint64_t>(bits_));
  w.u64(static_cast<uint64_t>(c.head_dim));
  w.u64(static_cast<uint64_t>(c.n_kv_heads));
  w.u64(static_cast<uint64_t>(recent_));
  for (const auto& l : layers_) {
    const int64_t rows = live_rows(l);
    w.u64(static_cast<uint64_t>(l.first_pos + l.start));
    w.u64(static_cast<uint64_t>(rows));
    const size_t base = static_cast<size_t>(l.start) * row_bytes_, n = static_cast<size_t>(rows) * row_bytes_;
    write_bytes(w, l.k.data() + base, n);
    write_bytes(w, l.v.data() + base, n);
    w.u64(static_cast<uint64_t>(exact_rows(l)));
    w.floats(l.ek.data(), l.ek.size());
    w.floats(l.ev.data(), l.ev.size());
  }
  w.close();
}

void TurboQuantEngine::load_state(const std::string& path) {
  const ModelConfig& c = fwd_->config();
  StateReader r(path);
  const StateHeader h = r.header("turbo-quant", fwd_->model().fingerprint(), info().config);
  const uint64_t version = r.u64();
  if (version == 3 || version == 4)
    throw Error(ErrorKind::InvariantViolation, path + ": written by turbo-quant's first codec (no key transform, no "
                                                      "exact window), which this build does not read; re-create it");
  if (version != kPayloadVersion)
    throw Error(ErrorKind::Format, path + ": turbo-quant payload version " + std::to_string(version) +
                                       " (this build reads " + std::to_string(kPayloadVersion) + ")");
  const uint64_t bits = r.u64(), hd = r.u64(), kvh = r.u64(), recent = r.u64();
  if (bits != static_cast<uint64_t>(bits_) || hd != static_cast<uint64_t>(c.head_dim) ||
      kvh != static_cast<uint64_t>(c.n_kv_heads) || recent != static_cast<uint64_t>(recent_))
    throw Error(ErrorKind::Format, path + ": codec header (bits " + std::to_string(bits) + ", head_dim " +
                                       std::to_string(hd) + ", kv heads " + std::to_string(kvh) + ", recent " +
                                       std::to_string(recent) + ") does not match the header's config and the model");
  if (h.n_past == 0 || h.n_past > static_cast<uint64_t>(c.context_length))
    throw Error(ErrorKind::Format, path + ": n_past " + std::to_string(h.n_past) + " is outside [1, context length]");
  std::vector<QuantLayer> fresh(static_cast<size_t>(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    QuantLayer& l = fresh[static_cast<size_t>(i)];
    const LayerConfig& lc = c.layers[static_cast<size_t>(i)];
    l.keep = lc.sliding ? lc.window : 0;
    const uint64_t first = r.u64(), rows = r.u64();
    const uint64_t want = l.keep > 0 ? std::min<uint64_t>(h.n_past, static_cast<uint64_t>(l.keep)) : h.n_past;
    if (rows != want || first + rows != h.n_past)
      throw Error(ErrorKind::Format, path + ": layer " + std::to_string(i) + " holds " + std::to_string(rows) +
                                         " rows from position " + std::to_string(first) + "; expected " +
                                         std::to_string(want) + " rows ending at n_past " + std::to_string(h.n_past));
    l.first_pos = static_cast<int64_t>(first);
    l.k.resize(static_cast<size_t>(rows) * row_bytes_);
    l.v.resize(l.k.size());
    read_bytes(r, l.k.data(), l.k.size());
    read_bytes(r, l.v.data(), l.v.size());
    const uint64_t ex = r.u64(), want_ex = std::min<uint64_t>(rows, static_cast<uint64_t>(recent_of(i)));
    if (ex != want_ex)
      throw Error(ErrorKind::Format, path + ": layer " + std::to_string(i) + " holds " + std::to_string(ex) +
                                         " exact rows; expected " + std::to_string(want_ex));
    l.ek.resize(static_cast<size_t>(ex * static_cast<uint64_t>(c.kv_dim())));
    l.ev.resize(l.ek.size());
    r.floats(l.ek.data(), l.ek.size());
    r.floats(l.ev.data(), l.ev.size());
  }
  r.expect_end();
  session_ = h.session;
  layers_ = std::move(fresh);
  n_past_ = static_cast<int64_t>(h.n_past);
  started_ = true;
}

}  // namespace larql
