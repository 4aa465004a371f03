#include "kv/turbo_quant.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <cstring>

#include "compute/ops.h"
#include "kv/state_file.h"
#include "util/profile.h"
#include "util/error.h"

namespace larql {
namespace {

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

}  // namespace

TurboQuantEngine::TurboQuantEngine(std::shared_ptr<Forward> forward, int bits)
    : fwd_(std::move(forward)), bits_(bits), codec_(make_codec(*fwd_, bits)),
      row_bytes_(static_cast<size_t>(fwd_->config().n_kv_heads) * codec_.bytes_per_vector()) {
  clear_layers();
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

void TurboQuantEngine::layer_step(int64_t li, float* x, int64_t n, int64_t pos0) {
  const ModelConfig& c = fwd_->config();
  const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
  const int64_t d = c.head_dim, kvh = c.n_kv_heads, kv_dim = c.kv_dim(), q_dim = c.q_dim();
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

  // Encode the new rows (only these; older rows are never touched again).
  const size_t old = l.k.size();
  l.k.resize(old + static_cast<size_t>(n) * row_bytes_);
  l.v.resize(old + static_cast<size_t>(n) * row_bytes_);
  fwd_->pool().parallel_for(n * kvh, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const size_t off = old + static_cast<size_t>(t) * vb;  // row t/kvh, head t%kvh
      codec_.encode(k_.data() + t * d, l.k.data() + off);
      codec_.encode(v_.data() + t * d, l.v.data() + off);
    }
  });

  if (n == 1) {  // decode: attention straight from the codes (no decoded copy of the cache)
    attend_codes(li, pos0);
    finish_after_attention(li, l, x, 1);
    return;
  }

  // The rows the chunk's queries can see, in the rotated domain: older rows decoded from their
  // codes, the chunk's own rows exact (the reference system's choice: a prompt attends to itself
  // at full precision, so a single-chunk prefill matches standard; each row is quantised once,
  // after the step that produced it).
  int64_t lo = l.first_pos + l.start;
  if (lc.sliding) lo = std::max(lo, pos0 - lc.window + 1);
  const int64_t rows = pos0 + n - lo, prior = pos0 - lo;
  kr_.resize(static_cast<size_t>(rows * kv_dim));
  vr_.resize(static_cast<size_t>(rows * kv_dim));
  const size_t base = static_cast<size_t>(lo - l.first_pos) * row_bytes_;
  std::optional<profile::Scope> prof_codec(std::in_place, profile::Stage::Codec);
  fwd_->pool().parallel_for(rows * kvh, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* kd = kr_.data() + t * d;
      float* vd = vr_.data() + t * d;
      if (t < prior * kvh) {
        codec_.decode_rotated(l.k.data() + base + static_cast<size_t>(t) * vb, kd);
        codec_.decode_rotated(l.v.data() + base + static_cast<size_t>(t) * vb, vd);
      } else {
        const int64_t u = t - prior * kvh;  // new row u/kvh, head u%kvh
        std::copy(k_.data() + u * d, k_.data() + (u + 1) * d, kd);
        std::copy(v_.data() + u * d, v_.data() + (u + 1) * d, vd);
        turbo::rotate(kd, d);
        turbo::rotate(vd, d);
      }
    }
  }, 16);
  prof_codec.reset();

  // Attention in the rotated domain: R·q in, R·out back (R·R = I).
  const int64_t qvecs = n * c.n_heads;
  for (int64_t t = 0; t < qvecs; ++t) turbo::rotate(q_.data() + t * d, d);
  fwd_->attend(li, q_.data(), n, pos0, KvSpan{kr_.data(), vr_.data(), lo, rows}, attn_.data());
  for (int64_t t = 0; t < qvecs; ++t) turbo::rotate(attn_.data() + t * d, d);

  finish_after_attention(li, l, x, n);
}

void TurboQuantEngine::finish_after_attention(int64_t li, QuantLayer& l, float* x, int64_t n) {
  // Sliding layers keep only their window (evicted lazily, compacted when half is dead).
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
  fwd_->finish_layer(li, attn_.data(), n, x);
}

