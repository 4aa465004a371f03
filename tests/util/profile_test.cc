// Profiling counters are per thread and summed on read (issue 9, part 4): before, add() wrote
// one unsynchronised process-wide total, so two threads timing stages at once raced (a data race
// for ThreadSanitizer, and lost increments in practice). Expected counts are the test's own
// arithmetic: threads x calls per thread.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "util/profile.h"

namespace larql::profile {
namespace {

TEST(Profile, CountsOfConcurrentThreadsAddUp) {
  reset();
  constexpr int kThreads = 4, kCalls = 200000;
  std::vector<std::thread> ts;
  std::atomic<bool> go{false};
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kCalls; ++i) add(t % 2 ? Stage::Ffn : Stage::Attention, 0.5);
    });
  go.store(true);
  // Reading while they add is allowed (a partial sum, never torn or racing).
  const Totals mid = totals();
  EXPECT_LE(mid.calls[static_cast<int>(Stage::Ffn)], int64_t{kThreads / 2} * kCalls);
  for (auto& t : ts) t.join();  // exited threads' counts stay in the sum
  const Totals all = totals();
  EXPECT_EQ(all.calls[static_cast<int>(Stage::Ffn)], int64_t{kThreads / 2} * kCalls);
  EXPECT_EQ(all.calls[static_cast<int>(Stage::Attention)], int64_t{kThreads / 2} * kCalls);
  EXPECT_DOUBLE_EQ(all.seconds[static_cast<int>(Stage::Ffn)], 0.5 * (kThreads / 2) * kCalls);
  EXPECT_EQ(all.calls[static_cast<int>(Stage::Embed)], 0);

  add(Stage::Embed, 1.0);  // this thread, live
  EXPECT_EQ(totals().calls[static_cast<int>(Stage::Embed)], 1);
  reset();
  const Totals zero = totals();
  for (int i = 0; i < kStages; ++i) {
    EXPECT_EQ(zero.calls[i], 0) << stage_name(static_cast<Stage>(i));
    EXPECT_EQ(zero.seconds[i], 0.0);
  }
}

TEST(Profile, ScopeCountsOnlyWhenEnabled) {
  reset();
  set_enabled(false);
  { Scope s(Stage::Codec); }
  EXPECT_EQ(totals().calls[static_cast<int>(Stage::Codec)], 0);
  set_enabled(true);
  { Scope s(Stage::Codec); }
  set_enabled(false);
  EXPECT_EQ(totals().calls[static_cast<int>(Stage::Codec)], 1);
  reset();
}

}  // namespace
}  // namespace larql::profile
