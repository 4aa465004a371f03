// The mixture-of-experts FFN (inference/ffn.h MoeFfn). Routing as llama.cpp's build_moe_ffn with
// LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX and transformers' MixtralSparseMoeBlock /
// Qwen2MoeSparseMoeBlock: probabilities = softmax(router · h) over every expert, the top k by
// probability (ties: the lower expert id, as a stable descending sort), their probabilities as
// weights, renormalised to sum 1 when the config says so (Mixtral; the sum clamped below at
// 6.103515625e-5 as llama.cpp does), then out = sum_k weight_k * expert_k(h). A shared expert
// (Qwen2-MoE) adds sigmoid(shexp_gate · h) * shared(h).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "compute/ops.h"
#include "inference/forward.h"
#include "util/error.h"

namespace larql {

namespace {

using G = Workspace;

// The gated FFN of one expert over m gathered rows x [m, hidden] -> y [m, hidden].
void expert_ffn(Forward& f, const TensorView& w_gate, const TensorView& w_up, const TensorView& w_down,
                const float* x, int64_t m, int64_t width, float* gate, float* up, float* y) {
  const int64_t H = f.config().hidden;
  Workspace& ws = f.workspace();
  ws.acts.reset(x, m, H);
  compute::matmul_many(f.pool(), ws.acts, {{w_gate, gate}, {w_up, up}});
  compute::silu_mul(f.pool(), gate, up, gate, m * width);
  ws.acts.reset(gate, m, width);
  compute::matmul(f.pool(), w_down, ws.acts, y);
}

}  // namespace

void route_experts(const float* logits, int64_t n_experts, int64_t k, bool renormalise, float* probs,
                   int32_t* chosen, float* weights) {
  std::copy(logits, logits + n_experts, probs);
  compute::softmax(probs, n_experts);
  // The k largest, in descending order of probability; equal ones by ascending id.
  thread_local std::vector<int32_t> order;
  order.resize(static_cast<size_t>(n_experts));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [probs](int32_t a, int32_t b) {
    return probs[a] != probs[b] ? probs[a] > probs[b] : a < b;
  });
  float sum = 0;
  for (int64_t j = 0; j < k; ++j) {
    chosen[j] = order[static_cast<size_t>(j)];
    weights[j] = probs[chosen[j]];
    sum += weights[j];
  }
  if (renormalise) {
    sum = std::max(sum, 6.103515625e-5f);
    for (int64_t j = 0; j < k; ++j) weights[j] /= sum;
  }
}

void route_rows(ThreadPool& pool, const ModelConfig& c, const LayerWeights& w, const float* h, int64_t n,
                int32_t* chosen, float* weights) {
  const int64_t E = c.n_experts, K = c.n_experts_used;
  std::vector<float> logits(static_cast<size_t>(n * E)), probs(static_cast<size_t>(E));
  compute::Activations acts;
  acts.reset(h, n, c.hidden);
  compute::matmul(pool, w.router, acts, logits.data());
  for (int64_t t = 0; t < n; ++t)
    route_experts(logits.data() + t * E, E, K, c.expert_weights_norm, probs.data(), chosen + t * K, weights + t * K);
}

void require_ffn_weights(const Model& m, int64_t li) {
  if (m.part().ffn) return m.require_layer(li, "the FFN");
  throw Error(ErrorKind::InvalidArgument, "the FFN of layer " + std::to_string(li) +
                                              " needs the FFN weights, but this model part holds " +
                                              m.part().describe(m.config()) + " (" + m.path() +
                                              "): run it where they are (a remote FFN)");
}

void moe_route(Forward& f, int64_t li, const float* h, int64_t n, int32_t* chosen, float* weights) {
  const ModelConfig& c = f.config();
  const LayerWeights& w = f.model().weights().layers[static_cast<size_t>(li)];
  Workspace& ws = f.workspace();
  const int64_t H = c.hidden, E = c.n_experts, K = c.n_experts_used;
  float* logits = G::grow(ws.moe_logits, static_cast<size_t>(n * E));
  ws.acts.reset(h, n, H);
  compute::matmul(f.pool(), w.router, ws.acts, logits);
  float* probs = G::grow(ws.moe_probs, static_cast<size_t>(E));
  for (int64_t t = 0; t < n; ++t)
    route_experts(logits + t * E, E, K, c.expert_weights_norm, probs, chosen + t * K, weights + t * K);
}

