// An independent, naive double-precision Gemma 3 forward pass over the synthetic model's raw f32
// weights, written from docs/gemma3.md (not from src/inference). Test-only.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "testlib/synthetic_model.h"

namespace larql::testing {

struct RefOptions {
  bool honour_sliding_window = true;  ///< false: every layer global (to show the test can fail)
  int64_t window_all_layers = 0;      ///< > 0: additionally, every layer sees only this many positions
  bool sink = false;                  ///< with window_all_layers: position 0 stays visible to the window
                                      ///< (the model's own sliding mask still applies)
  /// > 0: unlimited-context's windows of this many positions on the global layers: a query at t
  /// in window k = t / global_window sees [(k - 1) * global_window, t] (the previous window and
  /// its own) and, with `sink`, position 0. Sliding layers keep their own mask.
  int64_t global_window = 0;
  /// >= 0: the FFN of this layer is replaced: its output (before the post-FFN norm) is
  /// ffn_scale * W_down(...) + ffn_add (ffn_add empty: nothing added).
  int64_t ffn_patch_layer = -1;
  double ffn_scale = 1.0;
  std::vector<double> ffn_add;
};

class ReferenceGemma3 {
 public:
  explicit ReferenceGemma3(const SyntheticModel& m, RefOptions opt = {}) : m_(m), s_(m.spec), opt_(opt) {}

