// A one-line progress bar on stderr (only when stderr is a terminal, or when forced).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace larql::cli {

class Progress {
 public:
  Progress(std::string label, int64_t total) : label_(std::move(label)), total_(total), tty_(isatty(2)) {}
  void update(int64_t done) {
    if (!tty_ || total_ <= 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const int width = 30, filled = static_cast<int>(width * done / total_);
    const double rate = secs > 0 ? done / secs : 0.0;
    // ETA from the mean rate so far; "--" until one unit is done.
    char eta[32] = "--";
    if (rate > 0 && done < total_) {
      const long long left = static_cast<long long>((total_ - done) / rate + 0.5);
      std::snprintf(eta, sizeof eta, "%lld:%02lld", left / 60, left % 60);
    } else if (done >= total_) {
      std::snprintf(eta, sizeof eta, "done in %.1f s", secs);
    }
    std::fprintf(stderr, "\r%s [%s%s] %lld/%lld  %.1f/s  ETA %s ", label_.c_str(), std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), (long long)done, (long long)total_, rate, eta);
    if (done >= total_) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  std::string label_;
  int64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
};

}  // namespace larql::cli
