#include "inference/forward.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "compute/attention.h"
#include "compute/ops.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/profile.h"

namespace larql {

namespace {

using G = Workspace;

DenseFfn& dense_ffn() {
  static DenseFfn d;
  return d;
}

MoeFfn& moe_ffn() {
  static MoeFfn m;
  return m;
}

}  // namespace

Forward::Forward(std::shared_ptr<const Model> model, int n_threads)
    : Forward(std::move(model), ThreadPool::shared(n_threads)) {}

Forward::Forward(std::shared_ptr<const Model> model, std::shared_ptr<ThreadPool> pool)
    : model_(std::move(model)), pool_(std::move(pool)) {
  if (!model_ || !pool_) throw Error(ErrorKind::InvalidArgument, "Forward: null model or pool");
}

std::shared_ptr<Forward> Forward::sibling() const {
  auto f = std::make_shared<Forward>(model_, pool_);
  f->ffns_ = ffns_;
  f->chunk_ = chunk_;
  f->device_ = device_;
  return f;
}

void Forward::set_ffn(int64_t li, std::shared_ptr<Ffn> ffn) {
  const int64_t n_layers = config().n_layers;
  if (li < 0 || li >= n_layers)
    throw Error(ErrorKind::InvalidArgument, "set_ffn: layer " + std::to_string(li) + " is outside [0, " +
                                                std::to_string(n_layers) + ")");
  if (ffns_.empty()) ffns_.resize(static_cast<size_t>(n_layers));
  ffns_[static_cast<size_t>(li)] = std::move(ffn);
}

Ffn& Forward::ffn(int64_t li) {
  if (!ffns_.empty() && ffns_[static_cast<size_t>(li)]) return *ffns_[static_cast<size_t>(li)];
  if (config().n_experts > 0) return moe_ffn();
  return dense_ffn();
}

void Forward::norm(NormSite site, int64_t li, const float* x, int64_t n, float* y) {
  const ModelConfig& c = config();
  const LayerWeights& w = model_->weights().layers[static_cast<size_t>(li)];
  const int64_t H = c.hidden;
  const bool post = site == NormSite::PostAttn || site == NormSite::PostFfn;
  if (post && !c.post_norms) {
    if (y != x) std::copy(x, x + n * H, y);
    return;
  }
  const float* wt = site == NormSite::Attn       ? w.attn_norm.data()
                    : site == NormSite::PostAttn ? w.post_attn_norm.data()
                    : site == NormSite::Ffn      ? w.ffn_norm.data()
                                                 : w.post_ffn_norm.data();
  for (int64_t t = 0; t < n; ++t) compute::rmsnorm(x + t * H, wt, y + t * H, H, c.norm_eps);
}

void Forward::embed(const int32_t* tokens, int64_t n, float* x) {
  const profile::Scope prof(profile::Stage::Embed);
  model_->require_embedding("embed");
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

void Forward::attn_input(int64_t li, const float* x, int64_t n) {
  require_attention(li);
  const int64_t H = config().hidden;
  float* h = G::grow(ws_.h, static_cast<size_t>(n * H));
  norm(NormSite::Attn, li, x, n, h);
  ws_.acts.reset(h, n, H);
}

void Forward::project_kv(int64_t li, int64_t n, int64_t pos0, const int64_t* pos, float* q, float* k, float* v) {
  const ModelConfig& c = config();
  const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
  const LayerWeights& w = model_->weights().layers[static_cast<size_t>(li)];
  if (q != nullptr) {
    compute::matmul_many(*pool_, ws_.acts, {{w.wq, q}, {w.wk, k}, {w.wv, v}});
  } else {
    compute::matmul_many(*pool_, ws_.acts, {{w.wk, k}, {w.wv, v}});
  }
  if (c.qkv_bias) {  // added after the projection (llama.cpp llm_build_llama / qwen2)
    compute::add_bias_rows(k, w.bk.data(), n, c.kv_dim());
    compute::add_bias_rows(v, w.bv.data(), n, c.kv_dim());
    if (q != nullptr) compute::add_bias_rows(q, w.bq.data(), n, c.q_dim());
  }
  const float* factors = c.rope_freq_factors.empty() ? nullptr : c.rope_freq_factors.data();
  for (int64_t t = 0; t < n; ++t) {
    float* kt = k + t * c.kv_dim();
    if (c.qk_norm) compute::rmsnorm_rows(kt, w.k_norm.data(), c.n_kv_heads, c.head_dim, c.norm_eps);
    (lc.rope_form == RopeForm::Adjacent ? compute::rope_adjacent : compute::rope_neox)(
        kt, c.n_kv_heads, c.head_dim, pos ? pos[t] : pos0 + t, lc.rope_base, lc.rope_freq_scale, factors, c.rope_attn_factor);
  }
}

void Forward::qkv_impl(int64_t li, const float* x, int64_t n, int64_t pos0, const int64_t* pos, float* q, float* k,
                       float* v) {
  const profile::Scope prof(profile::Stage::Qkv);
  const ModelConfig& c = config();
  const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
  const LayerWeights& w = model_->weights().layers[static_cast<size_t>(li)];
  attn_input(li, x, n);
  project_kv(li, n, pos0, pos, q, k, v);
  const float* factors = c.rope_freq_factors.empty() ? nullptr : c.rope_freq_factors.data();
  for (int64_t t = 0; t < n; ++t) {
    float* qt = q + t * c.q_dim();
    if (c.qk_norm) compute::rmsnorm_rows(qt, w.q_norm.data(), c.n_heads, c.head_dim, c.norm_eps);
    (lc.rope_form == RopeForm::Adjacent ? compute::rope_adjacent : compute::rope_neox)(
        qt, c.n_heads, c.head_dim, pos ? pos[t] : pos0 + t, lc.rope_base, lc.rope_freq_scale, factors, c.rope_attn_factor);
  }
}

void Forward::qkv(int64_t li, const float* x, int64_t n, int64_t pos0, float* q, float* k, float* v) {
  qkv_impl(li, x, n, pos0, nullptr, q, k, v);
}

void Forward::qkv_at(int64_t li, const float* x, int64_t n, const int64_t* pos, float* q, float* k, float* v) {
  qkv_impl(li, x, n, 0, pos, q, k, v);
}

void Forward::kv_from_residual(int64_t li, const float* x, int64_t n, int64_t pos0, float* k, float* v) {
  const profile::Scope prof(profile::Stage::Qkv);
  attn_input(li, x, n);
  project_kv(li, n, pos0, nullptr, nullptr, k, v);
}

namespace {

// The keys a query at `pos` sees under `mask`, in order: ns sink rows from position s_lo, then the
// positions lo .. pos (each from kv, or from mask.alt where the mask says so). `gather`: the keys
// are not one contiguous run of kv rows, so a chunk's rows are copied together first (the same
// arithmetic either way: compute::attend_chunk does not depend on the row stride).
struct Visible {
  int64_t ns = 0, s_lo = 0, lo = 0, m = 0;
  bool gather = false;
};

Visible visible_keys(const LayerConfig& lc, int64_t pos, const KvSpan& kv, const AttendMask& mask) {
  Visible r;
  const bool has_sink = mask.sink.rows > 0;
  const int64_t sink_end = has_sink ? mask.sink.first_pos + mask.sink.rows : kv.first_pos;
  const int64_t alt_end = mask.alt.first_pos + mask.alt.rows;
  const int64_t model_lo = lc.sliding ? pos - lc.window + 1 : kv.first_pos;
  r.lo = std::max({kv.first_pos, model_lo, sink_end});
  if (mask.window > 0) r.lo = std::max(r.lo, pos - mask.window + 1);
  r.s_lo = lc.sliding ? std::max(mask.sink.first_pos, model_lo) : mask.sink.first_pos;
  const int64_t s_hi = std::min(sink_end, pos + 1);
  r.ns = has_sink ? std::max<int64_t>(0, s_hi - r.s_lo) : 0;
  r.m = r.ns + (pos - r.lo + 1);  // >= 1: the query's own row is in kv or the sink
  const bool alt_used =
      mask.alt.rows > 0 && std::max(r.lo, mask.alt.first_pos) <= std::min(pos - mask.alt_recent, alt_end - 1);
  r.gather = r.ns > 0 || alt_used;
  return r;
}

// Chunk `ch` (keys ch * kAttnChunk ..) of the query row q_row at `pos`, for the n_q heads from
// `head` (all in K/V group g): compute::attend_chunk into `part`.
void attend_one_chunk(const ModelConfig& c, const float* q_row, int64_t pos, const KvSpan& kv, const AttendMask& mask,
                      const Visible& vis, int64_t head, int64_t n_q, int64_t ch, compute::AttnPartial part) {
  thread_local std::vector<float> scores, kbuf, vbuf;
  const int64_t hd = c.head_dim, kv_dim = c.kv_dim(), g = head / (c.n_heads / c.n_kv_heads);
  const int64_t j0 = ch * compute::kAttnChunk, mc = std::min(compute::kAttnChunk, vis.m - j0);
  if (static_cast<int64_t>(scores.size()) < n_q * mc) scores.resize(static_cast<size_t>(n_q * mc));
  const float* qh = q_row + head * hd;
  if (!vis.gather) {
    const int64_t off = (vis.lo + j0 - kv.first_pos) * kv_dim + g * hd;
    compute::attend_chunk(qh, n_q, kv.k + off, kv.v + off, mc, kv_dim, hd, c.attn_scale, c.attn_logit_softcap,
                          scores.data(), part);
    return;
  }
  // Rows from several places (sink, alt): copied together, then the same arithmetic.
  if (static_cast<int64_t>(kbuf.size()) < mc * hd) {
    kbuf.resize(static_cast<size_t>(mc * hd));
    vbuf.resize(static_cast<size_t>(mc * hd));
  }
  const int64_t alt_end = mask.alt.first_pos + mask.alt.rows;
  for (int64_t i = 0; i < mc; ++i) {
    const int64_t j = j0 + i;
    const float *kr, *vr;
    if (j < vis.ns) {
      const int64_t row = vis.s_lo + j - mask.sink.first_pos;
      kr = mask.sink.k + row * kv_dim + g * hd;
      vr = mask.sink.v + row * kv_dim + g * hd;
    } else {
      const int64_t p = vis.lo + j - vis.ns;
      const bool from_alt = mask.alt.rows > 0 && p >= mask.alt.first_pos && p < alt_end && p <= pos - mask.alt_recent;
      const KvSpan& src = from_alt ? mask.alt : kv;
      kr = src.k + (p - src.first_pos) * kv_dim + g * hd;
      vr = src.v + (p - src.first_pos) * kv_dim + g * hd;
    }
    std::copy(kr, kr + hd, kbuf.data() + i * hd);
    std::copy(vr, vr + hd, vbuf.data() + i * hd);
  }
  compute::attend_chunk(qh, n_q, kbuf.data(), vbuf.data(), mc, hd, hd, c.attn_scale, c.attn_logit_softcap,
                        scores.data(), part);
}

// Attention of n query rows; row t is at pos_of(t) over kv_of(t) with mask_of_row(t). Either one
// task per (row, K/V group) that runs every chunk and combines them (enough rows to keep the
// threads busy: a prompt), or one task per (row, group, chunk) with the partials combined after
// the pool's join (decode: a single row's chunks spread over the threads, each K/V row loaded
// once for the group's heads). Both give the same bits (compute/attention.h).
template <typename PosOf, typename KvOf, typename MaskOf>
void attend_all(ThreadPool& pool, const ModelConfig& c, const LayerConfig& lc, const float* q, int64_t n, PosOf pos_of,
                KvOf kv_of, MaskOf mask_of_row, float* out, std::vector<float>& parts, std::vector<int64_t>& offs,
                bool spread_rows) {
  const int64_t hd = c.head_dim, kvh = c.n_kv_heads, group = c.n_heads / kvh;
  if (n * kvh >= pool.size()) {
    // Rows are dealt first, last, second, ... so causal rows of very different lengths spread
    // evenly over the threads' contiguous chunks.
    auto run = [&](int64_t b, int64_t e) {
      thread_local std::vector<float> local;
      for (int64_t task = b; task < e; ++task) {
        const int64_t i = task / kvh, t = !spread_rows ? i : i % 2 == 0 ? i / 2 : n - 1 - i / 2;
        const int64_t head = (task % kvh) * group, pos = pos_of(t);
        const KvSpan& kv = kv_of(t);
        const AttendMask& mask = mask_of_row(t);
        const Visible vis = visible_keys(lc, pos, kv, mask);
        const int64_t nc = compute::attn_chunks(vis.m);
        const size_t need = compute::attn_partials_floats(nc, group, hd);
        if (local.size() < need) local.resize(need);
        for (int64_t ch = 0; ch < nc; ++ch)
          attend_one_chunk(c, q + t * c.q_dim(), pos, kv, mask, vis, head, group, ch,
                           compute::attn_partial_at(local.data(), nc, group, hd, ch));
        compute::attend_combine_partials(local.data(), nc, group, hd, out + t * c.q_dim() + head * hd);
      }
    };
    pool.parallel_for(n * kvh, [&run](int64_t b, int64_t e) { run(b, e); });
    return;
  }
  // Few rows: a task per chunk. offs[t * kvh + g]: the first task of (row t, group g); the
  // partials of that pair start at parts + offset, in attn_chunks(m) chunks.
  offs.resize(static_cast<size_t>(n * kvh + 1));
  // The calling thread's, reused (no allocation per step); the workers read it through `vis` (a
  // name of a thread_local inside their lambda would be their own, empty, copy).
  thread_local std::vector<Visible> vis_of_caller;
  std::vector<Visible>& vis = vis_of_caller;
  vis.resize(static_cast<size_t>(n));
  int64_t tasks = 0;
  for (int64_t t = 0; t < n; ++t) {
    vis[static_cast<size_t>(t)] = visible_keys(lc, pos_of(t), kv_of(t), mask_of_row(t));
    for (int64_t g = 0; g < kvh; ++g) {
      offs[static_cast<size_t>(t * kvh + g)] = tasks;
      tasks += compute::attn_chunks(vis[static_cast<size_t>(t)].m);
    }
  }
  offs[static_cast<size_t>(n * kvh)] = tasks;
  // Each task's partial is group * (hd + 2) floats, laid out per pair as compute::attn_partial_at
  // expects.
  const size_t per_task = compute::attn_partials_floats(1, group, hd);
  if (parts.size() < static_cast<size_t>(tasks) * per_task) parts.resize(static_cast<size_t>(tasks) * per_task);
  auto pair_of = [&](int64_t task) {
    return static_cast<int64_t>(std::upper_bound(offs.begin(), offs.end() - 1, task) - offs.begin()) - 1;
  };
  auto run = [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t pr = pair_of(task), t = pr / kvh, g = pr % kvh;
      const int64_t first = offs[static_cast<size_t>(pr)], nc = offs[static_cast<size_t>(pr + 1)] - first;
      float* pair_parts = parts.data() + static_cast<size_t>(first) * per_task;
      attend_one_chunk(c, q + t * c.q_dim(), pos_of(t), kv_of(t), mask_of_row(t), vis[static_cast<size_t>(t)],
                       g * group, group, task - first,
                       compute::attn_partial_at(pair_parts, nc, group, hd, task - first));
    }
  };
  pool.parallel_for(tasks, [&run](int64_t b, int64_t e) { run(b, e); });
  for (int64_t pr = 0; pr < n * kvh; ++pr) {
    const int64_t first = offs[static_cast<size_t>(pr)], nc = offs[static_cast<size_t>(pr + 1)] - first;
    compute::attend_combine_partials(parts.data() + static_cast<size_t>(first) * per_task, nc, group, hd,
                                     out + (pr / kvh) * c.q_dim() + (pr % kvh) * group * hd);
  }
}

}  // namespace

void Forward::attend(int64_t li, const float* q, int64_t n, int64_t pos0, const KvSpan& kv, float* out,
                     const AttendMask& mask) {
  const profile::Scope prof(profile::Stage::Attention);
  const ModelConfig& c = config();
  const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
  const int64_t kv_end = kv.first_pos + kv.rows;
  // Validate here: nothing may throw inside the pool's workers.
  if (n > 0 && (pos0 + n > kv_end || kv.rows == 0 || pos0 < kv.first_pos))
    throw Error(ErrorKind::InvariantViolation, "attend: layer " + std::to_string(li) + " K/V ends at position " +
                                                   std::to_string(kv_end) + " but a query is at " +
                                                   std::to_string(pos0 + n - 1));
  attend_all(
      *pool_, c, lc, q, n, [pos0](int64_t t) { return pos0 + t; }, [&kv](int64_t) -> const KvSpan& { return kv; },
      [&mask](int64_t) -> const AttendMask& { return mask; }, out, ws_.attn_parts, ws_.attn_offs, true);
}

void Forward::attend_rows(int64_t li, const float* q, int64_t n, const int64_t* pos, const KvSpan* kv,
                          const AttendMask* mask, float* out) {
  const profile::Scope prof(profile::Stage::Attention);
  const ModelConfig& c = config();
  const LayerConfig& lc = c.layers[static_cast<size_t>(li)];
  for (int64_t t = 0; t < n; ++t) {
    const KvSpan& s = kv[t];
    if (s.rows == 0 || pos[t] < s.first_pos || pos[t] >= s.first_pos + s.rows)
      throw Error(ErrorKind::InvariantViolation, "attend: layer " + std::to_string(li) + " K/V of row " +
                                                     std::to_string(t) + " does not hold its position " +
                                                     std::to_string(pos[t]));
  }
  attend_all(
      *pool_, c, lc, q, n, [pos](int64_t t) { return pos[t]; }, [kv](int64_t t) -> const KvSpan& { return kv[t]; },
      [mask](int64_t t) -> const AttendMask& { return mask[t]; }, out, ws_.attn_parts, ws_.attn_offs, false);
}

void Forward::attn_block(int64_t li, const float* attn, int64_t n, float* x) {
  require_attention(li);
  const profile::Scope prof(profile::Stage::AttnOut);
  const ModelConfig& c = config();
  const int64_t H = c.hidden;
  float* o = G::grow(ws_.o, static_cast<size_t>(n * H));
  ws_.acts.reset(attn, n, c.q_dim());
  compute::matmul(*pool_, model_->weights().layers[static_cast<size_t>(li)].wo, ws_.acts, o);
  norm(NormSite::PostAttn, li, o, n, o);
  for (int64_t i = 0; i < n * H; ++i) x[i] += o[i];
}

void DenseFfn::run(Forward& f, int64_t li, const float* h, int64_t n, float* out) {
  require_ffn_weights(f.model(), li);
  const ModelConfig& c = f.config();
  const LayerWeights& w = f.model().weights().layers[static_cast<size_t>(li)];
  Workspace& ws = f.workspace();
  float* gate = G::grow(ws.gate, static_cast<size_t>(n * c.ffn));
  float* up = G::grow(ws.up, static_cast<size_t>(n * c.ffn));
  ws.acts.reset(h, n, c.hidden);
  compute::matmul_many(f.pool(), ws.acts, {{w.w_gate, gate}, {w.w_up, up}});
  if (c.activation == Activation::GeluTanh) {
    compute::gelu_tanh_mul(f.pool(), gate, up, gate, n * c.ffn);
  } else {
    compute::silu_mul(f.pool(), gate, up, gate, n * c.ffn);
  }
  ws.acts.reset(gate, n, c.ffn);
  compute::matmul(f.pool(), w.w_down, ws.acts, out);
}

void Forward::ffn_block(int64_t li, int64_t n, float* x) {
  const profile::Scope prof(profile::Stage::Ffn);
  model_->require_layer(li, "the FFN block");
  const int64_t H = config().hidden;
  float* h = G::grow(ws_.h, static_cast<size_t>(n * H));
  norm(NormSite::Ffn, li, x, n, h);
  float* down = G::grow(ws_.down, static_cast<size_t>(n * H));
  ffn(li).run(*this, li, h, n, down);
  norm(NormSite::PostFfn, li, down, n, down);
  for (int64_t i = 0; i < n * H; ++i) x[i] += down[i];
}

void Forward::finish_rows(int64_t li, const float* attn, int64_t n, float* x, int64_t pos0, const int64_t* pos,
                          const int64_t* seq) {
  LayerObserver* const obs = observer_;
  const int64_t H = config().hidden;
  if (obs != nullptr) std::copy(x, x + n * H, G::grow(ws_.trace_in, static_cast<size_t>(n * H)));
  attn_block(li, attn, n, x);
  ffn_block(li, n, x);
  if (obs != nullptr) {
    for (int64_t t = 0; t < n; ++t) {
      const int64_t p = pos ? pos[t] : pos0 == kNoPos ? t : pos0 + t;
      if (!obs->wants(p)) continue;
      const size_t r = static_cast<size_t>(t * H);
      obs->on_layer(LayerTrace{li, p, seq ? seq[t] : 0, H, ws_.trace_in.data() + r, ws_.o.data() + r,
                               ws_.h.data() + r, ws_.down.data() + r, x + r});
    }
  }
  if (layer_progress_) layer_progress_(n);
}

void Forward::finish_layer(int64_t li, const float* attn, int64_t n, float* x, int64_t pos0) {
  finish_rows(li, attn, n, x, pos0, nullptr, nullptr);
}

void Forward::layer(int64_t li, float* x, int64_t n, int64_t pos0, LayerKv& kv) {
  const ModelConfig& c = config();
  float* q = G::grow(ws_.q, static_cast<size_t>(n * c.q_dim()));
  float* k = G::grow(ws_.k, static_cast<size_t>(n * c.kv_dim()));
  float* v = G::grow(ws_.v, static_cast<size_t>(n * c.kv_dim()));
  if (kv.end_pos() != pos0)
    throw Error(ErrorKind::InvariantViolation, "layer " + std::to_string(li) + ": K/V ends at " +
                                                   std::to_string(kv.end_pos()) + ", expected " + std::to_string(pos0));
  qkv(li, x, n, pos0, q, k, v);
  kv.append(k, v, n);
  float* attn = G::grow(ws_.attn, static_cast<size_t>(n * c.q_dim()));
  attend(li, q, n, pos0, span_of(kv), attn, mask_of(kv));
  kv.evict();
  finish_layer(li, attn, n, x, pos0);
}

void Forward::set_chunk(int64_t rows) {
  if (rows < 1) throw Error(ErrorKind::InvalidArgument, "Forward::set_chunk: rows=" + std::to_string(rows) + " (must be >= 1)");
  chunk_ = rows;
}

void Forward::forward(const int32_t* tokens, int64_t n, KvCache& cache, float* x) {
  const ModelConfig& c = config();
  for (int64_t off = 0; off < n; off += chunk_) {
    const int64_t m = std::min(chunk_, n - off);
    float* xc = x + off * c.hidden;
    embed(tokens + off, m, xc);
    run_layers(0, c.n_layers, xc, m, cache);
  }
}

void Forward::run_layers(int64_t begin, int64_t end, float* x, int64_t n, KvCache& cache) {
  const ModelConfig& c = config();
  if (begin < 0 || begin >= end || end > c.n_layers || cache.n_layers() != c.n_layers)
    throw Error(ErrorKind::InvalidArgument, "run_layers: layers [" + std::to_string(begin) + ", " + std::to_string(end) +
                                                ") of a model of " + std::to_string(c.n_layers) + " layers");
  for (int64_t li = begin; li < end; ++li) model_->require_layer(li, "run_layers");
  for (int64_t off = 0; off < n; off += chunk_) {
    const int64_t m = std::min(chunk_, n - off);
    const int64_t pos0 = cache.layer(begin).end_pos();
    float* xc = x + off * c.hidden;
    for (int64_t li = begin; li < end; ++li) {
      if (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed))
        throw Error(ErrorKind::Cancelled, "forward: cancelled before layer " + std::to_string(li) + " at position " +
                                              std::to_string(pos0));
      layer(li, xc, m, pos0, cache.layer(li));
    }
  }
}

