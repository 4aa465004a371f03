// The session store's rules (docs/server.md "Sessions"): id validation, one request per id at a
// time, resume only when the prompt extends the consumed tokens on the same engine, the count and
// byte bounds (least recently used go first), and the temporary directory's cleanup. The state
// files themselves are the engines' (tested in tests/kv); here they are stand-in bytes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "server/sessions.h"
#include "util/error.h"

namespace larql::server {
namespace {

namespace fs = std::filesystem;

void write_bytes(const std::string& path, size_t n) {
  std::ofstream(path, std::ios::binary) << std::string(n, 'x');
}

// Saves `history` (n_past consumed) under `id` as a file of `bytes` bytes.
void save(SessionStore& store, const std::string& id, const std::vector<int32_t>& history, int64_t n_past,
          size_t bytes = 100, const std::string& engine = "standard") {
  auto lease = store.shared_from_this()->acquire(id, engine, history);
  ASSERT_TRUE(lease);
  write_bytes(lease->path(), bytes);
  lease->saved(history, n_past);
}

TEST(SessionStore, ValidatesIds) {
  for (const std::string& ok : std::vector<std::string>{"a", "A-z_09", std::string(128, 'x')}) EXPECT_TRUE(SessionStore::valid_id(ok)) << ok;
  for (const std::string& bad : std::vector<std::string>{"", std::string(129, 'x'), "a b", "../x", "a/b", "a.state", "é"})
    EXPECT_FALSE(SessionStore::valid_id(bad)) << bad;
}

TEST(SessionStore, ResumesOnlyAnExtendingPromptOnTheSameEngine) {
  auto store = std::make_shared<SessionStore>("", 8, 1 << 20);
  save(*store, "s", {1, 2, 3, 4}, 3);  // the last token (4) sampled, not consumed
  const auto list = store->list();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].tokens, 4);
  EXPECT_EQ(list[0].n_past, 3);
  EXPECT_EQ(list[0].bytes, 100u);
  EXPECT_EQ(list[0].engine, "standard");
  struct Case {
    std::vector<int32_t> prompt;
    std::string engine;
    int64_t want;
  };
  for (const Case& c : std::vector<Case>{{{1, 2, 3, 4}, "standard", 3},
                                         {{1, 2, 3, 4, 5, 6}, "standard", 3},
                                         {{1, 2, 3, 9}, "standard", 3},  // the unconsumed token may differ
                                         {{1, 2, 3}, "standard", 0},     // nothing new to read
                                         {{1, 2, 7, 4, 5}, "standard", 0},
                                         {{1, 2, 3, 4, 5}, "markov-rs", 0}}) {
    auto lease = store->acquire("s", c.engine, c.prompt);
    ASSERT_TRUE(lease);
    EXPECT_EQ(lease->resume_from, c.want) << c.engine << " prompt of " << c.prompt.size();
  }
  EXPECT_EQ(store->list().size(), 1u);  // leases that saved nothing keep the old state
}

TEST(SessionStore, OneRequestPerIdAndDelete) {
  auto store = std::make_shared<SessionStore>("", 8, 1 << 20);
  auto a = store->acquire("s", "standard", {1, 2});
  ASSERT_TRUE(a);
  EXPECT_FALSE(store->acquire("s", "standard", {1, 2}));
  EXPECT_EQ(store->remove("s"), SessionStore::Removed::Busy);
  write_bytes(a->path(), 10);
  a->saved({1, 2, 3}, 2);
  EXPECT_TRUE(fs::exists(a->path()));
  auto b = store->acquire("s", "standard", {1, 2, 3});  // released by saved(), before a ends
  ASSERT_TRUE(b);
  EXPECT_EQ(b->resume_from, 2);
  b.reset();
  EXPECT_EQ(store->remove("s"), SessionStore::Removed::Ok);
  EXPECT_FALSE(fs::exists(a->path()));
  EXPECT_EQ(store->remove("s"), SessionStore::Removed::NotFound);
  EXPECT_TRUE(store->list().empty());
}

TEST(SessionStore, BoundsEvictTheLeastRecentlyUsed) {
  auto store = std::make_shared<SessionStore>("", 2, 1000);
  save(*store, "a", {1, 2}, 1);
  save(*store, "b", {1, 2}, 1);
  { auto touch = store->acquire("a", "standard", {1, 2}); }  // a is now more recent than b
  save(*store, "c", {1, 2}, 1);
  std::vector<std::string> ids;
  for (const auto& s : store->list()) ids.push_back(s.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "c"}));
  EXPECT_FALSE(fs::exists(fs::path(store->dir()) / "b.state"));
  save(*store, "d", {1, 2}, 1, 900);  // 100 + 100 + 900 > 1000: the oldest other one (a) goes
  ids.clear();
  for (const auto& s : store->list()) ids.push_back(s.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"c", "d"}));
  save(*store, "e", {1, 2}, 1, 5000);  // alone over the byte bound: not kept
  ids.clear();
  for (const auto& s : store->list()) ids.push_back(s.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"c", "d"}));
  EXPECT_FALSE(fs::exists(fs::path(store->dir()) / "e.state"));
}

TEST(SessionStore, TemporaryDirectoryGoesGivenDirectoryStays) {
  std::string tmp;
  {
    auto store = std::make_shared<SessionStore>("", 4, 1 << 20);
    tmp = store->dir();
    save(*store, "x", {1, 2}, 1);
    EXPECT_TRUE(fs::is_directory(tmp));
  }
  EXPECT_FALSE(fs::exists(tmp));
  const fs::path given = fs::temp_directory_path() / ("larql-sessions-test-" + std::to_string(::getpid()));
  {
    auto store = std::make_shared<SessionStore>(given.string(), 4, 1 << 20);
    save(*store, "x", {1, 2}, 1);
  }
  EXPECT_TRUE(fs::exists(given / "x.state"));
  fs::remove_all(given);
  EXPECT_THROW(SessionStore("", 0, 1), Error);
}

}  // namespace
}  // namespace larql::server
