#include "util/thread_pool.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>

#include <pthread.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define LARQL_PAUSE() _mm_pause()
#else
#define LARQL_PAUSE() ((void)0)
#endif

namespace larql {
namespace {

void chunk_of(int64_t n, int64_t grain, int parts, int index, int64_t* b, int64_t* e) {
  const int64_t units = (n + grain - 1) / grain;
  const int64_t per = units / parts, extra = units % parts;
  const int64_t ub = index * per + std::min<int64_t>(index, extra);
  const int64_t ue = ub + per + (index < extra ? 1 : 0);
  *b = std::min(n, ub * grain);
  *e = std::min(n, ue * grain);
}

// A job that throws has no one to catch it: workers would die or the caller would unwind past
// a job the workers still run. Say so and terminate.
void run_job(const std::function<void(int64_t, int64_t)>& fn, int64_t b, int64_t e) noexcept {
  try {
    fn(b, e);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "larql: fatal: a ThreadPool job threw (jobs must not throw): %s\n", ex.what());
    std::terminate();
  } catch (...) {
    std::fprintf(stderr, "larql: fatal: a ThreadPool job threw (jobs must not throw)\n");
    std::terminate();
  }
}

// The number of fork()s this process descends from since the first pool was made: a pool whose
// epoch differs is in a child that has none of its workers.
std::atomic<uint64_t> g_forks{0};

void watch_forks() {
  static std::once_flag once;
  std::call_once(once, [] { ::pthread_atfork(nullptr, nullptr, [] { g_forks.fetch_add(1, std::memory_order_relaxed); }); });
}

}  // namespace

std::shared_ptr<ThreadPool> ThreadPool::shared(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  static std::mutex mu;
  // Never destroyed: pools outlive every static that may still hold a Forward at exit.
  static auto* pools = new std::map<int, std::shared_ptr<ThreadPool>>();
  const std::lock_guard<std::mutex> lock(mu);
  auto& p = (*pools)[n_threads];
  if (!p) p = std::make_shared<ThreadPool>(n_threads);
  return p;
}

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  watch_forks();
  fork_epoch_ = g_forks.load(std::memory_order_relaxed);
  done_ = std::make_unique<Done[]>(static_cast<size_t>(n_threads_));
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  if (g_forks.load(std::memory_order_relaxed) != fork_epoch_) {
    // A child of a fork: the workers are not in this process; their thread objects cannot be
    // joined or detached, so they are left (leaked) rather than terminate the process.
    new std::vector<std::thread>(std::move(threads_));
    return;
  }
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain || g_forks.load(std::memory_order_relaxed) != fork_epoch_) {
    run_job(fn, 0, n);  // one thread, one grain, or a forked child (no workers here)
    return;
  }
  const std::lock_guard<std::mutex> lock(dispatch_);
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  const uint64_t g = generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
  generation_.notify_all();
  int64_t b, e;
  chunk_of(n, grain, n_threads_, 0, &b, &e);
  if (b < e) run_job(fn, b, e);
  // Spin briefly, then yield: on a loaded machine a descheduled worker must not cost us a
  // whole time slice of busy-waiting.
  for (int i = 1; i < n_threads_; ++i) {
    for (int spins = 0; done_[i].generation.load(std::memory_order_acquire) != g; ++spins) {
      if (spins < 4000) {
        LARQL_PAUSE();
      } else {
        std::this_thread::yield();
      }
    }
  }
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    int spins = 0;
    while (g == seen) {
      if (++spins < 4000) {
        LARQL_PAUSE();
      } else if (spins < 8000) {
        std::this_thread::yield();
      } else {
        generation_.wait(g, std::memory_order_acquire);
      }
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    int64_t b, e;
    chunk_of(job_n_, job_grain_, n_threads_, index, &b, &e);
    if (b < e) run_job(*job_, b, e);
    done_[index].generation.store(g, std::memory_order_release);
  }
}

}  // namespace larql
