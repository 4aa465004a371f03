// /metrics' latency histogram (server/histogram.h) against Prometheus's text format, by a
// hand-derived case: bounds {0.1, 1}; values 0.05 and 0.1 (le: a bound holds its own value),
// 0.5, 5 -> cumulative 2, 3, +Inf 4; sum 5.65 s.
#include "server/histogram.h"

#include <gtest/gtest.h>

#include <sstream>

namespace larql::server {
namespace {

TEST(LatencyHistogram, WritesCumulativeBucketsSumAndCount) {
  LatencyHistogram h{0.1, 1};
  for (double s : {0.05, 0.1, 0.5, 5.0}) h.add(s);
  std::ostringstream o;
  h.write(o, "x_seconds", "a test");
  EXPECT_EQ(o.str(),
            "# HELP x_seconds a test\n# TYPE x_seconds histogram\n"
            "x_seconds_bucket{le=\"0.1\"} 2\nx_seconds_bucket{le=\"1\"} 3\nx_seconds_bucket{le=\"+Inf\"} 4\n"
            "x_seconds_sum 5.65\nx_seconds_count 4\n");
}

}  // namespace
}  // namespace larql::server