  /// Logits [n][vocab] for every position of `tokens` (positions 0..n-1).
  std::vector<std::vector<double>> logits(const std::vector<int32_t>& tokens) const {
    const int64_t H = s_.hidden, n = static_cast<int64_t>(tokens.size());
    std::vector<std::vector<double>> x(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(H)));
    const double escale = std::sqrt(static_cast<double>(H));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < H; ++i) x[t][i] = m_.w.token_embd[static_cast<size_t>(tokens[t] * H + i)] * escale;
    for (int64_t l = 0; l < s_.n_layers; ++l) layer(l, x);
    std::vector<std::vector<double>> out;
    for (int64_t t = 0; t < n; ++t) {
      const auto h = rmsnorm(x[t], m_.w.output_norm);
      std::vector<double> lg(static_cast<size_t>(m_.vocab));
      for (int64_t v = 0; v < m_.vocab; ++v) {
        double s = 0;
        for (int64_t i = 0; i < H; ++i) s += static_cast<double>(m_.w.token_embd[static_cast<size_t>(v * H + i)]) * h[i];
        lg[v] = s;  // tied lm_head: the unscaled embedding matrix
      }
      out.push_back(std::move(lg));
    }
    return out;
  }

  // Gemma 3: layer i is global iff (i + 1) % 6 == 0.
  bool is_global(int64_t l) const { return (l + 1) % 6 == 0; }

 private:
  std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<float>& w, size_t off = 0,
                              size_t n = 0) const {
    if (n == 0) n = x.size();
    double ss = 0;
    for (size_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + static_cast<double>(s_.norm_eps));
    std::vector<double> y(n);
    for (size_t i = 0; i < n; ++i) y[i] = x[off + i] * r * w[i];
    return y;
  }
  // y = W x, W [rows, cols] row-major.
  static std::vector<double> matvec(const std::vector<float>& W, const std::vector<double>& x, int64_t rows) {
    const int64_t cols = static_cast<int64_t>(x.size());
    std::vector<double> y(static_cast<size_t>(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) y[r] += static_cast<double>(W[static_cast<size_t>(r * cols + c)]) * x[c];
    return y;
  }
  // NeoX split-half: dimension i rotates with i + d/2 by pos * base^(-2i/d).
  void rope(std::vector<double>& v, size_t off, int64_t pos, double base) const {
    const int64_t d = s_.head_dim, half = d / 2;
    for (int64_t i = 0; i < half; ++i) {
      const double th = static_cast<double>(pos) * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
      const double a = v[off + i], b = v[off + i + half];
      v[off + i] = a * std::cos(th) - b * std::sin(th);
      v[off + i + half] = a * std::sin(th) + b * std::cos(th);
    }
  }
  static double gelu(double x) {
    const double pi = 3.14159265358979323846;
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
  }

  void layer(int64_t l, std::vector<std::vector<double>>& x) const {
    const SyntheticLayer& L = m_.w.layers[static_cast<size_t>(l)];
    const int64_t H = s_.hidden, hd = s_.head_dim, nh = s_.n_heads, nkv = s_.n_kv_heads;
    const int64_t n = static_cast<int64_t>(x.size());
    const bool global = is_global(l);
    const double base = global ? s_.rope_global : 10000.0;
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (int64_t t = 0; t < n; ++t) {
      const auto h = rmsnorm(x[t], L.attn_norm);
      q[t] = matvec(L.wq, h, nh * hd);
      k[t] = matvec(L.wk, h, nkv * hd);
      v[t] = matvec(L.wv, h, nkv * hd);
      for (int64_t hh = 0; hh < nh; ++hh) {
        auto y = rmsnorm(q[t], L.q_norm, static_cast<size_t>(hh * hd), static_cast<size_t>(hd));
        for (int64_t i = 0; i < hd; ++i) q[t][hh * hd + i] = y[i];
        rope(q[t], static_cast<size_t>(hh * hd), t, base);
      }
      for (int64_t hh = 0; hh < nkv; ++hh) {
        auto y = rmsnorm(k[t], L.k_norm, static_cast<size_t>(hh * hd), static_cast<size_t>(hd));
        for (int64_t i = 0; i < hd; ++i) k[t][hh * hd + i] = y[i];
        rope(k[t], static_cast<size_t>(hh * hd), t, base);
      }
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));  // query_pre_attn_scalar = head_dim
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> attn(static_cast<size_t>(nh * hd), 0.0);
      for (int64_t hh = 0; hh < nh; ++hh) {
        const int64_t g = hh / (nh / nkv);
        // Explicit mask: causal, and a sliding layer sees positions j with t - j < window.
        std::vector<double> sc;
        std::vector<int64_t> idx;
        for (int64_t j = 0; j <= t; ++j) {
          bool visible = global || !opt_.honour_sliding_window || (t - j) < s_.sliding_window;
          if (opt_.window_all_layers > 0 && (t - j) >= opt_.window_all_layers && !(opt_.sink && j == 0)) visible = false;
          if (opt_.global_window > 0 && global) {
            const int64_t start = (t / opt_.global_window - 1) * opt_.global_window;
            visible = j >= start || (opt_.sink && j == 0);
          }
          if (!visible) continue;
          double s = 0;
          for (int64_t i = 0; i < hd; ++i) s += q[t][hh * hd + i] * k[j][g * hd + i];
          sc.push_back(s * scale);
          idx.push_back(j);
        }
        double mx = -1e300, z = 0;
        for (double s : sc) mx = std::max(mx, s);
        for (double& s : sc) z += (s = std::exp(s - mx));
        for (size_t a = 0; a < sc.size(); ++a)
          for (int64_t i = 0; i < hd; ++i) attn[hh * hd + i] += sc[a] / z * v[idx[a]][g * hd + i];
      }
      auto o = matvec(L.wo, attn, H);
      o = rmsnorm(o, L.post_attn_norm);
      for (int64_t i = 0; i < H; ++i) x[t][i] += o[i];
      const auto h = rmsnorm(x[t], L.ffn_norm);
      const auto gate = matvec(L.w_gate, h, s_.ffn);
      const auto up = matvec(L.w_up, h, s_.ffn);
      std::vector<double> act(static_cast<size_t>(s_.ffn));
      for (int64_t i = 0; i < s_.ffn; ++i) act[i] = gelu(gate[i]) * up[i];
      auto d = matvec(L.w_down, act, H);
      if (l == opt_.ffn_patch_layer) {
        for (int64_t i = 0; i < H; ++i) d[i] = opt_.ffn_scale * d[i] + (opt_.ffn_add.empty() ? 0.0 : opt_.ffn_add[i]);
      }
      d = rmsnorm(d, L.post_ffn_norm);
      for (int64_t i = 0; i < H; ++i) x[t][i] += d[i];
    }
  }

  const SyntheticModel& m_;
  SyntheticSpec s_;
  RefOptions opt_;
};

}  // namespace larql::testing
