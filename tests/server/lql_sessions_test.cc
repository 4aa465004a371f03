// The LQL session table of `larql serve` (server/lql_sessions.h): id validation, one session per
// id, idle expiry, least-recently-used eviction, refusal when every session is busy, one request
// at a time per session and none blocking another session. The clock is passed in, so expiry is
// tested by moving it, not by sleeping.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "server/lql_sessions.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace larql::server {
namespace {

using namespace std::chrono_literals;
using Clock = LqlSessionTable::Clock;

struct Fixture {
  explicit Fixture(size_t max = 16, std::chrono::seconds ttl = 600s)
      : table({max, ttl}, [this] {
          ++made;
          if (fail_next) {
            fail_next = false;
            throw Error(ErrorKind::NotFound, "no vindex");
          }
          return std::make_unique<lql::Session>(lql::SessionOptions{}, pool);
        }) {}
  std::shared_ptr<ThreadPool> pool = std::make_shared<ThreadPool>(1);
  std::atomic<int> made{0};
  bool fail_next = false;
  LqlSessionTable table;
};

TEST(LqlSessionTable, ValidatesIds) {
  EXPECT_TRUE(LqlSessionTable::valid_id("abc"));
  EXPECT_TRUE(LqlSessionTable::valid_id("A-z_0-9"));
  EXPECT_TRUE(LqlSessionTable::valid_id(std::string(128, 'x')));
  EXPECT_FALSE(LqlSessionTable::valid_id(""));
  EXPECT_FALSE(LqlSessionTable::valid_id(std::string(129, 'x')));
  for (const char* bad : {"a b", "a/b", "../x", "a;b", "a\"b", "caf\xc3\xa9", "a\nb", "a.b"})
    EXPECT_FALSE(LqlSessionTable::valid_id(bad)) << bad;
  Fixture f;
  EXPECT_THROW(f.table.acquire("a b"), Error);
  EXPECT_EQ(f.table.size(), 0u);
}

TEST(LqlSessionTable, OneSessionPerId) {
  Fixture f;
  const auto t0 = Clock::now();
  lql::Session* a = nullptr;
  {
    auto l = f.table.acquire("a", t0);
    EXPECT_TRUE(l.created());
    a = &l.session();
  }
  {
    auto l = f.table.acquire("a", t0 + 1s);
    EXPECT_FALSE(l.created());
    EXPECT_EQ(&l.session(), a);
  }
  auto b = f.table.acquire("b", t0 + 2s);
  EXPECT_TRUE(b.created());
  EXPECT_NE(&b.session(), a);
  EXPECT_EQ(f.made.load(), 2);
  EXPECT_EQ(f.table.size(), 2u);
}

TEST(LqlSessionTable, IdleSessionsExpire) {
  Fixture f(16, 10s);
  const auto t0 = Clock::now();
  { auto l = f.table.acquire("a", t0); }
  { auto l = f.table.acquire("b", t0 + 9s); }
  EXPECT_EQ(f.table.expire(t0 + 10s), 0u);  // idle exactly the ttl: kept
  EXPECT_TRUE(f.table.contains("a"));
  { auto l = f.table.acquire("c", t0 + 11s); }  // "a" idle 11 s: dropped on the way
  EXPECT_FALSE(f.table.contains("a"));
  EXPECT_TRUE(f.table.contains("b"));
  EXPECT_EQ(f.table.expired(), 1u);
  auto again = f.table.acquire("a", t0 + 12s);
  EXPECT_TRUE(again.created());  // a new, empty session
}

TEST(LqlSessionTable, ASessionInUseNeverExpires) {
  Fixture f(16, 10s);
  const auto t0 = Clock::now();
  auto held = f.table.acquire("a", t0);
  EXPECT_EQ(f.table.expire(t0 + 1000s), 0u);
  EXPECT_TRUE(f.table.contains("a"));
}

TEST(LqlSessionTable, FullTableEvictsTheLeastRecentlyUsed) {
  Fixture f(2);
  const auto t0 = Clock::now();
  { auto l = f.table.acquire("a", t0); }
  { auto l = f.table.acquire("b", t0 + 1s); }
  { auto l = f.table.acquire("a", t0 + 2s); }  // "b" is now the least recently used
  { auto l = f.table.acquire("c", t0 + 3s); }
  EXPECT_TRUE(f.table.contains("a"));
  EXPECT_FALSE(f.table.contains("b"));
  EXPECT_TRUE(f.table.contains("c"));
  EXPECT_EQ(f.table.size(), 2u);
  EXPECT_EQ(f.table.evicted(), 1u);
}

TEST(LqlSessionTable, FullAndAllBusyIsRefused) {
  Fixture f(1);
  const auto t0 = Clock::now();
  {
    auto held = f.table.acquire("a", t0);
    try {
      f.table.acquire("b", t0 + 1s);
      FAIL() << "a second session fitted in a table of one that is busy";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
      EXPECT_NE(std::string(e.what()).find("busy"), std::string::npos) << e.what();
    }
  }
  auto b = f.table.acquire("b", t0 + 2s);  // "a" is idle now: evicted for "b"
  EXPECT_TRUE(b.created());
  EXPECT_FALSE(f.table.contains("a"));
}

TEST(LqlSessionTable, OneSessionSerialisesOthersRunInParallel) {
  Fixture f;
  auto held = std::make_unique<LqlSessionTable::Lease>(f.table.acquire("a"));
  // Another session is not blocked by "a" being held.
  auto other = std::async(std::launch::async, [&] { auto l = f.table.acquire("b"); return true; });
  ASSERT_EQ(other.wait_for(30s), std::future_status::ready);
  // The same session waits until the holder lets go.
  std::atomic<bool> got{false};
  std::thread t([&] {
    auto l = f.table.acquire("a");
    got = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(got.load());
  held.reset();
  t.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(f.made.load(), 2);
}

TEST(LqlSessionTable, AFailedFactoryLeavesNoEntry) {
  Fixture f;
  f.fail_next = true;
  EXPECT_THROW(f.table.acquire("a"), Error);
  EXPECT_FALSE(f.table.contains("a"));
  auto l = f.table.acquire("a");
  EXPECT_TRUE(l.created());
}

}  // namespace
}  // namespace larql::server
