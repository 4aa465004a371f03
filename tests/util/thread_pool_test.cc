// ThreadPool::parallel_for covers [0, n) exactly once, in grain-aligned chunks, for any n, grain
// and thread count, and survives many back-to-back jobs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "util/thread_pool.h"

namespace larql {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 4, 7}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 16, 31, 100, 1001}) {
      for (int64_t grain : {1, 2, 3, 16, 64, 5000}) {
        SCOPED_TRACE(testing::Message() << "threads=" << threads << " n=" << n << " grain=" << grain);
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n) + 1);
        std::atomic<int> calls{0};
        std::atomic<bool> misaligned{false}, bad_range{false};
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e) {
              calls.fetch_add(1);
              if (b < 0 || e > n || b >= e) bad_range = true;
              if (b % grain != 0) misaligned = true;
              for (int64_t i = b; i < e && i >= 0 && i < n; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
            },
            grain);
        EXPECT_FALSE(bad_range);
        EXPECT_FALSE(misaligned);
        EXPECT_LE(calls.load(), threads);
        if (n == 0) {
          EXPECT_EQ(calls.load(), 0);
        }
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i;
      }
    }
  }
}

TEST(ThreadPool, ZeroOrNegativeGrainActsAsOne) {
  ThreadPool pool(3);
  for (int64_t grain : {0, -5}) {
    std::vector<std::atomic<int>> hits(50);
    pool.parallel_for(50, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1); }, grain);
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, UsesMoreThanOneThreadWhenAsked) {
  ThreadPool pool(4);
  std::mutex mu;
  std::set<std::thread::id> ids;
  pool.parallel_for(4, [&](int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_TRUE(ids.count(std::this_thread::get_id())) << "the caller takes part";
}

TEST(ThreadPool, ManyBackToBackJobs) {
  ThreadPool pool(3);
  std::vector<int64_t> sums(3000, 0);
  for (int job = 0; job < 3000; ++job) {
    const int64_t n = 1 + job % 97;
    std::atomic<int64_t> sum{0};
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      int64_t s = 0;
      for (int64_t i = b; i < e; ++i) s += i + 1;
      sum.fetch_add(s);
    });
    ASSERT_EQ(sum.load(), n * (n + 1) / 2) << "job " << job;
  }
}

TEST(ThreadPool, DefaultSizeIsPositive) {
  ThreadPool pool;
  EXPECT_GE(pool.size(), 1);
  ThreadPool neg(-3);
  EXPECT_GE(neg.size(), 1);
}

TEST(ThreadPool, ConstructAndDestroyRepeatedly) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(3);
    std::atomic<int> c{0};
    if (i % 2) pool.parallel_for(10, [&](int64_t b, int64_t e) { c += static_cast<int>(e - b); });
    if (i % 2) {
      EXPECT_EQ(c.load(), 10);
    }
  }
}

// The process's executor: one pool per thread count, the same object for every caller.
TEST(ThreadPool, SharedIsOnePoolPerThreadCount) {
  auto a = ThreadPool::shared(3), b = ThreadPool::shared(3), c = ThreadPool::shared(2);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), c.get());
  EXPECT_EQ(a->size(), 3);
}

// Several threads dispatching to one pool at once: every job still covers its range exactly
// once (dispatch is serialised; before, two callers overwrote each other's job).
TEST(ThreadPool, ConcurrentCallersEachGetTheirWholeJob) {
  auto pool = ThreadPool::shared(2);
  std::atomic<int> bad{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 300; ++rep) {
        const int64_t n = 17 + c * 5 + rep % 7;
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool->parallel_for(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        });
        for (auto& h : hits)
          if (h.load() != 1) bad.fetch_add(1);
      }
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(ThreadPoolDeathTest, AThrowingJobTerminatesWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        ThreadPool pool(2);
        pool.parallel_for(64, [](int64_t b, int64_t) {
          if (b > 0) throw std::runtime_error("boom");
        });
      },
      "ThreadPool job threw \\(jobs must not throw\\): boom");
}

// After fork() the child has none of the pool's workers (POSIX copies the forking thread only):
// its parallel_for runs the whole job on the calling thread — every index once — instead of
// waiting for workers that do not exist, and destroying the pool there does not hang or abort.
TEST(ThreadPool, AForkedChildRunsJobsOnItsOwnThread) {
  auto* pool = new ThreadPool(4);
  std::vector<int> warm(1000, 0);
  pool->parallel_for(1000, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) ++warm[i]; });
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::vector<int> seen(100000, 0);
    std::atomic<int> calls{0};
    pool->parallel_for(100000, [&](int64_t b, int64_t e) {
      ++calls;
      for (int64_t i = b; i < e; ++i) ++seen[i];
    });
    const bool ok = calls.load() == 1 && std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; });
    delete pool;
    ::_exit(ok ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent's pool still uses its workers.
  std::atomic<int> calls{0};
  pool->parallel_for(1000, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls.load(), 4);
  delete pool;
}

}  // namespace
}  // namespace larql
