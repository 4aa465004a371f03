// A fixed-bucket latency histogram for /metrics (docs/server.md, "Routes"), in Prometheus's text
// exposition format: cumulative `_bucket{le="B"}` counts, `le="+Inf"`, `_sum` (seconds) and
// `_count`. A value lands in the first bucket whose bound it does not exceed (Prometheus's `le`).
// add() is safe from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <vector>

namespace larql::server {

class LatencyHistogram {
 public:
  /// `bounds`: the buckets' upper bounds in seconds, increasing.
  LatencyHistogram(std::initializer_list<double> bounds)
      : bounds_(bounds), counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {}

  void add(double seconds) {
    size_t i = 0;
    while (i < bounds_.size() && seconds > bounds_[i]) ++i;
    ++counts_[i];
    ++total_;
    sum_us_ += static_cast<uint64_t>(std::max(0.0, seconds) * 1e6);
  }

  /// The metric's HELP, TYPE and sample lines.
  void write(std::ostream& o, const char* name, const char* help) const {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    uint64_t cum = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cum += counts_[i].load();
      o << name << "_bucket{le=\"" << bounds_[i] << "\"} " << cum << "\n";
    }
    cum += counts_[bounds_.size()].load();
    o << name << "_bucket{le=\"+Inf\"} " << cum << "\n";
    o << name << "_sum " << static_cast<double>(sum_us_.load()) / 1e6 << "\n" << name << "_count " << total_.load() << "\n";
  }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<uint64_t> total_{0}, sum_us_{0};
};

}  // namespace larql::server