void Forward::require_attention(int64_t li) const {
  if (model_->part().attention) return model_->require_layer(li, "attention");
  if (device_ && !device_->supports(DeviceFeature::HostKv)) {
    // The layers run where the backend is (a pipeline of shards): only its sequences run them.
    const DeviceInfo d = device_->info();
    throw Error(ErrorKind::BackendUnavailable,
                "this needs the layers here (attention at layer " + std::to_string(li) + "), but they run on the " +
                    d.backend + " backend (" + d.name + "): over it only generation with the standard engine, "
                    "logits and perplexity run");
  }
  throw Error(ErrorKind::InvalidArgument, "attention at layer " + std::to_string(li) +
                                              " needs the attention weights, but this model part holds " +
                                              model_->part().describe(config()) + " (" + model_->path() + ")");
}

void Forward::logits(const float* x, int64_t n, float* logits) {
  const profile::Scope prof(profile::Stage::LmHead);
  model_->require_embedding("logits");
  const ModelConfig& c = config();
  const ModelWeights& w = model_->weights();
  float* h = G::grow(ws_.h, static_cast<size_t>(n * c.hidden));
  for (int64_t t = 0; t < n; ++t) compute::rmsnorm(x + t * c.hidden, w.output_norm.data(), h + t * c.hidden, c.hidden, c.norm_eps);
  ws_.acts.reset(h, n, c.hidden);
  compute::matmul(*pool_, w.lm_head, ws_.acts, logits);
  if (c.final_logit_softcap > 0) {
    const float cap = c.final_logit_softcap;
    for (int64_t i = 0; i < n * w.lm_head.rows; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  }
}

}  // namespace larql
