// Helpers shared by the engine tests (tests/kv/*).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "kv/registry.h"
#include "util/error.h"

namespace larql::testing {

/// Run f and require a larql::Error of `kind` (the message is printed on a mismatch).
template <class F>
void expect_error(ErrorKind kind, F&& f, const std::string& what = "") {
  try {
    f();
    ADD_FAILURE() << "no error (expected " << error_kind_name(kind) << ") " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << what << ": " << e.what() << " (got " << error_kind_name(e.kind()) << ")";
  }
}

/// parse_engine_spec(spec) must fail with InvalidArgument, its message naming every needle.
inline void expect_bad_spec(const std::string& spec, const std::vector<std::string>& needles) {
  try {
    parse_engine_spec(spec);
    ADD_FAILURE() << "accepted " << spec;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << spec;
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what() << " lacks " << n;
  }
}

/// logits [vocab] of one residual [hidden].
inline std::vector<float> logits_of(Forward& f, const std::vector<float>& h) {
  std::vector<float> out(static_cast<size_t>(f.config().vocab));
  f.logits(h.data(), 1, out.data());
  return out;
}

/// KL(p || q) in nats between the softmaxes of two logit vectors (log-sum-exp in double;
/// rounding-level negatives clamped to 0).
inline double kl_logits(const std::vector<float>& p, const std::vector<float>& q) {
  auto lse = [](const std::vector<float>& l) {
    double m = -1e300, s = 0;
    for (float x : l) m = std::max(m, double(x));
    for (float x : l) s += std::exp(double(x) - m);
    return m + std::log(s);
  };
  const double lp = lse(p), lq = lse(q);
  double k = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double a = double(p[i]) - lp, b = double(q[i]) - lq;
    k += std::exp(a) * (a - b);
  }
  return std::max(0.0, k);
}

/// Index of the largest logit (first on ties).
inline int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

/// `<bos>` (id 2) then n - 1 ids in [lo, lo + span) from a fixed LCG: the same text every run.
inline std::vector<int32_t> pseudo_text(int64_t n, int32_t lo, int32_t span, uint32_t seed) {
  std::vector<int32_t> ids{2};
  while (static_cast<int64_t>(ids.size()) < n) {
    seed = seed * 1664525u + 1013904223u;
    ids.push_back(static_cast<int32_t>(lo + (seed >> 8) % span));
  }
  return ids;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace larql::testing
