#include "inference/forward.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "compute/attention.h"
#include "compute/ops.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/profile.h"

namespace larql {

namespace {
enum Buf { kH, kQ, kK, kV, kAttn, kO, kGate, kUp, kDown, kCount };
}

Forward::Forward(std::shared_ptr<const Model> model, int n_threads)
    : model_(std::move(model)), pool_(n_threads), scratch_(kCount) {}

std::vector<float>& Forward::buf(int idx, size_t n) {
  auto& b = scratch_[static_cast<size_t>(idx)];
  if (b.size() < n) b.resize(n);
  return b;
}

void Forward::embed(const int32_t* tokens, int64_t n, float* x) {
  const profile::Scope prof(profile::Stage::Embed);
  const ModelConfig& c = config();
  const TensorView& e = model_->weights().token_embd;
  for (int64_t t = 0; t < n; ++t) {
    const int32_t id = tokens[t];
    if (id < 0 || id >= e.rows)
      throw Error(ErrorKind::InvalidArgument, "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                                  std::to_string(e.rows) + ")");
    float* row = x + t * c.hidden;
    quant::dequantize_row(e.type, e.row(id), row, c.hidden);
    for (int64_t i = 0; i < c.hidden; ++i) row[i] *= c.embed_scale;
  }
}

const float* Forward::attn_input(int64_t li, const float* x, int64_t n) {
  const ModelConfig& c = config();
  const LayerWeights& w = model_->weights().layers[static_cast<size_t>(li)];
  auto& h = buf(kH, static_cast<size_t>(n * c.hidden));
  for (int64_t t = 0; t < n; ++t) compute::rmsnorm(x + t * c.hidden, w.attn_norm.data(), h.data() + t * c.hidden, c.hidden, c.norm_eps);
  return h.data();
}

void Forward::project_kv(int64_t li, int64_t n, int64_t pos0, float* q, float* k, float* v) {
  const ModelConfig& c = config();
  const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
  const LayerWeights& w = model_->weights().layers[static_cast<size_t>(li)];
  if (q != nullptr) {
    compute::matmul_many(pool_, acts_, {{w.wq, q}, {w.wk, k}, {w.wv, v}});
  } else {
    compute::matmul_many(pool_, acts_, {{w.wk, k}, {w.wv, v}});
  }
  if (c.qkv_bias) {  // added after the projection (llama.cpp llm_build_llama / qwen2)
    compute::add_bias_rows(k, w.bk.data(), n, c.kv_dim());
    compute::add_bias_rows(v, w.bv.data(), n, c.kv_dim());
    if (q != nullptr) compute::add_bias_rows(q, w.bq.data(), n, c.q_dim());
  }
  for (int64_t t = 0; t < n; ++t) {
    float* kt = k + t * c.kv_dim();
    if (c.qk_norm) compute::rmsnorm_rows(kt, w.k_norm.data(), c.n_kv_heads, c.head_dim, c.norm_eps);
    (lc.rope_form == RopeForm::Adjacent ? compute::rope_adjacent : compute::rope_neox)(kt, c.n_kv_heads, c.head_dim, pos0 + t, lc.rope_base, lc.rope_freq_scale);
  }
}

void Forward::qkv(int64_t li, const float* x, int64_t n, int64_t pos0, float* q, float* k, float* v) {
  const profile::Scope prof(profile::Stage::Qkv);
  const ModelConfig& c = config();
  const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
  const LayerWeights& w = model_->weights().layers[static_cast<size_t>(li)];
  acts_.reset(attn_input(li, x, n), n, c.hidden);
  project_kv(li, n, pos0, q, k, v);
  for (int64_t t = 0; t < n; ++t) {
    float* qt = q + t * c.q_dim();
    if (c.qk_norm) compute::rmsnorm_rows(qt, w.q_norm.data(), c.n_heads, c.head_dim, c.norm_eps);
    (lc.rope_form == RopeForm::Adjacent ? compute::rope_adjacent : compute::rope_neox)(qt, c.n_heads, c.head_dim, pos0 + t, lc.rope_base, lc.rope_freq_scale);
  }
}

void Forward::kv_from_residual(int64_t li, const float* x, int64_t n, int64_t pos0, float* k, float* v) {
  const profile::Scope prof(profile::Stage::Qkv);
  acts_.reset(attn_input(li, x, n), n, config().hidden);
  project_kv(li, n, pos0, nullptr, k, v);
}

void Forward::attend(int64_t li, const float* q, int64_t n, int64_t pos0, const KvSpan& kv, float* out,
                     const AttendMask& mask) {
  const profile::Scope prof(profile::Stage::Attention);
  const ModelConfig& c = config();
  const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
  const int64_t hd = c.head_dim, kv_dim = c.kv_dim(), group = c.n_heads / c.n_kv_heads;
  const int64_t kv_end = kv.first_pos + kv.rows;
  // Validate here: nothing may throw inside the pool's workers.
  if (n > 0 && (pos0 + n > kv_end || kv.rows == 0 || pos0 < kv.first_pos))
    throw Error(ErrorKind::InvariantViolation, "attend: layer " + std::to_string(li) + " K/V ends at position " +
                                                   std::to_string(kv_end) + " but a query is at " +
                                                   std::to_string(pos0 + n - 1));
  const bool has_sink = mask.sink.rows > 0;
  const int64_t sink_end = has_sink ? mask.sink.first_pos + mask.sink.rows : kv.first_pos;
  const int64_t alt_end = mask.alt.first_pos + mask.alt.rows;
  const float scale = c.attn_scale;
  const float cap = c.attn_logit_softcap;
  // A task is one query row's heads of one K/V group (they share the K/V loads), or a single
  // head when there are too few rows to keep every thread busy; the arithmetic per head is the
  // same either way (compute::attend_group). Rows are dealt first, last, second, ... so causal
  // rows of very different lengths spread evenly over the threads' contiguous chunks.
  const int64_t per_task = n >= pool_.size() ? group : 1;
  const int64_t tasks_per_row = c.n_heads / per_task;
  auto run = [&](int64_t b, int64_t e) {
    thread_local std::vector<float> scores;
    thread_local std::vector<const float*> krow, vrow;
    for (int64_t task = b; task < e; ++task) {
      const int64_t i = task / tasks_per_row, t = i % 2 == 0 ? i / 2 : n - 1 - i / 2;
      const int64_t head = (task % tasks_per_row) * per_task, g = head / group;
      const int64_t pos = pos0 + t;
      // The visible keys, ascending: sink rows, then kv rows from `lo` (AttendMask).
      const int64_t model_lo = lc.sliding ? pos - lc.window + 1 : kv.first_pos;
      int64_t lo = std::max({kv.first_pos, model_lo, sink_end});
      if (mask.window > 0) lo = std::max(lo, pos - mask.window + 1);
      const int64_t s_lo = lc.sliding ? std::max(mask.sink.first_pos, model_lo) : mask.sink.first_pos;
      const int64_t s_hi = std::min(sink_end, pos + 1);
      const int64_t ns = has_sink ? std::max<int64_t>(0, s_hi - s_lo) : 0;
      const int64_t m = ns + (pos - lo + 1);  // >= 1: the query's own row is in kv or the sink
      const bool alt_used = mask.alt.rows > 0 &&
                            std::max(lo, mask.alt.first_pos) <= std::min(pos - mask.alt_recent, alt_end - 1);
      if (static_cast<int64_t>(scores.size()) < per_task * m) scores.resize(static_cast<size_t>(per_task * m));
      if (ns == 0 && !alt_used) {  // one contiguous run of kv rows: the shared-load kernel
        const int64_t off = (lo - kv.first_pos) * kv_dim + g * hd;
        compute::attend_group(q + t * c.q_dim() + head * hd, per_task, kv.k + off, kv.v + off, m, kv_dim, hd, scale,
                              cap, scores.data(), out + t * c.q_dim() + head * hd);
        continue;
      }
      // Rows from several places (sink, alt): gathered, then the same arithmetic per head as
      // compute::attend_group (dot_f32, softmax, axpy in key order), so the bits do not depend
      // on which path a query took.
      if (static_cast<int64_t>(krow.size()) < m) {
        krow.resize(static_cast<size_t>(m));
        vrow.resize(static_cast<size_t>(m));
      }
      for (int64_t j = 0; j < ns; ++j) {
        krow[static_cast<size_t>(j)] = mask.sink.k + (s_lo + j - mask.sink.first_pos) * kv_dim + g * hd;
        vrow[static_cast<size_t>(j)] = mask.sink.v + (s_lo + j - mask.sink.first_pos) * kv_dim + g * hd;
      }
      for (int64_t j = lo; j <= pos; ++j) {
        const bool from_alt = mask.alt.rows > 0 && j >= mask.alt.first_pos && j < alt_end && j <= pos - mask.alt_recent;
        const KvSpan& src = from_alt ? mask.alt : kv;
        krow[static_cast<size_t>(ns + j - lo)] = src.k + (j - src.first_pos) * kv_dim + g * hd;
        vrow[static_cast<size_t>(ns + j - lo)] = src.v + (j - src.first_pos) * kv_dim + g * hd;
      }
      for (int64_t h = head; h < head + per_task; ++h) {
        const float* qh = q + t * c.q_dim() + h * hd;
        for (int64_t j = 0; j < m; ++j) {
          float s = compute::dot_f32(qh, krow[static_cast<size_t>(j)], hd) * scale;
          if (cap > 0) s = cap * std::tanh(s / cap);
          scores[static_cast<size_t>(j)] = s;
        }
        compute::softmax(scores.data(), m);
        float* o = out + t * c.q_dim() + h * hd;
        std::fill(o, o + hd, 0.0f);
        for (int64_t j = 0; j < m; ++j) compute::axpy(scores[static_cast<size_t>(j)], vrow[static_cast<size_t>(j)], o, hd);
      }
    }
  };
  // One captured reference fits std::function's inline buffer: no allocation per call.
  pool_.parallel_for(n * tasks_per_row, [&run](int64_t b, int64_t e) { run(b, e); });
}

void Forward::finish_layer(int64_t li, const float* attn, int64_t n, float* x) {
  const ModelConfig& c = config();
  const LayerWeights& w = model_->weights().layers[static_cast<size_t>(li)];
  const int64_t H = c.hidden;
  std::optional<profile::Scope> prof(std::in_place, profile::Stage::AttnOut);
  auto& o = buf(kO, static_cast<size_t>(n * H));
  acts_.reset(attn, n, c.q_dim());
  compute::matmul(pool_, w.wo, acts_, o.data());
  for (int64_t t = 0; t < n; ++t) {
    float* ot = o.data() + t * H;
    if (c.post_norms) compute::rmsnorm(ot, w.post_attn_norm.data(), ot, H, c.norm_eps);
    float* xt = x + t * H;
    for (int64_t i = 0; i < H; ++i) xt[i] += ot[i];
  }
  prof.reset();
  const profile::Scope prof_ffn(profile::Stage::Ffn);
  auto& h = buf(kH, static_cast<size_t>(n * H));
  for (int64_t t = 0; t < n; ++t) compute::rmsnorm(x + t * H, w.ffn_norm.data(), h.data() + t * H, H, c.norm_eps);
  auto& gate = buf(kGate, static_cast<size_t>(n * c.ffn));
  auto& up = buf(kUp, static_cast<size_t>(n * c.ffn));
  acts_.reset(h.data(), n, H);
  compute::matmul_many(pool_, acts_, {{w.w_gate, gate.data()}, {w.w_up, up.data()}});
  if (c.activation == Activation::GeluTanh) {
    compute::gelu_tanh_mul(pool_, gate.data(), up.data(), gate.data(), n * c.ffn);
  } else {
    for (int64_t i = 0; i < n * c.ffn; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  }
  auto& down = buf(kDown, static_cast<size_t>(n * H));
  acts_.reset(gate.data(), n, c.ffn);
  compute::matmul(pool_, w.w_down, acts_, down.data());
  for (int64_t t = 0; t < n; ++t) {
    float* dt = down.data() + t * H;
    if (c.post_norms) compute::rmsnorm(dt, w.post_ffn_norm.data(), dt, H, c.norm_eps);
    float* xt = x + t * H;
    for (int64_t i = 0; i < H; ++i) xt[i] += dt[i];
  }
  if (layer_progress_) layer_progress_(n);
}

void Forward::layer(int64_t li, float* x, int64_t n, int64_t pos0, LayerKv& kv) {
  const ModelConfig& c = config();
  auto& q = buf(kQ, static_cast<size_t>(n * c.q_dim()));
  auto& k = buf(kK, static_cast<size_t>(n * c.kv_dim()));
  auto& v = buf(kV, static_cast<size_t>(n * c.kv_dim()));
  if (kv.end_pos() != pos0)
    throw Error(ErrorKind::InvariantViolation, "layer " + std::to_string(li) + ": K/V ends at " +
                                                   std::to_string(kv.end_pos()) + ", expected " + std::to_string(pos0));
  qkv(li, x, n, pos0, q.data(), k.data(), v.data());
  kv.append(k.data(), v.data(), n);
  auto& attn = buf(kAttn, static_cast<size_t>(n * c.q_dim()));
  attend(li, q.data(), n, pos0, span_of(kv), attn.data(), mask_of(kv));
  kv.evict();
  finish_layer(li, attn.data(), n, x);
}

void Forward::set_chunk(int64_t rows) {
  if (rows < 1) throw Error(ErrorKind::InvalidArgument, "Forward::set_chunk: rows=" + std::to_string(rows) + " (must be >= 1)");
  chunk_ = rows;
}

void Forward::forward(const int32_t* tokens, int64_t n, KvCache& cache, float* x) {
  const ModelConfig& c = config();
  for (int64_t off = 0; off < n; off += chunk_) {
    const int64_t m = std::min(chunk_, n - off);
    const int64_t pos0 = cache.n_past();
    float* xc = x + off * c.hidden;
    embed(tokens + off, m, xc);
    for (int64_t li = 0; li < c.n_layers; ++li) layer(li, xc, m, pos0, cache.layer(li));
  }
}

void Forward::logits(const float* x, int64_t n, float* logits) {
  const profile::Scope prof(profile::Stage::LmHead);
  const ModelConfig& c = config();
  const ModelWeights& w = model_->weights();
  auto& h = buf(kH, static_cast<size_t>(n * c.hidden));
  for (int64_t t = 0; t < n; ++t) compute::rmsnorm(x + t * c.hidden, w.output_norm.data(), h.data() + t * c.hidden, c.hidden, c.norm_eps);
  acts_.reset(h.data(), n, c.hidden);
  compute::matmul(pool_, w.lm_head, acts_, logits);
  if (c.final_logit_softcap > 0) {
    const float cap = c.final_logit_softcap;
    for (int64_t i = 0; i < n * w.lm_head.rows; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  }
}

}  // namespace larql
