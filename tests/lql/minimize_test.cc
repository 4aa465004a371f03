// minimize_lbfgs (src/lql/minimize.h) on functions whose minimum is known by hand: a separable
// quadratic sum_i a_i (x_i - c_i)^2 (minimum at c), Rosenbrock's valley (Rosenbrock 1960: minimum
// 0 at (1, 1)); the step cap, the early stop and the value it reports.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "lql/minimize.h"

namespace larql::lql {
namespace {

TEST(MinimizeLbfgs, FindsAQuadraticsMinimum) {
  const int n = 50;
  std::vector<double> a(n), c(n);
  for (int i = 0; i < n; ++i) a[i] = 1.0 + i % 7, c[i] = std::sin(i) * 3;
  const Objective f = [&](const std::vector<float>& x, std::vector<double>& g) {
    double v = 0;
    for (int i = 0; i < n; ++i) {
      v += a[i] * (x[i] - c[i]) * (x[i] - c[i]);
      g[i] = 2 * a[i] * (x[i] - c[i]);
    }
    return v;
  };
  std::vector<float> x(n, 0.0f);
  MinimizeOptions o;
  o.first_step = o.max_step = 5.0;
  o.max_evals = 60;
  const MinimizeResult r = minimize_lbfgs(x, f, [] { return false; }, o);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(x[i], c[i], 1e-3) << i;
  EXPECT_LE(r.evals, 60);
  std::vector<double> g(n);
  EXPECT_DOUBLE_EQ(r.f, f(x, g));  // the value reported is the value at x
}

TEST(MinimizeLbfgs, FollowsRosenbrocksValley) {
  const Objective f = [](const std::vector<float>& x, std::vector<double>& g) {
    const double a = x[0], b = x[1];
    g[0] = -2 * (1 - a) - 400 * a * (b - a * a);
    g[1] = 200 * (b - a * a);
    return (1 - a) * (1 - a) + 100 * (b - a * a) * (b - a * a);
  };
  std::vector<float> x = {-1.2f, 1.0f};
  MinimizeOptions o;
  o.first_step = 0.1, o.max_step = 1.0, o.max_evals = 300;
  const MinimizeResult r = minimize_lbfgs(x, f, [] { return false; }, o);
  EXPECT_NEAR(x[0], 1.0, 1e-2);
  EXPECT_NEAR(x[1], 1.0, 2e-2);
  EXPECT_LT(r.f, 1e-4);
}

TEST(MinimizeLbfgs, CapsStepsAndStopsWhenDone) {
  // f = |x - c|^2 far away: every step is cut to max_step; `done` after the 4th evaluation
  // leaves x at the point it was asked about.
  const int n = 3;
  std::vector<std::vector<float>> seen;
  const Objective f = [&](const std::vector<float>& x, std::vector<double>& g) {
    seen.push_back(x);
    double v = 0;
    for (int i = 0; i < n; ++i) v += (x[i] - 100.0) * (x[i] - 100.0), g[i] = 2 * (x[i] - 100.0);
    return v;
  };
  std::vector<float> x(n, 0.0f);
  MinimizeOptions o;
  o.first_step = 2.0, o.max_step = 2.0, o.max_evals = 25;
  const MinimizeResult r = minimize_lbfgs(x, f, [&] { return seen.size() == 4; }, o);
  EXPECT_EQ(r.evals, 4);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(x, seen.back());
  for (size_t k = 1; k < seen.size(); ++k) {
    double d = 0;
    for (int i = 0; i < n; ++i) d += (seen[k][i] - seen[k - 1][i]) * (seen[k][i] - seen[k - 1][i]);
    EXPECT_NEAR(std::sqrt(d), 2.0, 1e-4) << "step " << k;  // downhill all the way: full capped steps
  }
}

}  // namespace
}  // namespace larql::lql
