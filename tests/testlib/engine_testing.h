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

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace larql::testing
