#include "compute/logits.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "compute/simd.h"
#include "util/error.h"

namespace larql::compute {
namespace {

void need_values(const char* fn, int64_t n) {
  if (n < 1) throw Error(ErrorKind::InvalidArgument, std::string(fn) + ": need at least one value, got " + std::to_string(n));
}

template <class T>
int64_t argmax_impl(const T* x, int64_t n) {
  need_values("argmax", n);
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

template <class P>
double kl_impl(const P* logp, const double* logq, int64_t n) {
  need_values("kl_nats", n);
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double lp = static_cast<double>(logp[i]);
    const double p = std::exp(lp);
    if (p > 0) kl += p * (lp - logq[i]);
  }
  return std::max(0.0, kl);
}

}  // namespace

void log_softmax(const float* x, int64_t n, std::vector<double>& out) {
  need_values("log_softmax", n);
  out.resize(static_cast<size_t>(n));
  double mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - mx);
  const double lse = mx + std::log(s);
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<double>(x[i]) - lse;
}

int64_t argmax(const float* x, int64_t n) {
  need_values("argmax", n);
  return simd_kernels().argmax(x, n);
}
int64_t argmax(const double* x, int64_t n) { return argmax_impl(x, n); }

double kl_nats(const double* logp, const double* logq, int64_t n) { return kl_impl(logp, logq, n); }
double kl_nats(const float* logp, const double* logq, int64_t n) { return kl_impl(logp, logq, n); }

void top_k(const float* x, int64_t n, int64_t k, std::vector<Scored>& out) {
  need_values("top_k", n);
  if (k < 1) throw Error(ErrorKind::InvalidArgument, "top_k: k must be >= 1, got " + std::to_string(k));
  auto before = [](const Scored& a, const Scored& b) { return a.value > b.value || (a.value == b.value && a.index < b.index); };
  out.clear();
  if (k >= n) {
    out.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = {x[i], static_cast<int32_t>(i)};
    std::sort(out.begin(), out.end(), before);
    return;
  }
  // One pass with a bounded heap (its root the worst kept): an element enters only when it beats
  // the root, which after the first few thousand is rare, so the pass is one compare per element
  // (it was: 262,144 pairs written, then partial_sort). Scanning in index order, a later equal
  // value never beats the root (its index is larger), so the result is the same total order.
  out.reserve(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) out.push_back({x[i], static_cast<int32_t>(i)});
  std::make_heap(out.begin(), out.end(), before);
  float worst = out.front().value;
  for (int64_t i = k; i < n; ++i) {
    if (!(x[i] > worst)) continue;  // NaN and ties lose, as in `before` (NaN compares false)
    std::pop_heap(out.begin(), out.end(), before);
    out.back() = {x[i], static_cast<int32_t>(i)};
    std::push_heap(out.begin(), out.end(), before);
    worst = out.front().value;
  }
  std::sort_heap(out.begin(), out.end(), before);
}

}  // namespace larql::compute