void moe_expert_outputs(Forward& f, int64_t li, const float* h, int64_t n, int64_t k, const int32_t* chosen, float* y,
                        bool held_only) {
  const ModelConfig& c = f.config();
  const ModelPart& part = f.model().part();
  const LayerWeights& w = f.model().weights().layers[static_cast<size_t>(li)];
  Workspace& ws = f.workspace();
  const int64_t H = c.hidden, E = c.n_experts, Fe = c.expert_ffn;
  // Tokens grouped by expert: each expert runs once over the rows that chose it (a decode batch
  // of many sequences reads each chosen expert's weights once). Row results do not depend on the
  // group (the kernels are row-independent), so batching changes no bit.
  std::vector<int64_t>& slots = ws.moe_slots;
  for (int64_t s = 0; s < n * k; ++s)
    if (chosen[s] < 0 || chosen[s] >= E)
      throw Error(ErrorKind::InvalidArgument, "layer " + std::to_string(li) + ": expert " + std::to_string(chosen[s]) +
                                                  " is not one of the model's " + std::to_string(E));
  for (int64_t e = 0; e < E; ++e) {
    slots.clear();
    for (int64_t s = 0; s < n * k; ++s)
      if (chosen[s] == e) slots.push_back(s);
    const int64_t m = static_cast<int64_t>(slots.size());
    if (m == 0) continue;
    if (!part.has_expert(e)) {
      if (held_only) {
        for (int64_t i = 0; i < m; ++i) std::fill_n(y + slots[static_cast<size_t>(i)] * H, H, 0.0f);
        continue;
      }
      throw Error(ErrorKind::InvalidArgument, "layer " + std::to_string(li) + " routes to expert " + std::to_string(e) +
                                                  ", but this model part holds " + part.describe(c) +
                                                  ": run the experts where they are (remote experts)");
    }
    float* x = G::grow(ws.moe_rows, static_cast<size_t>(m * H));
    for (int64_t i = 0; i < m; ++i) std::copy_n(h + (slots[static_cast<size_t>(i)] / k) * H, H, x + i * H);
    float* gate = G::grow(ws.gate, static_cast<size_t>(m * Fe));
    float* up = G::grow(ws.up, static_cast<size_t>(m * Fe));
    float* ye = G::grow(ws.moe_expert_out, static_cast<size_t>(m * H));
    const size_t ei = static_cast<size_t>(e);
    expert_ffn(f, w.exp_gate[ei], w.exp_up[ei], w.exp_down[ei], x, m, Fe, gate, up, ye);
    for (int64_t i = 0; i < m; ++i) std::copy_n(ye + i * H, H, y + slots[static_cast<size_t>(i)] * H);
  }
}

void moe_combine(Forward& f, int64_t li, const float* h, int64_t n, const float* weights, const float* y, float* out) {
  const ModelConfig& c = f.config();
  const LayerWeights& w = f.model().weights().layers[static_cast<size_t>(li)];
  Workspace& ws = f.workspace();
  const int64_t H = c.hidden, K = c.n_experts_used;
  // Each row: its experts' outputs weighted, summed in the order chosen.
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * H;
    std::fill(o, o + H, 0.0f);
    for (int64_t j = 0; j < K; ++j) compute::axpy(weights[t * K + j], y + (t * K + j) * H, o, H);
  }
  if (c.shared_expert_ffn > 0) {
    const int64_t Fs = c.shared_expert_ffn;
    float* gate = G::grow(ws.gate, static_cast<size_t>(n * Fs));
    float* up = G::grow(ws.up, static_cast<size_t>(n * Fs));
    float* s = G::grow(ws.moe_expert_out, static_cast<size_t>(n * H));
    expert_ffn(f, w.shexp_gate, w.shexp_up, w.shexp_down, h, n, Fs, gate, up, s);
    for (int64_t t = 0; t < n; ++t) {
      const float g = compute::dot_f32(w.shexp_router.data(), h + t * H, H);
      compute::axpy(1.0f / (1.0f + std::exp(-g)), s + t * H, out + t * H, H);
    }
  }
}

void MoeFfn::run(Forward& f, int64_t li, const float* h, int64_t n, float* out) {
  require_ffn_weights(f.model(), li);
  const ModelConfig& c = f.config();
  Workspace& ws = f.workspace();
  const int64_t H = c.hidden, K = c.n_experts_used;
  std::vector<int32_t>& chosen = ws.moe_chosen;
  chosen.resize(static_cast<size_t>(n * K));
  float* weights = G::grow(ws.moe_weights, static_cast<size_t>(n * K));
  moe_route(f, li, h, n, chosen.data(), weights);
  float* y = G::grow(ws.moe_out, static_cast<size_t>(n * K * H));  // [n, K, hidden]
  moe_expert_outputs(f, li, h, n, K, chosen.data(), y, /*held_only=*/false);
  moe_combine(f, li, h, n, weights, y, out);
}

}  // namespace larql
