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

/// Error{InvalidArgument} naming the layer and the model part unless the part holds layer `layer`'s
/// FFN weights (ModelPart::ffn); DenseFfn and MoeFfn check it first.
void require_ffn_weights(const Model& model, int64_t layer);

/// MoeFfn in its three stages, for a caller that runs the experts elsewhere (shard/: expert
/// shards). MoeFfn::run is moe_route, then moe_expert_outputs, then moe_combine, so a caller that
/// gathers y from several processes and combines it here gets MoeFfn's rows bit for bit.
///   moe_route: chosen [n, k] and weights [n, k] (k = n_experts_used) for the ffn-normed rows
///     h [n, hidden] (the router's matmul, then route_experts).
///   moe_expert_outputs: y [n*k, hidden], slot t*k+j = expert chosen[t*k+j] on row t; `k` is the
///     experts per row. An expert the model part does not hold is Error{InvalidArgument}, or with
///     `held_only` its slots are zeros. Errors: Error{InvalidArgument} for an expert id out of range.
///   moe_combine: out [n, hidden] = sum_j weights[t,j] * y[t*k+j] in slot order, plus the shared
///     expert when the model has one (computed here: the caller's part must hold it).
void moe_route(Forward& f, int64_t layer, const float* h, int64_t n, int32_t* chosen, float* weights);
void moe_expert_outputs(Forward& f, int64_t layer, const float* h, int64_t n, int64_t k, const int32_t* chosen, float* y,
                        bool held_only);
void moe_combine(Forward& f, int64_t layer, const float* h, int64_t n, const float* weights, const float* y, float* out);

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
