// The FFN of a layer behind an interface, chosen per layer (Forward::set_ffn): the model's dense
// gated FFN by default; later a patched FFN, a gate-KNN walk, a remote one (docs/architecture.md
// "Seams", "The layer as stages").
#pragma once

#include <cstdint>

#include "model/model.h"
#include "util/thread_pool.h"

namespace larql {

class Forward;

/// The inner function of a layer's FFN block:
///   out [n, hidden] = FFN_layer(h)   for the ffn-normed rows h [n, hidden]
/// (Forward::ffn_block applies ffn_norm before and the post-FFN norm and residual add after).
/// Rows are independent: row t of `out` must depend on row t of `h` alone (batch invariance,
/// docs/architecture.md "Seams"). May run the forward's pool (`f.pool()`) and use its workspace's
/// FFN buffers (`f.workspace().gate`, `up`, `acts`; `h` and `down` are this call's input and
/// output); must not call back into Forward::forward, layer, finish_layer or ffn_block. One Ffn may be shared by several Forwards running on
/// different threads: then it must keep no mutable state of its own (DenseFfn keeps none).
/// Errors: may throw (an Error naming what failed); never from inside a pool job.
class Ffn {
 public:
  virtual ~Ffn() = default;
  virtual void run(Forward& f, int64_t layer, const float* h, int64_t n, float* out) = 0;
};

/// The model's own FFN (Gemma 3, HF modeling_gemma3.py Gemma3MLP):
///   out = W_down · (act(W_gate · h) ⊙ (W_up · h)), act = GELU-tanh (or SiLU per the config).
/// Stateless; what Forward uses for every layer unless set_ffn says otherwise.
class DenseFfn final : public Ffn {
 public:
  void run(Forward& f, int64_t layer, const float* h, int64_t n, float* out) override;
};

/// The model's FFN when it is a mixture of experts (ModelConfig::n_experts > 0; Shazeer et al.
/// 2017, Mixtral: Jiang et al. 2024): a router ranks the experts per row (route_experts), each
/// row runs its n_experts_used SiLU-gated expert FFNs and sums their outputs weighted; a shared
/// expert, when the model has one, adds sigmoid(w_s · h) * FFN_shared(h) (Qwen2-MoE). Rows that
/// chose the same expert run it together (one pass over its weights per call), which changes no
/// bit of any row. Stateless; Forward uses it for every layer of such a model.
class MoeFfn final : public Ffn {
 public:
  void run(Forward& f, int64_t layer, const float* h, int64_t n, float* out) override;
};

/// One row's routing: probs [n_experts] = softmax(logits); chosen [k] the experts of the k largest
/// probabilities in descending order (ties: the lower id); weights [k] their probabilities,
/// divided by their sum (clamped below at 6.103515625e-5, llama.cpp build_moe_ffn) when
/// `renormalise`. k in [1, n_experts].
void route_experts(const float* logits, int64_t n_experts, int64_t k, bool renormalise, float* probs,
                   int32_t* chosen, float* weights);

/// The routing MoeFfn computes for rows h [n, hidden] of a layer's FFN input — the router's
/// logits by the same matmul, then route_experts — for a reader outside the forward pass (LQL's
/// WALK and INSERT), so it names exactly the experts the forward pass runs. chosen [n, k],
/// weights [n, k]. k = the config's n_experts_used.
void route_rows(ThreadPool& pool, const ModelConfig& c, const LayerWeights& w, const float* h, int64_t n,
                int32_t* chosen, float* weights);

}  // namespace larql
