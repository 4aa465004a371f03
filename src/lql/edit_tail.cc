// EditTail: a dense model's last layers in f32, forward and reverse mode (edit_tail.h).
#include "lql/edit_tail.h"

#include <algorithm>
#include <cmath>

#include "compute/ops.h"
#include "quant/quant.h"
#include "util/error.h"

namespace larql::lql {

namespace {

std::vector<float> dense(const TensorView& w, const char* what, int64_t layer) {
  if (!quant::can_dequantize(w.type))
    throw Error(ErrorKind::Unsupported, std::string("MODE SUBJECT: the ") + what + " of layer " + std::to_string(layer) +
                                            " has a type without dequantisation");
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) quant::dequantize_row(w.type, w.row(r), out.data() + r * w.cols, w.cols);
  return out;
}

// y[t][o] = sum_i W[o][i] x[t][i] for t < n (W [out][in]): compute::gemm_f32_nt.
void mat(ThreadPool& pool, const std::vector<float>& w, int64_t out, int64_t in, const float* x, int64_t n, float* y) {
  compute::gemm_f32_nt(pool, x, n, w.data(), out, in, y);
}
// dx[t][i] += sum_o W[o][i] dy[t][o] for t < n: compute::gemm_f32_nn_acc.
void mat_t(ThreadPool& pool, const std::vector<float>& w, int64_t out, int64_t in, const float* dy, int64_t n, float* dx) {
  compute::gemm_f32_nn_acc(pool, dy, n, w.data(), out, in, dx);
}

// The rotation RoPE applied at `pos` (compute::rope_neox / rope_adjacent's angles), undone:
// the transpose of a rotation scaled by mscale is the inverse rotation scaled by mscale.
void rope_back(float* x, int64_t n_heads, int64_t hd, int64_t pos, const LayerConfig& lc, const ModelConfig& c) {
  const int64_t half = hd / 2;
  for (int64_t i = 0; i < half; ++i) {
    double th = static_cast<double>(pos) * lc.rope_freq_scale * std::pow(lc.rope_base, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
    if (!c.rope_freq_factors.empty()) th /= c.rope_freq_factors[static_cast<size_t>(i)];
    const double cs = std::cos(th) * c.rope_attn_factor, sn = std::sin(th) * c.rope_attn_factor;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + h * hd;
      const int64_t a = lc.rope_form == RopeForm::Adjacent ? 2 * i : i, b = lc.rope_form == RopeForm::Adjacent ? 2 * i + 1 : i + half;
      const double ya = v[a], yb = v[b];
      v[a] = static_cast<float>(ya * cs + yb * sn);
      v[b] = static_cast<float>(-ya * sn + yb * cs);
    }
  }
}

// The activation f(g) and its derivative f'(g) at once (one tanh or exp per value; float, as the
// forward pass): GELU's tanh form (Hendrycks & Gimpel 2016) f = 0.5 g (1 + t), t = tanh(u),
// u = k (g + 0.044715 g^3), k = sqrt(2 / pi), f' = 0.5 (1 + t) + 0.5 g (1 - t^2) u'; SiLU
// f = g s, s = 1 / (1 + e^-g), f' = s (1 + g (1 - s)).
void act_and_grad(Activation a, const float* g, float* f, float* fp, int64_t n) {
  if (a == Activation::Silu) {
    for (int64_t i = 0; i < n; ++i) {
      const float s = 1.0f / (1.0f + std::exp(-g[i]));
      f[i] = g[i] * s;
      fp[i] = s * (1.0f + g[i] * (1.0f - s));
    }
    return;
  }
  const float k = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i], t = std::tanh(k * (x + 0.044715f * x * x * x));
    f[i] = 0.5f * x * (1.0f + t);
    fp[i] = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
  }
}

}  // namespace

