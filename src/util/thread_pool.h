// A small fork-join pool for data-parallel loops in the forward pass.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace larql {

/// Runs `fn(begin, end)` over [0, n) split into contiguous chunks, one per thread, and waits.
/// The calling thread takes part. Workers spin briefly between jobs (decode issues hundreds of
/// small jobs per token), then sleep.
///
/// The process's executor: one pool per thread count (ThreadPool::shared), shared by every
/// Forward and sequence. parallel_for may be called from several threads at once: calls are
/// serialised by a mutex (one job runs at a time, each on all the pool's threads).
/// After fork() a pool made before it has no worker threads in the child (POSIX copies only
/// the forking thread): there its parallel_for runs every job on the calling thread, so a model
/// opened before a fork still runs in the child (on one core) instead of waiting forever.
/// Rules for `fn`: it must not throw (validate before dispatching; a job that throws anyway ends
/// the process with std::terminate and a message on stderr, on any thread), and it must not call
/// parallel_for on the same pool (that would deadlock on the dispatch mutex).
class ThreadPool {
 public:
  /// n_threads <= 0 picks std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  /// The process-wide pool of n_threads (n_threads <= 0: hardware threads), made on first use
  /// and kept for the life of the process; the same object for the same resolved count.
  static std::shared_ptr<ThreadPool> shared(int n_threads);

  /// Split [0, n) into size() chunks aligned to `grain` items (the last may be short).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  void worker(int index);

  // Each worker reports the generation it finished in its own cache line, and the counter the
  // workers spin on sits alone in another: with one shared "pending" counter, 15 workers' atomic
  // decrements queued on one line and invalidated every spinner's copy at each (16 threads).
  struct alignas(64) Done {
    std::atomic<uint64_t> generation{0};
  };

  int n_threads_;
  uint64_t fork_epoch_ = 0;       ///< the process's fork count when the pool was made
  std::vector<std::thread> threads_;
  std::unique_ptr<Done[]> done_;  ///< [n_threads_]; slot 0 unused (the caller)
  std::mutex dispatch_;           ///< one job at a time: held by parallel_for from dispatch to the join
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
  std::atomic<bool> stop_{false};
  alignas(64) std::atomic<uint64_t> generation_{0};  ///< bumped once per job (written by the caller only)
  char pad_[64 - sizeof(std::atomic<uint64_t>)] = {};
};

}  // namespace larql
