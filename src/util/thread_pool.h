// A small fork-join pool for data-parallel loops in the forward pass.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace larql {

/// Runs `fn(begin, end)` over [0, n) split into contiguous chunks, one per thread, and waits.
/// The calling thread takes part. Workers spin briefly between jobs (decode issues hundreds of
/// small jobs per token), then sleep. Not re-entrant: do not call parallel_for from inside fn.
class ThreadPool {
 public:
  /// n_threads <= 0 picks std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  /// Split [0, n) into size() chunks aligned to `grain` items (the last may be short).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  void worker(int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
};

}  // namespace larql