void rmsnorm_backward(const float* x, const float* w, const float* dy, float* dx, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  double dot = 0;  // sum_i dy_i w_i x_i
  for (int64_t i = 0; i < n; ++i) dot += static_cast<double>(dy[i]) * (w ? w[i] : 1.0f) * x[i];
  // y_i = w_i x_i r; dr/dx_j = -r^3 x_j / n.
  for (int64_t i = 0; i < n; ++i)
    dx[i] = static_cast<float>((w ? w[i] : 1.0f) * dy[i] * r - x[i] * r * r * r * dot / static_cast<double>(n));
}

EditTail::EditTail(const Model& model, int64_t first, ThreadPool& pool) : model_(model), first_(first), pool_(pool) {
  const ModelConfig& c = model.config();
  if (c.n_experts > 0)
    throw Error(ErrorKind::Unsupported, "MODE SUBJECT: a mixture-of-experts model is not supported (its FFN routes per token)");
  if (first < 1 || first > c.n_layers)
    throw Error(ErrorKind::InvalidArgument, "MODE SUBJECT: layer " + std::to_string(first) + " is outside [1, " +
                                                std::to_string(c.n_layers) + "]");
  for (int64_t l = first; l < c.n_layers; ++l) {
    const LayerWeights& w = model.weights().layers[static_cast<size_t>(l)];
    layers_.push_back({dense(w.wq, "Q projection", l), dense(w.wk, "K projection", l), dense(w.wv, "V projection", l),
                       dense(w.wo, "attention output", l), dense(w.w_gate, "FFN gate", l), dense(w.w_up, "FFN up", l),
                       dense(w.w_down, "FFN down", l)});
  }
}

double EditTail::logprob(const std::vector<float>& x, int64_t n, int64_t target, std::vector<float>* grad, int64_t from_pos,
                         int64_t* top1) const {
  std::vector<std::vector<float>> grads;
  const std::vector<TailSeq> one = {{&x, n, target, from_pos}};
  std::vector<int64_t> tops;
  const double lp = logprobs(one, grad ? &grads : nullptr, top1 ? &tops : nullptr)[0];
  if (grad) *grad = std::move(grads[0]);
  if (top1) *top1 = tops[0];
  return lp;
}

std::vector<double> EditTail::logprobs(const std::vector<TailSeq>& seqs, std::vector<std::vector<float>>* grads,
                                       std::vector<int64_t>* top1, const std::vector<Prefix>* prefix) const {
  return run(seqs, grads, top1, prefix, nullptr);
}

std::vector<EditTail::Prefix> EditTail::prefixes(const std::vector<TailSeq>& seqs) const {
  std::vector<Prefix> out;
  run(seqs, nullptr, nullptr, nullptr, &out);
  return out;
}