void TurboQuantEngine::attend_codes(int64_t li, int64_t pos) {
  // One query position `pos` (already appended and encoded). Scores and the weighted sum of V are
  // taken in the rotated domain, decoding each stored row into a small buffer that stays in L1
  // and serves every query head of its K/V group; the new row (the query's own) is exact, as in
  // the chunked path. Row blocks (64 rows) run in parallel; their partial sums are added in
  // block order, so the result does not depend on the thread count. Profiled as attention:
  // decoding is fused into it.
  const profile::Scope prof(profile::Stage::Attention);
  const ModelConfig& c = fwd_->config();
  const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
  QuantLayer& l = layers_[static_cast<size_t>(li)];
  const int64_t d = c.head_dim, kvh = c.n_kv_heads, group = c.n_heads / c.n_kv_heads, q_dim = c.q_dim();
  const size_t vb = codec_.bytes_per_vector();
  int64_t lo = l.first_pos + l.start;
  if (lc.sliding) lo = std::max(lo, pos - lc.window + 1);
  const int64_t rows = pos + 1 - lo, prior = pos - lo;
  const size_t base = static_cast<size_t>(lo - l.first_pos) * row_bytes_;
  // The new row, exact and rotated (k_/v_ hold it from qkv()).
  for (int64_t g = 0; g < kvh; ++g) {
    turbo::rotate(k_.data() + g * d, d);
    turbo::rotate(v_.data() + g * d, d);
  }
  for (int64_t h = 0; h < c.n_heads; ++h) turbo::rotate(q_.data() + h * d, d);
  const float scale = c.attn_scale, cap = c.attn_logit_softcap;
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
  scores_.resize(static_cast<size_t>(c.n_heads * rows));
  partial_.assign(static_cast<size_t>(blocks * q_dim), 0.0f);
  auto row_of = [&](const std::vector<uint8_t>& codes, const std::vector<float>& exact, int64_t t, int64_t g,
                    float* buf) -> const float* {
    if (t < prior) {
      codec_.decode_rotated(codes.data() + base + static_cast<size_t>(t) * row_bytes_ + static_cast<size_t>(g) * vb, buf);
      return buf;
    }
    return exact.data() + g * d;
  };
  fwd_->pool().parallel_for(blocks, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    buf.resize(static_cast<size_t>(d));
    for (int64_t blk = b; blk < e; ++blk)
      for (int64_t t = blk * kBlock; t < std::min(rows, (blk + 1) * kBlock); ++t)
        for (int64_t g = 0; g < kvh; ++g) {
          const float* kr = row_of(l.k, k_, t, g, buf.data());
          for (int64_t h = g * group; h < (g + 1) * group; ++h) {
            float sc = compute::dot_f32(q_.data() + h * d, kr, d) * scale;
            if (cap > 0) sc = cap * std::tanh(sc / cap);
            scores_[static_cast<size_t>(h * rows + t)] = sc;
          }
        }
  });
  for (int64_t h = 0; h < c.n_heads; ++h) compute::softmax(scores_.data() + h * rows, rows);
  fwd_->pool().parallel_for(blocks, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    buf.resize(static_cast<size_t>(d));
    for (int64_t blk = b; blk < e; ++blk) {
      float* acc = partial_.data() + blk * q_dim;
      for (int64_t t = blk * kBlock; t < std::min(rows, (blk + 1) * kBlock); ++t)
        for (int64_t g = 0; g < kvh; ++g) {
          const float* vr = row_of(l.v, v_, t, g, buf.data());
          for (int64_t h = g * group; h < (g + 1) * group; ++h)
            compute::axpy(scores_[static_cast<size_t>(h * rows + t)], vr, acc + h * d, d);
        }
    }
  });
  attn_.assign(static_cast<size_t>(q_dim), 0.0f);
  for (int64_t blk = 0; blk < blocks; ++blk)
    for (int64_t i = 0; i < q_dim; ++i) attn_[static_cast<size_t>(i)] += partial_[static_cast<size_t>(blk * q_dim + i)];
  for (int64_t h = 0; h < c.n_heads; ++h) turbo::rotate(attn_.data() + h * d, d);
}

