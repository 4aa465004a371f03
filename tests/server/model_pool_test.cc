// The model pool of `larql serve DIR/` (server/model_pool.h): load on first use, least recently
// used idle model unloaded to keep the budget, never one with a request in flight, unknown ids
// listing the known ones; the router's choice of model (server/model_router.h); the directory
// scan. Residents are fakes that count their lives, so the policy is checked without a model.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <thread>

#include <unistd.h>

#include "formats/gguf.h"
#include "server/model_pool.h"
#include "server/model_router.h"
#include "util/error.h"

namespace larql::server {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct Counts {
  std::map<std::string, int> made, stopped, alive;
};

struct FakeResident : Resident {
  FakeResident(std::string id, Counts& c) : id_(std::move(id)), c_(c) {
    ++c_.made[id_];
    ++c_.alive[id_];
    stop = [this](bool) { ++c_.stopped[id_]; };
  }
  ~FakeResident() override { --c_.alive[id_]; }
  std::string id_;
  Counts& c_;
};

std::vector<ModelEntry> entries(std::initializer_list<std::pair<const char*, uint64_t>> list) {
  std::vector<ModelEntry> out;
  for (const auto& [id, bytes] : list) out.push_back({id, std::string("/models/") + id, "gguf", bytes});
  return out;
}

ModelPool::Factory factory(Counts& c) {
  return [&c](const ModelEntry& e) { return std::make_unique<FakeResident>(e.id, c); };
}

bool loaded(const ModelPool& p, const std::string& id) {
  for (const auto& s : p.status())
    if (s.entry.id == id) return s.loaded;
  ADD_FAILURE() << "no model " << id;
  return false;
}

TEST(ModelPool, LoadsOnFirstUseAndKeepsWithinTheBudget) {
  Counts c;
  // Budget 250: two of (a 100, b 100, c 100) fit, not three.
  ModelPool pool(entries({{"a", 100}, {"b", 100}, {"c", 100}}), 250, factory(c));
  EXPECT_FALSE(loaded(pool, "a"));
  { auto l = pool.acquire("a"); }
  { auto l = pool.acquire("b"); }
  { auto l = pool.acquire("a"); }  // a is now the more recently used
  EXPECT_EQ(c.made["a"], 1);      // loaded once, used twice
  EXPECT_TRUE(loaded(pool, "a"));
  EXPECT_TRUE(loaded(pool, "b"));
  { auto l = pool.acquire("c"); }  // needs room: b, the least recently used, goes
  EXPECT_TRUE(loaded(pool, "a"));
  EXPECT_FALSE(loaded(pool, "b"));
  EXPECT_TRUE(loaded(pool, "c"));
  EXPECT_EQ(c.alive["b"], 0);
  EXPECT_EQ(c.stopped["b"], 1);
  EXPECT_EQ(pool.loads(), 3);
  EXPECT_EQ(pool.unloads(), 1);
  { auto l = pool.acquire("b"); }  // back again: a goes (c was used after it)
  EXPECT_FALSE(loaded(pool, "a"));
  EXPECT_EQ(c.made["b"], 2);
}

TEST(ModelPool, NeverUnloadsAModelWithARequestInFlight) {
  Counts c;
  ModelPool pool(entries({{"a", 100}, {"b", 100}}), 150, factory(c));
  auto busy = pool.acquire("a");
  {
    auto l = pool.acquire("b");  // over budget: a is busy, so both stay for now
    EXPECT_TRUE(loaded(pool, "a"));
    EXPECT_TRUE(loaded(pool, "b"));
  }
  // b finished first and is the most recently used... but a is still busy: nothing can go.
  EXPECT_TRUE(loaded(pool, "a"));
  EXPECT_TRUE(loaded(pool, "b"));
  { auto moved = std::move(busy); }  // a's request ends: over budget, a (the least recent) goes
  EXPECT_FALSE(loaded(pool, "a"));
  EXPECT_TRUE(loaded(pool, "b"));
  EXPECT_EQ(c.alive["a"], 0);
}

TEST(ModelPool, AModelLargerThanTheBudgetStillServes) {
  Counts c;
  ModelPool pool(entries({{"big", 1000}, {"small", 10}}), 100, factory(c));
  { auto l = pool.acquire("big"); }
  EXPECT_TRUE(loaded(pool, "big"));  // the most recently used stays, even alone over budget
  { auto l = pool.acquire("small"); }
  EXPECT_FALSE(loaded(pool, "big"));
  EXPECT_TRUE(loaded(pool, "small"));
}

TEST(ModelPool, NoBudgetKeepsEverything) {
  Counts c;
  ModelPool pool(entries({{"a", 100}, {"b", 100}}), 0, factory(c));
  { auto l = pool.acquire("a"); }
  { auto l = pool.acquire("b"); }
  EXPECT_TRUE(loaded(pool, "a"));
  EXPECT_TRUE(loaded(pool, "b"));
}

TEST(ModelPool, UnknownIdsListTheKnownOnes) {
  Counts c;
  ModelPool pool(entries({{"alpha", 1}, {"beta", 1}}), 0, factory(c));
  try {
    pool.acquire("gamma");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotFound);
    EXPECT_NE(std::string(e.what()).find("'gamma'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("alpha, beta"), std::string::npos) << e.what();
  }
}

TEST(ModelPool, AFailedLoadIsRetriedAndConcurrentRequestsShareOneLoad) {
  Counts c;
  std::atomic<int> calls{0};
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  ModelPool pool(entries({{"a", 1}}), 0, [&](const ModelEntry& e) -> std::unique_ptr<Resident> {
    if (calls++ == 0) throw Error(ErrorKind::Format, "damaged");
    gate.wait();  // hold the load while others ask for the same model
    return std::make_unique<FakeResident>(e.id, c);
  });
  EXPECT_THROW(pool.acquire("a"), Error);
  EXPECT_FALSE(loaded(pool, "a"));
  std::vector<std::future<void>> waiting;
  for (int i = 0; i < 4; ++i) waiting.push_back(std::async(std::launch::async, [&] { auto l = pool.acquire("a"); }));
  std::this_thread::sleep_for(50ms);
  go.set_value();
  for (auto& f : waiting) f.get();
  EXPECT_EQ(calls.load(), 2);  // the failed one, then one load for the four requests
  EXPECT_EQ(c.made["a"], 1);
}

TEST(ModelRouter, TheModelFieldChooses) {
  Request q;
  q.method = "POST";
  q.path = "/v1/completions";
  q.body = R"({"model": "b", "prompt": "x"})";
  Request fwd;
  EXPECT_EQ(ModelRouter::model_of(q, &fwd), "b");
  EXPECT_EQ(fwd.body, q.body);  // the OpenAI routes take "model"
  // The LQL routes do not: it is taken out of the body and the query.
  q.path = "/v1/lql";
  q.body = R"({"model": "b", "query": "STATS"})";
  EXPECT_EQ(ModelRouter::model_of(q, &fwd), "b");
  EXPECT_EQ(fwd.body, R"({"query":"STATS"})");
  Request g;
  g.method = "GET";
  g.path = "/v1/describe";
  g.query = "entity=France&model=my%20model&limit=3";
  EXPECT_EQ(ModelRouter::model_of(g, &fwd), "my model");
  EXPECT_EQ(fwd.query, "entity=France&limit=3");
  g.query = "entity=France";
  EXPECT_EQ(ModelRouter::model_of(g, &fwd), "");
  q.body = R"({"model": 3})";
  EXPECT_THROW(ModelRouter::model_of(q, &fwd), Error);
  q.body = "{not json";
  EXPECT_THROW(ModelRouter::model_of(q, &fwd), Error);
}

// The bytes of a valid GGUF (the spec's layout, through the writer): one metadata entry and one
// f32 tensor of 8 values (32 bytes of data after the header).
std::vector<uint8_t> tiny_gguf() {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  const std::vector<float> v(8, 1.0f);
  w.add_tensor("t", DType::F32, {8}, v.data(), v.size() * sizeof(float));
  return w.serialize();
}

void write_bytes(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

TEST(ScanModelDir, FindsModelsAndNamesThem) {
  const fs::path d = fs::temp_directory_path() / ("larql-scan-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d / "tiny.vindex");
  fs::create_directories(d / "empty-dir");
  const std::vector<uint8_t> good = tiny_gguf();
  write_bytes(d / "a.gguf", good);
  std::ofstream(d / "notes.txt") << "x";
  std::ofstream(d / ".hidden.gguf") << "x";
  // A vindex that cannot run (here: an index.json that does not read; a level below inference
  // likewise) is left out, with the reason.
  std::ofstream(d / "tiny.vindex" / "index.json") << "{}";
  std::vector<std::string> skipped;
  const auto found = scan_model_dir(d.string(), &skipped);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].id, "a");
  EXPECT_EQ(found[0].format, "gguf");
  EXPECT_EQ(found[0].bytes, good.size());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].rfind("tiny.vindex: ", 0), 0u) << skipped[0];
  // The same name twice: whole names.
  write_bytes(d / "b.gguf", good);
  fs::create_directories(d / "b");
  std::ofstream(d / "b" / "config.json") << "{}";
  std::ofstream(d / "b" / "model.safetensors") << "z";
  const auto two = scan_model_dir(d.string());
  std::vector<std::string> ids;
  for (const auto& m : two) ids.push_back(m.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b", "b.gguf"}));
  fs::remove_all(d / "a.gguf");
  fs::remove_all(d / "b.gguf");
  fs::remove_all(d / "tiny.vindex");
  fs::remove_all(d / "b");
  EXPECT_THROW(scan_model_dir(d.string()), Error);  // nothing left to serve
  EXPECT_THROW(scan_model_dir((d / "nope").string()), Error);
  fs::remove_all(d);
}

// What cannot load is left out at start with the name and the reason, never listed to fail later:
// junk, empty and truncated .gguf files (magic and header checked), a Hugging Face directory with
// no weights, a name that is not UTF-8; ids that still meet name both files.
TEST(ScanModelDir, LeavesOutWhatCannotLoadAndSaysWhy) {
  const fs::path d = fs::temp_directory_path() / ("larql-scan-junk-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  const std::vector<uint8_t> good = tiny_gguf();
  write_bytes(d / "good.gguf", good);
  std::ofstream(d / "junk.gguf") << "this is not a model";
  std::ofstream(d / "empty.gguf");
  write_bytes(d / "cut.gguf", std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(good.size() - 16)));
  fs::create_directories(d / "noweights");
  std::ofstream(d / "noweights" / "config.json") << "{}";
  write_bytes(d / "bad\xff.gguf", good);
  std::vector<std::string> skipped;
  const auto found = scan_model_dir(d.string(), &skipped);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].id, "good");
  std::map<std::string, std::string> why;
  for (const auto& line : skipped) why[line.substr(0, line.find(": "))] = line;
  ASSERT_EQ(why.size(), 5u) << ::testing::PrintToString(skipped);
  for (const char* n : {"junk.gguf", "empty.gguf", "cut.gguf"}) {
    ASSERT_TRUE(why.count(n)) << n;
    EXPECT_NE(why[n].find("not a GGUF model"), std::string::npos) << why[n];
  }
  EXPECT_NE(why["noweights"].find("no model.safetensors"), std::string::npos) << why["noweights"];
  ASSERT_TRUE(why.count("bad\\xFF.gguf")) << ::testing::PrintToString(skipped);
  EXPECT_NE(why["bad\\xFF.gguf"].find("not UTF-8"), std::string::npos);
  fs::remove_all(d);

  // The Hugging Face directory "x" and the GGUF "x.gguf" meet on "x" and go by their whole names;
  // "x.gguf" is then also the id of "x.gguf.gguf": refused, naming both paths.
  fs::create_directories(d / "x");
  std::ofstream(d / "x" / "config.json") << "{}";
  std::ofstream(d / "x" / "model.safetensors") << "z";
  write_bytes(d / "x.gguf", good);
  write_bytes(d / "x.gguf.gguf", good);
  try {
    scan_model_dir(d.string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("two models named x.gguf: " + (d / "x.gguf").string() + " and " + (d / "x.gguf.gguf").string()),
              std::string::npos) << m;
  }
  fs::remove_all(d);
}

TEST(ModelPool, TwoEntriesOfOneIdNameBothPaths) {
  Counts c;
  std::vector<ModelEntry> e = {{"m", "/models/one.gguf", "gguf", 1}, {"m", "/models/two.gguf", "gguf", 1}};
  try {
    ModelPool pool(e, 0, factory(c));
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("/models/one.gguf and /models/two.gguf"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace larql::server