std::vector<double> EditTail::run(const std::vector<TailSeq>& seqs, std::vector<std::vector<float>>* grads, std::vector<int64_t>* top1,
                                  const std::vector<Prefix>* prefix, std::vector<Prefix>* prefix_out) const {
  const ModelConfig& c = model_.config();
  const int64_t H = c.hidden, F = c.ffn, hd = c.head_dim, nh = c.n_heads, nkv = c.n_kv_heads, qd = c.q_dim(),
                kd = c.kv_dim(), grp = nh / nkv;
  const float eps = c.norm_eps;
  const size_t nl = layers_.size(), ns = seqs.size();
  const float* no_w = nullptr;
  auto post_w = [&](const std::vector<float>& w) { return c.post_norms ? w.data() : no_w; };
  if (prefix && prefix->size() != ns)
    throw Error(ErrorKind::InvalidArgument, "EditTail: " + std::to_string(prefix->size()) + " prefixes for " + std::to_string(ns) + " sequences");
  // Rows computed: positions a0[q]..len[q]-1 of sequence q (a0 = from_pos with a prefix, else 0;
  // len = n, or from_pos when making a prefix: only the positions before it), stacked: position T
  // of sequence q is row off[q] + T - a0[q]. The attention probabilities of its head h over the
  // sequence's len positions start at poff[q] + ((T - a0) nh + h) len.
  std::vector<int64_t> off(ns + 1, 0), poff(ns + 1, 0), t0(ns), a0(ns, 0), len(ns);
  for (size_t q = 0; q < ns; ++q) {
    t0[q] = std::clamp<int64_t>(seqs[q].from_pos, 0, seqs[q].n - 1);
    len[q] = prefix_out ? t0[q] : seqs[q].n;
    if (prefix) {
      if ((*prefix)[q].from_pos != t0[q] || (*prefix)[q].k.size() != nl)
        throw Error(ErrorKind::InvalidArgument, "EditTail: prefix " + std::to_string(q) + " was made for another sequence");
      a0[q] = t0[q];
    }
    const int64_t na = len[q] - a0[q];
    off[q + 1] = off[q] + na;
    poff[q + 1] = poff[q] + na * nh * len[q];
  }
  const int64_t N = off[ns];
  // Key and value rows of position j of sequence q at layer li (a prefix's below a0).
  auto key = [&](size_t q, size_t li, const std::vector<float>& k, int64_t j) {
    return j < a0[q] ? (*prefix)[q].k[li].data() + j * kd : k.data() + (off[q] + j - a0[q]) * kd;
  };
  auto val = [&](size_t q, size_t li, const std::vector<float>& v, int64_t j) {
    return j < a0[q] ? (*prefix)[q].v[li].data() + j * kd : v.data() + (off[q] + j - a0[q]) * kd;
  };
  struct Saved {
    std::vector<float> x, a, qraw, kraw, q, k, v, p, o, z, mid, b, g, u, f, fp, act, m;  // f, fp: the activation of g and its derivative
  };
  std::vector<Saved> sv(nl);
  std::vector<float> x(static_cast<size_t>(N * H));
  for (size_t q = 0; q < ns; ++q)
    std::copy(seqs[q].x->begin() + a0[q] * H, seqs[q].x->begin() + len[q] * H, x.begin() + off[q] * H);
  if (prefix_out) {
    prefix_out->assign(ns, {});
    for (size_t q = 0; q < ns; ++q) {
      (*prefix_out)[q].from_pos = t0[q];
      (*prefix_out)[q].k.resize(nl);
      (*prefix_out)[q].v.resize(nl);
    }
  }
  auto add_normed = [&](const std::vector<float>& src, const float* w, std::vector<float>& dst) {  // dst += norm(src) per row
    std::vector<float> y(static_cast<size_t>(H));
    for (int64_t t = 0; t < N; ++t) {
      if (w) compute::rmsnorm(src.data() + t * H, w, y.data(), H, eps);
      else std::copy(src.begin() + t * H, src.begin() + (t + 1) * H, y.begin());
      compute::axpy(1.0f, y.data(), dst.data() + t * H, H);
    }
  };
  for (size_t li = 0; li < nl; ++li) {
    const int64_t l = first_ + static_cast<int64_t>(li);
    const LayerWeights& W = model_.weights().layers[static_cast<size_t>(l)];
    const LayerConfig& lc = c.layers[static_cast<size_t>(l)];
    const Layer& D = layers_[li];
    Saved& s = sv[li];
    s.x = x;
    s.a.resize(static_cast<size_t>(N * H));
    for (int64_t t = 0; t < N; ++t) compute::rmsnorm(x.data() + t * H, W.attn_norm.data(), s.a.data() + t * H, H, eps);
    s.qraw.resize(static_cast<size_t>(N * qd));
    s.kraw.resize(static_cast<size_t>(N * kd));
    s.v.resize(static_cast<size_t>(N * kd));
    mat(pool_, D.wq, qd, H, s.a.data(), N, s.qraw.data());
    mat(pool_, D.wk, kd, H, s.a.data(), N, s.kraw.data());
    mat(pool_, D.wv, kd, H, s.a.data(), N, s.v.data());
    if (c.qkv_bias) {
      compute::add_bias_rows(s.qraw.data(), W.bq.data(), N, qd);
      compute::add_bias_rows(s.kraw.data(), W.bk.data(), N, kd);
      compute::add_bias_rows(s.v.data(), W.bv.data(), N, kd);
    }
    s.q = s.qraw;
    s.k = s.kraw;
    const float* factors = c.rope_freq_factors.empty() ? nullptr : c.rope_freq_factors.data();
    auto rope = lc.rope_form == RopeForm::Adjacent ? compute::rope_adjacent : compute::rope_neox;
    s.p.assign(static_cast<size_t>(poff[ns]), 0.0f);
    s.o.assign(static_cast<size_t>(N * qd), 0.0f);
    for (size_t sq = 0; sq < ns; ++sq) {
      const int64_t n = len[sq], b0 = off[sq] - a0[sq];  // row of position t: b0 + t
      for (int64_t t = a0[sq]; t < n; ++t) {
        if (c.qk_norm) {
          compute::rmsnorm_rows(s.q.data() + (b0 + t) * qd, W.q_norm.data(), nh, hd, eps);
          compute::rmsnorm_rows(s.k.data() + (b0 + t) * kd, W.k_norm.data(), nkv, hd, eps);
        }
        rope(s.q.data() + (b0 + t) * qd, nh, hd, t, lc.rope_base, lc.rope_freq_scale, factors, c.rope_attn_factor);
        rope(s.k.data() + (b0 + t) * kd, nkv, hd, t, lc.rope_base, lc.rope_freq_scale, factors, c.rope_attn_factor);
      }
      if (prefix_out) {
        (*prefix_out)[sq].k[li].assign(s.k.begin() + b0 * kd, s.k.begin() + (b0 + t0[sq]) * kd);
        (*prefix_out)[sq].v[li].assign(s.v.begin() + b0 * kd, s.v.begin() + (b0 + t0[sq]) * kd);
      }
      // Attention probabilities (0 where a position is not visible).
      for (int64_t t = a0[sq]; t < n; ++t)
        for (int64_t h = 0; h < nh; ++h) {
          const int64_t g = h / grp, lo = lc.sliding ? std::max<int64_t>(0, t - lc.window + 1) : 0;
          float* pr = s.p.data() + poff[sq] + ((t - a0[sq]) * nh + h) * n;
          double mx = -1e300;
          for (int64_t j = lo; j <= t; ++j) {
            double sc = static_cast<double>(compute::dot_f32(s.q.data() + (b0 + t) * qd + h * hd, key(sq, li, s.k, j) + g * hd, hd)) *
                        c.attn_scale;
            if (c.attn_logit_softcap > 0) sc = c.attn_logit_softcap * std::tanh(sc / c.attn_logit_softcap);
            pr[j] = static_cast<float>(sc);
            mx = std::max(mx, sc);
          }
          double z = 0;
          for (int64_t j = lo; j <= t; ++j) z += (pr[j] = static_cast<float>(std::exp(pr[j] - mx)));
          for (int64_t j = lo; j <= t; ++j) {
            pr[j] = static_cast<float>(pr[j] / z);
            compute::axpy(pr[j], val(sq, li, s.v, j) + g * hd, s.o.data() + (b0 + t) * qd + h * hd, hd);
          }
        }
    }
    s.z.resize(static_cast<size_t>(N * H));
    mat(pool_, D.wo, H, qd, s.o.data(), N, s.z.data());
    s.mid = x;
    add_normed(s.z, post_w(W.post_attn_norm), s.mid);
    s.b.resize(static_cast<size_t>(N * H));
    for (int64_t t = 0; t < N; ++t) compute::rmsnorm(s.mid.data() + t * H, W.ffn_norm.data(), s.b.data() + t * H, H, eps);
    s.g.resize(static_cast<size_t>(N * F));
    s.u.resize(static_cast<size_t>(N * F));
    s.act.resize(static_cast<size_t>(N * F));
    mat(pool_, D.wg, F, H, s.b.data(), N, s.g.data());
    mat(pool_, D.wu, F, H, s.b.data(), N, s.u.data());
    s.f.resize(static_cast<size_t>(N * F));
    s.fp.resize(static_cast<size_t>(N * F));
    act_and_grad(c.activation, s.g.data(), s.f.data(), s.fp.data(), N * F);
    for (int64_t i = 0; i < N * F; ++i) s.act[static_cast<size_t>(i)] = s.f[static_cast<size_t>(i)] * s.u[static_cast<size_t>(i)];
    s.m.resize(static_cast<size_t>(N * H));
    mat(pool_, D.wd, H, F, s.act.data(), N, s.m.data());
    x = s.mid;
    add_normed(s.m, post_w(W.post_ffn_norm), x);
  }
  if (prefix_out) return {};
  // Each sequence's last-position logits over the whole vocabulary (the model's lm_head kernel).
  const ModelWeights& MW = model_.weights();
  std::vector<double> out(ns);
  std::vector<float> dx(static_cast<size_t>(N * H), 0.0f), row(static_cast<size_t>(H)), hT(static_cast<size_t>(ns) * H),
      all_logits(static_cast<size_t>(ns) * c.vocab);
  for (size_t sq = 0; sq < ns; ++sq)
    compute::rmsnorm(x.data() + (off[sq + 1] - 1) * H, MW.output_norm.data(), hT.data() + sq * H, H, eps);
  compute::matmul(pool_, MW.lm_head, hT.data(), static_cast<int64_t>(ns), all_logits.data());  // lm_head read once
  if (top1) top1->assign(ns, -1);
  // Per sequence: e_v = exp(logit_v - max) by the SIMD exp (in place of the logits), summed in
  // double: lse = max + ln sum e_v, p_v = e_v / sum. With a final softcap, raw keeps the logits
  // before it.
  std::vector<float> raw;
  if (c.final_logit_softcap > 0 && grads) raw = all_logits;
  std::vector<double> zs(ns);
  for (size_t sq = 0; sq < ns; ++sq) {
    const int64_t target = seqs[sq].target;
    float* logits = all_logits.data() + static_cast<int64_t>(sq) * c.vocab;
    if (c.final_logit_softcap > 0)
      for (int64_t v = 0; v < c.vocab; ++v) logits[v] = c.final_logit_softcap * std::tanh(logits[v] / c.final_logit_softcap);
    if (top1) (*top1)[sq] = std::max_element(logits, logits + c.vocab) - logits;
    const float lt = logits[target];
    const compute::ExpSum es = compute::exp_shifted_sum(logits, c.vocab);
    double z = 0;
    for (int64_t v = 0; v < c.vocab; ++v) z += logits[v];
    zs[sq] = z;
    out[sq] = lt - (es.max + std::log(z));
  }
  if (!grads) return out;
  // d lp / d logit_v = [v == target] - p_v, through lm_head's transpose: each row of lm_head that
  // some sequence needs is dequantised once and added to every sequence's dh (rows with p_v below
  // 1e-6 in every sequence are left out: each would add under 1e-6 of a row).
  std::vector<float> dh_all(static_cast<size_t>(ns) * H, 0.0f), coef(ns);
  for (int64_t v = 0; v < c.vocab; ++v) {
    bool any = false;
    for (size_t sq = 0; sq < ns; ++sq) {
      const double p = all_logits[static_cast<size_t>(static_cast<int64_t>(sq) * c.vocab + v)] / zs[sq];
      double dl = (v == seqs[sq].target ? 1.0 : 0.0) - p;
      if (v != seqs[sq].target && p < 1e-6) dl = 0;
      if (dl != 0 && c.final_logit_softcap > 0) {
        const double th = std::tanh(raw[static_cast<size_t>(static_cast<int64_t>(sq) * c.vocab + v)] / c.final_logit_softcap);
        dl *= 1.0 - th * th;
      }
      coef[sq] = static_cast<float>(dl);
      any |= dl != 0;
    }
    if (!any) continue;
    quant::dequantize_row(MW.lm_head.type, MW.lm_head.row(v), row.data(), H);
    compute::axpy_rows(coef.data(), row.data(), dh_all.data(), static_cast<int64_t>(ns), H);
  }
  for (size_t sq = 0; sq < ns; ++sq) {
    const int64_t last = off[sq + 1] - 1;
    rmsnorm_backward(x.data() + last * H, MW.output_norm.data(), dh_all.data() + sq * H, dx.data() + last * H, H, eps);
  }
  // Backward. Rows before a sequence's from_pos are not varied: their gradient stays 0 and the
  // work for them is skipped (their keys and values, a prefix's included, receive nothing).
  std::vector<char> live(static_cast<size_t>(N), 0);
  for (size_t sq = 0; sq < ns; ++sq)
    for (int64_t t = t0[sq]; t < seqs[sq].n; ++t) live[static_cast<size_t>(off[sq] + t - a0[sq])] = 1;
  std::vector<float> tmp(static_cast<size_t>(H));
  for (size_t li = nl; li-- > 0;) {
    const int64_t l = first_ + static_cast<int64_t>(li);
    const LayerWeights& W = model_.weights().layers[static_cast<size_t>(l)];
    const LayerConfig& lc = c.layers[static_cast<size_t>(l)];
    const Layer& D = layers_[li];
    const Saved& s = sv[li];
    // x_out = mid + post_ffn(m): dmid = dx + d(FFN branch).
    std::vector<float> dm(static_cast<size_t>(N * H), 0.0f), dmid = dx;
    for (int64_t t = 0; t < N; ++t)
      if (live[static_cast<size_t>(t)])
        rmsnorm_backward(s.m.data() + t * H, post_w(W.post_ffn_norm), dx.data() + t * H, dm.data() + t * H, H, eps);
    std::vector<float> dact(static_cast<size_t>(N * F), 0.0f);
    mat_t(pool_, D.wd, H, F, dm.data(), N, dact.data());
    std::vector<float> dg(static_cast<size_t>(N * F), 0.0f), du(static_cast<size_t>(N * F), 0.0f);
    for (int64_t i = 0; i < N * F; ++i) {
      if (dact[static_cast<size_t>(i)] == 0.0f) continue;
      const double f = s.f[static_cast<size_t>(i)], fp = s.fp[static_cast<size_t>(i)];
      dg[static_cast<size_t>(i)] = static_cast<float>(dact[static_cast<size_t>(i)] * s.u[static_cast<size_t>(i)] * fp);
      du[static_cast<size_t>(i)] = static_cast<float>(dact[static_cast<size_t>(i)] * f);
    }
    std::vector<float> db(static_cast<size_t>(N * H), 0.0f);
    mat_t(pool_, D.wg, F, H, dg.data(), N, db.data());
    mat_t(pool_, D.wu, F, H, du.data(), N, db.data());
    for (int64_t t = 0; t < N; ++t)
      if (live[static_cast<size_t>(t)]) {
        rmsnorm_backward(s.mid.data() + t * H, W.ffn_norm.data(), db.data() + t * H, tmp.data(), H, eps);
        compute::axpy(1.0f, tmp.data(), dmid.data() + t * H, H);
      }
    // mid = x + post_attn(z): dx_in = dmid + d(attention branch).
    std::vector<float> dz(static_cast<size_t>(N * H), 0.0f);
    for (int64_t t = 0; t < N; ++t)
      if (live[static_cast<size_t>(t)])
        rmsnorm_backward(s.z.data() + t * H, post_w(W.post_attn_norm), dmid.data() + t * H, dz.data() + t * H, H, eps);
    std::vector<float> dobuf(static_cast<size_t>(N * qd), 0.0f);
    mat_t(pool_, D.wo, H, qd, dz.data(), N, dobuf.data());
    std::vector<float> dq(static_cast<size_t>(N * qd), 0.0f), dk(static_cast<size_t>(N * kd), 0.0f), dv(static_cast<size_t>(N * kd), 0.0f);
    for (size_t sq = 0; sq < ns; ++sq) {
      const int64_t n = seqs[sq].n, b0 = off[sq] - a0[sq];
      for (int64_t t = t0[sq]; t < n; ++t)
        for (int64_t h = 0; h < nh; ++h) {
          const int64_t g = h / grp, lo = lc.sliding ? std::max<int64_t>(0, t - lc.window + 1) : 0;
          const float* pr = s.p.data() + poff[sq] + ((t - a0[sq]) * nh + h) * n;
          const float* dot_ = dobuf.data() + (b0 + t) * qd + h * hd;
          const float* qt = s.q.data() + (b0 + t) * qd + h * hd;
          std::vector<double> dp(static_cast<size_t>(t + 1), 0.0);
          double sum = 0;
          for (int64_t j = lo; j <= t; ++j) {
            dp[static_cast<size_t>(j)] = compute::dot_f32(dot_, val(sq, li, s.v, j) + g * hd, hd);
            sum += pr[j] * dp[static_cast<size_t>(j)];
            if (j >= t0[sq]) compute::axpy(pr[j], dot_, dv.data() + (b0 + j) * kd + g * hd, hd);
          }
          for (int64_t j = lo; j <= t; ++j) {
            const float* kj = key(sq, li, s.k, j) + g * hd;
            double ds = pr[j] * (dp[static_cast<size_t>(j)] - sum);  // d score (after the softcap)
            if (c.attn_logit_softcap > 0) {
              const double sc = compute::dot_f32(qt, kj, hd) * c.attn_scale;
              const double th = std::tanh(sc / c.attn_logit_softcap);
              ds *= 1.0 - th * th;
            }
            ds *= c.attn_scale;
            compute::axpy(static_cast<float>(ds), kj, dq.data() + (b0 + t) * qd + h * hd, hd);
            if (j >= t0[sq]) compute::axpy(static_cast<float>(ds), qt, dk.data() + (b0 + j) * kd + g * hd, hd);
          }
        }
      // Undo RoPE and the q/k norms (rows before from_pos: skipped, as above).
      for (int64_t t = t0[sq]; t < n; ++t) {
        float* dqt = dq.data() + (b0 + t) * qd;
        float* dkt = dk.data() + (b0 + t) * kd;
        rope_back(dqt, nh, hd, t, lc, c);
        rope_back(dkt, nkv, hd, t, lc, c);
        if (c.qk_norm) {
          std::vector<float> r(static_cast<size_t>(hd));
          for (int64_t h = 0; h < nh; ++h) {
            rmsnorm_backward(s.qraw.data() + (b0 + t) * qd + h * hd, W.q_norm.data(), dqt + h * hd, r.data(), hd, eps);
            std::copy(r.begin(), r.end(), dqt + h * hd);
          }
          for (int64_t h = 0; h < nkv; ++h) {
            rmsnorm_backward(s.kraw.data() + (b0 + t) * kd + h * hd, W.k_norm.data(), dkt + h * hd, r.data(), hd, eps);
            std::copy(r.begin(), r.end(), dkt + h * hd);
          }
        }
      }
    }
    std::vector<float> da(static_cast<size_t>(N * H), 0.0f);
    mat_t(pool_, D.wq, qd, H, dq.data(), N, da.data());
    mat_t(pool_, D.wk, kd, H, dk.data(), N, da.data());
    mat_t(pool_, D.wv, kd, H, dv.data(), N, da.data());
    std::fill(dx.begin(), dx.end(), 0.0f);
    for (int64_t t = 0; t < N; ++t)
      if (live[static_cast<size_t>(t)]) {
        rmsnorm_backward(s.x.data() + t * H, W.attn_norm.data(), da.data() + t * H, tmp.data(), H, eps);
        for (int64_t i = 0; i < H; ++i) dx[static_cast<size_t>(t * H + i)] = dmid[static_cast<size_t>(t * H + i)] + tmp[static_cast<size_t>(i)];
      }
  }
  grads->assign(ns, {});
  for (size_t sq = 0; sq < ns; ++sq) {
    (*grads)[sq].assign(static_cast<size_t>(seqs[sq].n * H), 0.0f);
    std::copy(dx.begin() + off[sq] * H, dx.begin() + off[sq + 1] * H, (*grads)[sq].begin() + a0[sq] * H);
  }
  return out;
}

}  // namespace larql::lql