std::vector<float> TurboQuantEngine::run(const int32_t* tokens, int64_t n) {
  const ModelConfig& c = fwd_->config();
  check_context(n_past_ + n, c);
  std::vector<float> x(static_cast<size_t>(std::min(n, Forward::kChunk) * c.hidden));
  std::vector<float> last(static_cast<size_t>(c.hidden));
  for (int64_t off = 0; off < n; off += Forward::kChunk) {
    const int64_t m = std::min(Forward::kChunk, n - off);
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

EngineInfo TurboQuantEngine::info() const { return {"turbo-quant", "cpu", "bits=" + std::to_string(bits_)}; }

EngineMemory TurboQuantEngine::memory() const {
  size_t bytes = 0;
  for (const auto& l : layers_) bytes += static_cast<size_t>(live_rows(l)) * row_bytes_ * 2;
  return {bytes, 0, 0};
}

void TurboQuantEngine::decoded_rows(int64_t layer, std::vector<float>& k, std::vector<float>& v, int64_t& first_pos) const {
  const ModelConfig& c = fwd_->config();
  const QuantLayer& l = layers_.at(static_cast<size_t>(layer));
  const int64_t rows = live_rows(l), d = c.head_dim, kvh = c.n_kv_heads;
  const size_t vb = codec_.bytes_per_vector(), base = static_cast<size_t>(l.start) * row_bytes_;
  first_pos = l.first_pos + l.start;
  k.resize(static_cast<size_t>(rows * c.kv_dim()));
  v.resize(k.size());
  for (int64_t t = 0; t < rows * kvh; ++t) {
    codec_.decode(l.k.data() + base + static_cast<size_t>(t) * vb, k.data() + t * d);
    codec_.decode(l.v.data() + base + static_cast<size_t>(t) * vb, v.data() + t * d);
  }
}

// Payload: u64 bits, u64 head_dim, u64 n_kv_heads; then per layer u64 first_pos, u64 rows and
// the rows' encoded K bytes then V bytes (rows × row_bytes each, zero-padded to 4 bytes).
void TurboQuantEngine::save_state(const std::string& path) const {
  if (!started_) throw Error(ErrorKind::InvariantViolation, "save_state before prefill");
  const ModelConfig& c = fwd_->config();
  StateWriter w(path, {"turbo-quant", info().config, fwd_->model().fingerprint(), static_cast<uint64_t>(n_past_), session_});
  w.u64(static_cast<uint64_t>(bits_));
  w.u64(static_cast<uint64_t>(c.head_dim));
  w.u64(static_cast<uint64_t>(c.n_kv_heads));
  for (const auto& l : layers_) {
    const int64_t rows = live_rows(l);
    w.u64(static_cast<uint64_t>(l.first_pos + l.start));
    w.u64(static_cast<uint64_t>(rows));
    const size_t base = static_cast<size_t>(l.start) * row_bytes_, n = static_cast<size_t>(rows) * row_bytes_;
    write_bytes(w, l.k.data() + base, n);
    write_bytes(w, l.v.data() + base, n);
  }
  w.close();
}

void TurboQuantEngine::load_state(const std::string& path) {
  const ModelConfig& c = fwd_->config();
  StateReader r(path);
  const StateHeader h = r.header("turbo-quant", fwd_->model().fingerprint(), info().config);
  const uint64_t bits = r.u64(), hd = r.u64(), kvh = r.u64();
  if (bits != static_cast<uint64_t>(bits_) || hd != static_cast<uint64_t>(c.head_dim) ||
      kvh != static_cast<uint64_t>(c.n_kv_heads))
    throw Error(ErrorKind::Format, path + ": codec header (bits " + std::to_string(bits) + ", head_dim " +
                                       std::to_string(hd) + ", kv heads " + std::to_string(kvh) +
                                       ") does not match the header's config and the model");
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
  }
  r.expect_end();
  session_ = h.session;
  layers_ = std::move(fresh);
  n_past_ = static_cast<int64_t>(h.n_past);
  started_ = true;
}

}  // namespace larql
