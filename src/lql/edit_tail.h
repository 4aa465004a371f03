// The layers after an edit's layer, in f32, forward and back: the gradient of a prompt's
// log-probability of a token with respect to the residual rows entering those layers. INSERT ...
// MODE SUBJECT follows it to choose its feature's down column (docs/lql.md "Knowledge edits").
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"
#include "util/thread_pool.h"

namespace larql::lql {

/// Layers [first, n_layers) of a dense model (no mixture of experts), their matrices dequantised
/// to f32 once (about 4 bytes x the layers' weights: ~300 MB for Gemma 3 270M from layer 4), then
/// run on a prompt's residual rows and differentiated by hand (reverse mode; the forward is
/// docs/gemma3.md's, with every ModelConfig option the engine honours for dense models: RoPE
/// forms and scaling, sliding windows, q/k norms, Q/K/V biases, post-norms, softcaps).
class EditTail {
 public:
  /// Errors: Unsupported for a mixture-of-experts model or a weight type without dequantisation;
  /// InvalidArgument when `first` is not in [1, n_layers].
  EditTail(const Model& model, int64_t first, ThreadPool& pool);

  /// One prompt's log-probability (nats) of `target` at its last position, the model run from
  /// `x` ([n][hidden] f32, row-major: the residual rows of positions 0..n-1 entering layer
  /// `first`). With `grad` non-null it receives d logp / d x ([n][hidden]); rows before
  /// `from_pos` are not varied by the caller, so their gradient is left 0 and their share of the
  /// backward pass skipped. `top1` (non-null) receives the argmax token at the last position.
  double logprob(const std::vector<float>& x, int64_t n, int64_t target, std::vector<float>* grad = nullptr,
                 int64_t from_pos = 0, int64_t* top1 = nullptr) const;

  /// One sequence of a batch: its residual rows ([n][hidden]), token count, target and from_pos
  /// (as logprob's).
  struct TailSeq {
    const std::vector<float>* x;
    int64_t n, target, from_pos;
  };
  /// The keys and values of a sequence's positions before its from_pos at every layer
  /// (k[i], v[i]: layer first + i, [from_pos][kv_dim] f32, after the k norm and RoPE). While
  /// only rows from from_pos on vary, they do not change (attention is causal).
  struct Prefix {
    int64_t from_pos = 0;
    std::vector<std::vector<float>> k, v;
  };
  /// Runs the layers once on `seqs` and keeps each one's Prefix.
  std::vector<Prefix> prefixes(const std::vector<TailSeq>& seqs) const;

  /// logprob for several sequences at once: the batch's tokens go through each layer together,
  /// so its matrices are read once per layer instead of once per sequence. `grads` and `top1`
  /// (non-null) receive one entry per sequence. With `prefix` (from prefixes() on sequences with
  /// the same rows before from_pos, the same from_pos and the same layers) only positions from
  /// from_pos on are computed: the rows of x before it are not read. Errors: InvalidArgument when
  /// a prefix does not match its sequence's from_pos or the layer count.
  std::vector<double> logprobs(const std::vector<TailSeq>& seqs, std::vector<std::vector<float>>* grads = nullptr,
                               std::vector<int64_t>* top1 = nullptr, const std::vector<Prefix>* prefix = nullptr) const;

  int64_t first() const { return first_; }

 private:
  std::vector<double> run(const std::vector<TailSeq>& seqs, std::vector<std::vector<float>>* grads, std::vector<int64_t>* top1,
                          const std::vector<Prefix>* prefix, std::vector<Prefix>* prefix_out) const;
  struct Layer {
    std::vector<float> wq, wk, wv, wo, wg, wu, wd;  // row-major [out][in]
  };
  const Model& model_;
  int64_t first_;
  ThreadPool& pool_;  // lm_head's matmul
  std::vector<Layer> layers_;  // layers_[i] is model layer first_ + i
};

/// y = RMSNorm(x) * w over n values (w empty: no weight). Its backward: dx given dy, for the
/// same x (the norm's Jacobian applied transposed). Used by EditTail and by MODE SUBJECT for the
/// post-FFN norm of the edited layer.
void rmsnorm_backward(const float* x, const float* w, const float* dy, float* dx, int64_t n, float eps);

}  // namespace larql::lql
