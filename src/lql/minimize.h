// A small limited-memory BFGS minimiser for INSERT ... MODE SUBJECT's down column (docs/lql.md
// "Knowledge edits"): a few hundred parameters, each evaluation a forward and backward pass
// through the layers after the edit, so the count of evaluations is what it saves.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace larql::lql {

struct MinimizeOptions {
  /// Length (Euclidean, in x's units) of the first step, taken along -gradient: the curvature
  /// is not known yet.
  double first_step = 20.0;
  /// No step is longer than this (a quasi-Newton step far outside where its curvature pairs were
  /// measured is cut back to it).
  double max_step = 20.0;
  /// Evaluations at most, the first (at the start point) included.
  int max_evals = 25;
  /// Curvature pairs kept.
  int memory = 6;
};

/// f(x, grad) returns the objective at x and writes its gradient into grad (same length as x).
using Objective = std::function<double(const std::vector<float>& x, std::vector<double>& grad)>;

struct MinimizeResult {
  int evals = 0;     ///< evaluations made
  double f = 0;      ///< the objective at the returned x
};

/// Minimises f from x (in place), L-BFGS (Nocedal & Wright 2006, "Numerical Optimization",
/// algorithm 7.4, the two-loop recursion, H0 = gamma I with gamma = s'y / y'y) with a
/// backtracking line search (Armijo, c1 = 1e-4, halving up to 6 times). `done` is asked after
/// every evaluation (with the x just evaluated) and ends the search early when true; x is then
/// that point. Otherwise x ends at the last accepted point (after max_evals, or when a line
/// search finds no point below the current one). Non-finite objectives count as failures of the
/// line search (the step is halved).
MinimizeResult minimize_lbfgs(std::vector<float>& x, const Objective& f, const std::function<bool()>& done, const MinimizeOptions& opt = {});

}  // namespace larql::lql
