#include "lql/minimize.h"

#include <cmath>
#include <deque>
#include <numeric>

namespace larql::lql {

namespace {

double dotv(const std::vector<double>& a, const std::vector<double>& b) { return std::inner_product(a.begin(), a.end(), b.begin(), 0.0); }

}  // namespace

MinimizeResult minimize_lbfgs(std::vector<float>& x, const Objective& f, const std::function<bool()>& done, const MinimizeOptions& opt) {
  const size_t n = x.size();
  std::vector<double> g(n), gn(n), p(n);
  std::deque<std::vector<double>> S, Y;  // s_k = x_{k+1} - x_k, y_k = g_{k+1} - g_k
  int evals = 1;
  double fx = f(x, g);
  if (done()) return {evals, fx};
  std::vector<float> xn(n);
  while (evals < opt.max_evals) {
    // p = -H g by the two-loop recursion.
    std::vector<double> q = g, al(S.size());
    for (size_t k = S.size(); k-- > 0;) {
      al[k] = dotv(S[k], q) / dotv(Y[k], S[k]);
      for (size_t j = 0; j < n; ++j) q[j] -= al[k] * Y[k][j];
    }
    const double gnorm = std::sqrt(dotv(g, g));
    if (!(gnorm > 0)) break;  // a stationary point
    const double gamma = S.empty() ? opt.first_step / gnorm : dotv(S.back(), Y.back()) / dotv(Y.back(), Y.back());
    for (double& v : q) v *= gamma;
    for (size_t k = 0; k < S.size(); ++k) {
      const double be = dotv(Y[k], q) / dotv(Y[k], S[k]);
      for (size_t j = 0; j < n; ++j) q[j] += S[k][j] * (al[k] - be);
    }
    for (size_t j = 0; j < n; ++j) p[j] = -q[j];
    double slope = dotv(g, p);
    if (!(slope < 0)) {  // not a descent direction: forget the pairs, step along -g
      S.clear(), Y.clear();
      for (size_t j = 0; j < n; ++j) p[j] = -g[j] * opt.first_step / gnorm;
      slope = dotv(g, p);
    }
    const double pn = std::sqrt(dotv(p, p));
    if (pn > opt.max_step)
      for (double& v : p) v *= opt.max_step / pn;
    slope = dotv(g, p);
    // Backtracking: t = 1, 1/2, ... while the decrease is short of c1 t slope.
    double t = 1.0, fn = 0;
    bool stop = false;
    for (int ls = 0; ls < 7 && evals < opt.max_evals; ++ls) {
      for (size_t j = 0; j < n; ++j) xn[j] = static_cast<float>(x[j] + t * p[j]);
      fn = f(xn, gn);
      ++evals;
      if ((stop = done())) break;
      if (std::isfinite(fn) && fn <= fx + 1e-4 * t * slope) break;
      t *= 0.5;
    }
    if (stop) {
      x = xn;
      return {evals, fn};
    }
    if (!std::isfinite(fn) || fn > fx) break;  // no acceptable point along p
    std::vector<double> sk(n), yk(n);
    for (size_t j = 0; j < n; ++j) sk[j] = static_cast<double>(xn[j]) - x[j], yk[j] = gn[j] - g[j];
    if (dotv(sk, yk) > 1e-12 * std::sqrt(dotv(sk, sk) * dotv(yk, yk))) {  // keep H positive definite
      S.push_back(std::move(sk)), Y.push_back(std::move(yk));
      if (static_cast<int>(S.size()) > opt.memory) S.pop_front(), Y.pop_front();
    }
    x = xn, g = gn, fx = fn;
  }
  return {evals, fx};
}

}  // namespace larql::lql
