// Helpers shared by the engine tests (tests/kv/*).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "compute/logits.h"
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

/// KL(p || q) in nats between the softmaxes of two logit vectors of equal length
/// (compute::log_softmax of each, then compute::kl_nats).
inline double kl_logits(const std::vector<float>& p, const std::vector<float>& q) {
  if (p.size() != q.size()) throw Error(ErrorKind::InvalidArgument, "kl_logits: lengths differ");
  std::vector<double> lp, lq;
  compute::log_softmax(p.data(), static_cast<int64_t>(p.size()), lp);
  compute::log_softmax(q.data(), static_cast<int64_t>(q.size()), lq);
  return compute::kl_nats(lp.data(), lq.data(), static_cast<int64_t>(lp.size()));
}

/// parse_engine_spec(text) with the test's own files for the engines that keep some, where the
/// spec leaves the key unset: boundary-kv's `archive_dir`, boundary-per-layer's `record` (engines
/// read no environment variable; an empty argument leaves the engine's default).
inline EngineSpec spec_with_files(const std::string& text, const std::string& archive_dir,
                                  const std::string& record = "") {
  EngineSpec s = parse_engine_spec(text);
  if (s.name == "boundary-kv" && !archive_dir.empty() && !s.params.count("archive_dir")) s.params["archive_dir"] = archive_dir;
  if (s.name == "boundary-per-layer" && !record.empty() && !s.params.count("record")) s.params["record"] = record;
  return s;
}

/// Index of the largest logit (first on ties).
inline int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(compute::argmax(v.data(), static_cast<int64_t>(v.size())));
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

/// Cosine of a and b (n floats each), accumulated in double.
inline double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace larql::testing
