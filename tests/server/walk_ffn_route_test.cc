// POST /v1/walk-ffn (server/walk_ffn_route.h) on the tiny llama3 fixture: the answer, in JSON and
// in the binary layouts (docs/server.md "Remote FFN"; the original's layout), is bit for bit the
// gRPC WalkFfn's answer from a shard of the same file and the dense FFN run locally (the family
// tests hold the local FFN to transformers and llama.cpp; tests/python/test_walk_ffn.py checks the
// HTTP answer against numpy on the GGUF's own weights); a router's walk-ffn runs on its shards;
// hostile bodies (wrong sizes, huge counts, truncated headers, random bytes) get a 4xx naming
// what is wrong, never a crash.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/walk_ffn_route.h"
#include "shard/shard.h"
#include "testlib/paths.h"
#include "util/error.h"
#include "util/half.h"

namespace larql::server {
namespace {

using json = nlohmann::json;

std::string fixture() { return testing::source_dir() + "/tests/model/data/families/llama3/llama3-f32.gguf"; }

struct Captured final : Responder {
  int status = 0;
  std::string type, body;
  void send(int s, const std::string& t, const std::string& b, const std::map<std::string, std::string>&) override {
    status = s;
    type = t;
    body = b;
  }
  void start_stream() override {}
  bool event(std::string_view) override { return true; }
  void end_stream() override {}
  bool wait(int, std::chrono::milliseconds) override { return true; }
};

Captured post(const Forward& f, const std::string& body, const std::string& content_type = "application/json",
              const std::string& accept = "") {
  Request q;
  q.method = "POST";
  q.path = "/v1/walk-ffn";
  q.body = body;
  if (!content_type.empty()) q.headers["content-type"] = content_type;
  if (!accept.empty()) q.headers["accept"] = accept;
  Captured r;
  walk_ffn_route(f, q, r);
  return r;
}

std::vector<float> rows_of(int64_t n, int64_t h, float seed) {
  std::vector<float> x(static_cast<size_t>(n * h));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(seed + 0.37f * static_cast<float>(i));
  return x;
}

void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
uint32_t get_u32(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct WalkFfnRoute : ::testing::Test {
  std::shared_ptr<const Model> model = Model::load(fixture());
  Forward local{model, 1};
  int64_t H = model->config().hidden;
  /// The dense FFN of `layer` on x [n, H], run locally.
  std::vector<float> dense(int64_t layer, const std::vector<float>& x) {
    std::vector<float> out(x.size());
    local.ffn(layer).run(local, layer, x.data(), static_cast<int64_t>(x.size()) / H, out.data());
    return out;
  }
};

TEST_F(WalkFfnRoute, JsonAnswersAreTheGrpcAndTheLocalFfnBitForBit) {
  shard::ServerOptions so;
  shard::ShardServer server(model, std::make_shared<ThreadPool>(1), so);
  shard::ShardClient grpc("127.0.0.1:" + std::to_string(server.port()), {}, std::chrono::milliseconds(5000));
  const int64_t n = 3;
  const auto x = rows_of(n, H, 1.5f);
  for (int64_t layer = 0; layer < model->config().n_layers; ++layer) {
    std::vector<float> want_grpc(x.size());
    grpc.walk_ffn(layer, x.data(), n, want_grpc.data());
    const auto want_local = dense(layer, x);
    ASSERT_TRUE(same(want_grpc, want_local));
    const Captured r = post(local, json{{"layer", layer}, {"residual", x}, {"seq_len", n}, {"full_output", true}}.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.type, "application/json");
    const json j = json::parse(r.body);
    EXPECT_EQ(j["layer"], layer);
    EXPECT_EQ(j["seq_len"], n);
    EXPECT_TRUE(j["latency_ms"].is_number());
    std::vector<float> got;
    for (const auto& v : j["output"]) got.push_back(static_cast<float>(v.get<double>()));
    EXPECT_TRUE(same(got, want_grpc)) << "layer " << layer;
  }
  // Several layers: each on the same rows, in the order asked.
  const Captured r = post(local, json{{"layers", {1, 0}}, {"residual", x}, {"seq_len", n}, {"full_output", true}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  ASSERT_EQ(j["results"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const int64_t layer = j["results"][i]["layer"];
    EXPECT_EQ(layer, i == 0 ? 1 : 0);
    std::vector<float> got;
    for (const auto& v : j["results"][i]["output"]) got.push_back(static_cast<float>(v.get<double>()));
    EXPECT_TRUE(same(got, dense(layer, x)));
  }
}

TEST_F(WalkFfnRoute, BinaryLayoutsCarryTheSameBits) {
  const int64_t n = 2;
  const auto x = rows_of(n, H, -0.5f);
  const std::string rows(reinterpret_cast<const char*>(x.data()), x.size() * 4);
  // Single layer: u32 layer | u32 seq_len | u32 flags | u32 top_k | f32 rows.
  std::string b;
  put_u32(b, 1);
  put_u32(b, n);
  put_u32(b, 1);
  put_u32(b, 0);
  b += rows;
  Captured r = post(local, b, "application/x-larql-ffn");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.type, "application/x-larql-ffn");
  ASSERT_EQ(r.body.size(), 12 + x.size() * 4);
  EXPECT_EQ(get_u32(r.body, 0), 1u);
  EXPECT_EQ(get_u32(r.body, 4), static_cast<uint32_t>(n));
  std::vector<float> got(x.size());
  std::memcpy(got.data(), r.body.data() + 12, got.size() * 4);
  EXPECT_TRUE(same(got, dense(1, x)));
  // f16 when Accept asks for it: each value the f32 rounded to binary16.
  r = post(local, b, "application/x-larql-ffn", "application/x-larql-ffn-f16, application/x-larql-ffn");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.type, "application/x-larql-ffn-f16");
  ASSERT_EQ(r.body.size(), 12 + x.size() * 2);
  const auto want = dense(1, x);
  for (size_t i = 0; i < want.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, r.body.data() + 12 + 2 * i, 2);
    EXPECT_EQ(h, f32_to_f16(want[i])) << i;
  }
  // Batch: 0xFFFFFFFF | u32 n | u32 layers[n] | u32 seq_len | u32 flags | u32 top_k | f32 rows.
  std::string bb;
  put_u32(bb, 0xFFFFFFFFu);
  put_u32(bb, 2);
  put_u32(bb, 0);
  put_u32(bb, 1);
  put_u32(bb, n);
  put_u32(bb, 1);
  put_u32(bb, 8092);
  bb += rows;
  r = post(local, bb, "application/x-larql-ffn");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(get_u32(r.body, 0), 0xFFFFFFFFu);
  EXPECT_EQ(get_u32(r.body, 4), 2u);
  size_t at = 12;
  for (uint32_t layer = 0; layer < 2; ++layer) {
    EXPECT_EQ(get_u32(r.body, at), layer);
    EXPECT_EQ(get_u32(r.body, at + 4), static_cast<uint32_t>(n));
    ASSERT_EQ(get_u32(r.body, at + 8), static_cast<uint32_t>(x.size()));
    std::vector<float> g(x.size());
    std::memcpy(g.data(), r.body.data() + at + 12, g.size() * 4);
    EXPECT_TRUE(same(g, dense(layer, x))) << layer;
    at += 12 + x.size() * 4;
  }
  EXPECT_EQ(at, r.body.size());
  // A JSON request may ask for a binary answer.
  r = post(local, json{{"layer", 0}, {"residual", x}, {"seq_len", n}, {"full_output", true}}.dump(), "application/json",
           "application/x-larql-ffn");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.type, "application/x-larql-ffn");
}

TEST_F(WalkFfnRoute, ARoutersWalkFfnRunsOnItsShards) {
  ModelPart p;
  p.layer_begin = 1;
  p.layer_end = 2;
  auto part = Model::load(fixture(), p);
  shard::ShardServer server(part, std::make_shared<ThreadPool>(1), shard::ServerOptions{});
  ModelPart no_ffn;
  no_ffn.ffn = false;
  auto client_model = Model::load(fixture(), no_ffn);
  Forward router(client_model, 1);
  const std::string addr = "127.0.0.1:" + std::to_string(server.port());
  // Layer 1 on the shard; layer 0 is held by no one: the request names it and runs nothing.
  auto shard_client = std::make_shared<shard::ShardClient>(addr, shard::ClientTls{}, std::chrono::milliseconds(5000));
  router.set_ffn(1, std::make_shared<shard::RemoteFfn>(shard::Replicas{shard_client}));
  const auto x = rows_of(1, H, 2.0f);
  Captured r = post(router, json{{"layer", 1}, {"residual", x}, {"full_output", true}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<float> got;
  const json answer = json::parse(r.body);
  for (const auto& v : answer["output"]) got.push_back(static_cast<float>(v.get<double>()));
  EXPECT_TRUE(same(got, dense(1, x)));
  r = post(router, json{{"layers", {1, 0}}, {"residual", x}, {"full_output", true}}.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("layer 0"), std::string::npos) << r.body;
  // The shard down: 503 naming it.
  server.shutdown(std::chrono::milliseconds(0));
  r = post(router, json{{"layer", 1}, {"residual", x}, {"full_output", true}}.dump());
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find(addr), std::string::npos) << r.body;
}

TEST_F(WalkFfnRoute, HostileBodiesAre4xxNamingWhatIsWrong) {
  const auto x = rows_of(1, H, 0.0f);
  const std::string ok_rows(reinterpret_cast<const char*>(x.data()), x.size() * 4);
  auto bin = [&](std::initializer_list<uint32_t> head, const std::string& tail) {
    std::string b;
    for (uint32_t v : head) put_u32(b, v);
    return b + tail;
  };
  json big = json{{"layer", 0}, {"residual", x}, {"full_output", true}};
  big["residual"][5] = 1e39;  // a double, but no f32
  const std::string big_value = big.dump();
  struct Case {
    const char* what;
    std::string body, type;
    int status;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"not JSON", "{", "application/json", 400, "JSON"},
      {"no layer", R"({"residual":[1],"full_output":true})", "", 400, "'layer' or 'layers'"},
      {"features-only", json{{"layer", 0}, {"residual", x}}.dump(), "", 400, "full_output"},
      {"moe_layer", json{{"layer", 0}, {"residual", x}, {"full_output", true}, {"moe_layer", true}}.dump(), "", 400, "moe_layer"},
      {"a string layer", R"({"layer":"0","residual":[1],"full_output":true})", "", 400, "layer number"},
      {"a layer past the model", json{{"layer", 7}, {"residual", x}, {"full_output", true}}.dump(), "", 400, "layer 7"},
      {"short residual", R"({"layer":0,"residual":[1,2,3],"full_output":true})", "", 400, "3 values"},
      {"a string in the residual", json{{"layer", 0}, {"residual", {"a"}}, {"full_output", true}}.dump(), "", 400, "values"},
      {"a huge seq_len", json{{"layer", 0}, {"residual", x}, {"seq_len", 1u << 31}, {"full_output", true}}.dump(), "", 400, "seq_len"},
      {"a number JSON cannot hold", R"({"layer":0,"full_output":true,"residual":[1e400]})", "", 400, "JSON"},
      {"a value past f32", big_value, "", 400, "not a finite f32"},
      {"binary too short", "abc", "application/x-larql-ffn", 400, "16 bytes"},
      {"binary without full_output", bin({0, 1, 0, 0}, ok_rows), "application/x-larql-ffn", 400, "flags bit 0"},
      {"binary rows of the wrong size", bin({0, 1, 1, 0}, ok_rows + "xy"), "application/x-larql-ffn", 400, "whole number"},
      {"binary seq_len too big", bin({0, 0xFFFFFFF0u, 1, 0}, ok_rows), "application/x-larql-ffn", 400, "seq_len"},
      {"binary seq_len 0", bin({0, 0, 1, 0}, ""), "application/x-larql-ffn", 400, "seq_len"},
      {"binary batch of 2^32-1 layers", bin({0xFFFFFFFFu, 0xFFFFFFFFu, 0, 0}, ok_rows), "application/x-larql-ffn", 400, "batch"},
      {"binary batch cut short", bin({0xFFFFFFFFu, 2, 0, 1}, ""), "application/x-larql-ffn", 400, "ends inside"},
      {"binary layer past the model", bin({9, 1, 1, 0}, ok_rows), "application/x-larql-ffn", 400, "layer 9"},
      {"f16 request", bin({0, 1, 1, 0}, ok_rows), "application/x-larql-ffn-f16", 415, "f32"},
  };
  for (const auto& c : cases) {
    const Captured r = post(local, c.body, c.type);
    EXPECT_EQ(r.status, c.status) << c.what << ": " << r.body;
    EXPECT_NE(r.body.find(c.says), std::string::npos) << c.what << ": " << r.body;
  }
  Request get;
  get.method = "GET";
  get.path = "/v1/walk-ffn";
  Captured r;
  walk_ffn_route(local, get, r);
  EXPECT_EQ(r.status, 405);
  // Random bytes, as binary and as JSON: always an answer, never a crash; a 200 only for a body
  // that is a valid request.
  std::mt19937 rng(29);
  for (int i = 0; i < 3000; ++i) {
    std::string b(rng() % 300, '\0');
    for (auto& ch : b) ch = static_cast<char>(rng());
    if (i % 3 == 0 && b.size() >= 8) {  // plausible headers, random sizes
      const uint32_t head[] = {rng() % 3, rng() % 3};
      std::memcpy(b.data(), head, 8);
    }
    const Captured rr = post(local, b, i % 2 ? "application/x-larql-ffn" : "application/json");
    EXPECT_TRUE(rr.status == 200 || (rr.status >= 400 && rr.status < 500)) << rr.status << " " << rr.body;
  }
}

}  // namespace
}  // namespace larql::server
