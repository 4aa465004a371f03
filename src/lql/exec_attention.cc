// EXPLAIN INFER ... WITH ATTENTION: per layer and head, the positions the prompt's last token
// attends to most (docs/lql.md "What runs"). A debug path beside the forward pass, which stays as
// it is: the run keeps every position's residual entering each layer (the LayerObserver rows),
// and the weights are recomputed from them with the model's own projections (Forward::qkv:
// attn_norm, Q/K/V, q/k norms, RoPE) and the attention formula of Forward::attend (scale, soft
// cap, sliding window, softmax).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "compute/ops.h"
#include "inference/forward.h"
#include "lql/exec_internal.h"
#include "model/model.h"
#include "util/error.h"

namespace larql::lql::detail {

Table explain_attention(Session& s, const ExplainStmt& st, const std::vector<int64_t>& layers, int k, Pos pos) {
  const std::string what = "EXPLAIN INFER ... WITH ATTENTION";
  if (st.relations_only)
    throw Error(ErrorKind::InvalidArgument, what + " at " + pos.str() + ": RELATIONS ONLY filters features; with "
                                                   "WITH ATTENTION the rows are attention weights");
  auto model = s.model(what);
  const ForwardRun run = run_forward(s, st.prompt, true, what);
  const auto& c = model->config();
  const int64_t n = static_cast<int64_t>(run.tokens.size()), last = n - 1, hidden = c.hidden;
  const int64_t n_layers = static_cast<int64_t>(c.layers.size());
  const int64_t hd = c.head_dim, group = c.n_heads / c.n_kv_heads;
  Forward fwd(model, std::shared_ptr<ThreadPool>(std::shared_ptr<ThreadPool>{}, &s.pool()));
  Table t;
  t.statement = "EXPLAIN";
  t.columns = {{"layer", Column::Type::Int}, {"head", Column::Type::Int},  {"rank", Column::Type::Int},
               {"pos", Column::Type::Int},   Column{"token", Column::Type::Text, 4, true},                 {"weight", Column::Type::Float, 4}};
  std::vector<float> x(static_cast<size_t>(n * hidden)), q(static_cast<size_t>(n * c.q_dim())),
      kk(static_cast<size_t>(n * c.kv_dim())), v(static_cast<size_t>(n * c.kv_dim()));
  for (int64_t l : layers) {
    s.check_cancel();
    // run.rows: layer-major within each position.
    for (int64_t p = 0; p < n; ++p) {
      const LayerRows& r = run.rows.at(static_cast<size_t>(p * n_layers + l));
      std::copy(r.residual_in.begin(), r.residual_in.end(), x.begin() + p * hidden);
    }
    fwd.qkv(l, x.data(), n, 0, q.data(), kk.data(), v.data());
    const LayerConfig& lc = c.layers[static_cast<size_t>(l)];
    const int64_t lo = lc.sliding ? std::max<int64_t>(0, last - lc.window + 1) : 0;
    const int64_t m = last - lo + 1;
    std::vector<float> w(static_cast<size_t>(m));
    std::vector<int64_t> order(static_cast<size_t>(m));
    for (int64_t h = 0; h < c.n_heads; ++h) {
      const float* qh = q.data() + last * c.q_dim() + h * hd;
      const int64_t g = h / group;
      for (int64_t j = 0; j < m; ++j) {
        float sc = compute::dot_f32(qh, kk.data() + (lo + j) * c.kv_dim() + g * hd, hd) * c.attn_scale;
        if (c.attn_logit_softcap > 0) sc = c.attn_logit_softcap * std::tanh(sc / c.attn_logit_softcap);
        w[static_cast<size_t>(j)] = sc;
      }
      compute::softmax(w.data(), m);
      std::iota(order.begin(), order.end(), int64_t{0});
      const size_t top = std::min<size_t>(static_cast<size_t>(std::max(k, 0)), order.size());
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(), [&](int64_t a, int64_t b) {
        return w[static_cast<size_t>(a)] != w[static_cast<size_t>(b)] ? w[static_cast<size_t>(a)] > w[static_cast<size_t>(b)]
                                                                      : a < b;
      });
      for (size_t i = 0; i < top; ++i) {
        const int64_t j = lo + order[i];
        t.rows.push_back({l, h, static_cast<int64_t>(i + 1), j, s.token_piece(run.tokens[static_cast<size_t>(j)]),
                          static_cast<double>(w[static_cast<size_t>(order[i])])});
      }
    }
  }
  int64_t best = 0;
  for (int64_t i = 1; i < static_cast<int64_t>(run.last_logits.size()); ++i)
    if (run.last_logits[static_cast<size_t>(i)] > run.last_logits[static_cast<size_t>(best)]) best = i;
  t.title = "Attention of the last token of \"" + st.prompt + "\" (" + std::to_string(n) + " tokens; prediction \"" +
            s.token_text(best) + "\"): per layer and head, the top " + std::to_string(k) + " positions by weight";
  return t;
}

}  // namespace larql::lql::detail
