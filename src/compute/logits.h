// Functions of a logit vector: log-softmax, argmax, KL divergence, top-k. One copy each for the
// sampler, the engines, calibration, the accuracy suite and `larql bench`.
//
// Shapes: a logit vector is n values x[0..n) (n = the vocabulary for a model's logits). Log
// probabilities are in nats (natural log). Errors: Error{InvalidArgument} for n < 1 (or k < 1).
// Non-finite inputs are not checked: a NaN logit makes log_softmax's outputs NaN.
#pragma once

#include <cstdint>
#include <vector>

namespace larql::compute {

/// out[i] = x[i] - logsumexp(x), in nats, out resized to n. logsumexp(x) = m + ln sum_j exp(x[j] - m)
/// with m = max_j x[j] (the max-shift form, e.g. Goodfellow et al. 2016 "Deep Learning" §4.1):
/// x promoted to double, the exponentials summed in double in index order.
void log_softmax(const float* x, int64_t n, std::vector<double>& out);

/// Index of the largest of x[0..n); ties: the lowest index. (A NaN at index 0 is never replaced,
/// a NaN elsewhere never chosen: comparisons are `x[i] > best`.)
int64_t argmax(const float* x, int64_t n);
int64_t argmax(const double* x, int64_t n);

/// KL(P || Q) = sum_i p_i (ln p_i - ln q_i) in nats (Cover & Thomas, "Elements of Information
/// Theory", eq. 2.26), from log-probabilities logp, logq of n outcomes (e.g. log_softmax outputs);
/// p_i = exp(logp[i]). Terms with p_i = 0 contribute 0 (0 ln 0 = 0); summed in double in index
/// order; a rounding-level negative sum is returned as 0 (KL >= 0). `logp` may be f32 (a stored
/// reference: each value is promoted to double).
double kl_nats(const double* logp, const double* logq, int64_t n);
double kl_nats(const float* logp, const double* logq, int64_t n);

/// A value and its index in the vector it came from.
struct Scored {
  float value;
  int32_t index;
};

/// The min(k, n) largest of x[0..n) into `out` (resized; its capacity is reused), largest first;
/// ties: the lower index first (so the order is a total order and does not depend on the sort's
/// implementation). k >= n sorts all n. Errors: n < 1, k < 1.
void top_k(const float* x, int64_t n, int64_t k, std::vector<Scored>& out);

}  // namespace larql::compute
