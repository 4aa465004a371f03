// The shard service in-process on the tiny llama3 fixture: WalkFfn and RunLayers give, bit for
// bit, what the whole model computes locally (the reference is the local Forward, which the
// family tests check against transformers and llama.cpp); hostile requests (wrong sizes, a huge
// row count, an unknown dtype, layers out of range, sequences misused) get an error status and
// leave the shard serving; a slow shard is cut off at the caller's deadline.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <larql/shard/v1/shard.grpc.pb.h>
#include "shard/shard.h"
#include "testlib/paths.h"
#include "util/error.h"
#include "util/half.h"

namespace larql {
namespace {

namespace pb = ::larql::shard::v1;
using std::chrono::milliseconds;

std::string fixture() { return testing::source_dir() + "/tests/model/data/families/llama3/llama3-f32.gguf"; }

struct Running {
  std::shared_ptr<const Model> model;
  std::unique_ptr<shard::ShardServer> server;
  std::string address() const { return "127.0.0.1:" + std::to_string(server->port()); }
};

Running start(const ModelPart& part = {}, int delay_ms = 0, int64_t max_rows = 64) {
  Running r;
  r.model = Model::load(fixture(), part);
  shard::ServerOptions o;
  o.max_rows = max_rows;
  o.debug_delay_ms = delay_ms;
  r.server = std::make_unique<shard::ShardServer>(r.model, std::make_shared<ThreadPool>(1), o);
  return r;
}

std::vector<float> rows_of(int64_t n, int64_t h, float seed) {
  std::vector<float> x(static_cast<size_t>(n * h));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(seed + 0.37f * static_cast<float>(i));
  return x;
}

pb::Rows raw_rows(uint32_t n, uint32_t width, pb::DType dtype, size_t bytes) {
  pb::Rows r;
  r.set_n(n);
  r.set_width(width);
  r.set_dtype(dtype);
  r.mutable_data()->assign(bytes, '\0');
  return r;
}

TEST(Shard, InfoDescribesThePart) {
  ModelPart p;
  p.layer_begin = 1;
  p.layer_end = 2;
  Running s = start(p);
  shard::ShardClient c(s.address(), {}, milliseconds(5000));
  EXPECT_EQ(c.info().layer_begin, 1);
  EXPECT_EQ(c.info().layer_end, 2);
  EXPECT_EQ(c.info().n_layers, s.model->config().n_layers);
  EXPECT_EQ(c.info().fingerprint, s.model->fingerprint());
  EXPECT_EQ(c.info().model, "llama3-f32.gguf");
  EXPECT_TRUE(c.healthy());
}

TEST(Shard, WalkFfnIsTheLocalFfnBitForBit) {
  Running s = start({}, 0, /*max_rows=*/4);  // 10 rows go as 4 + 4 + 2
  shard::ShardClient c(s.address(), {}, milliseconds(5000));
  const int64_t H = s.model->config().hidden, n = 10;
  Forward local(s.model, 1);
  for (int64_t li = 0; li < s.model->config().n_layers; ++li) {
    const auto h = rows_of(n, H, static_cast<float>(li));
    std::vector<float> want(h.size()), got(h.size());
    local.ffn(li).run(local, li, h.data(), n, want.data());
    c.walk_ffn(li, h.data(), n, got.data());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * sizeof(float))) << "layer " << li;
  }
}

TEST(Shard, Bf16RepliesAreTheF32RepliesRounded) {
  Running s = start();
  const int64_t H = s.model->config().hidden;
  auto ch = grpc::CreateChannel(s.address(), grpc::InsecureChannelCredentials());
  auto stub = pb::Shard::NewStub(ch);
  const auto h = rows_of(3, H, 1.0f);
  pb::WalkFfnRequest q;
  q.set_layer(0);
  q.mutable_rows()->set_n(3);
  q.mutable_rows()->set_width(static_cast<uint32_t>(H));
  q.mutable_rows()->mutable_data()->assign(reinterpret_cast<const char*>(h.data()), h.size() * 4);
  pb::WalkFfnReply f32, bf16;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->WalkFfn(&ctx, q, &f32).ok());
  }
  q.set_reply_dtype(pb::BF16);
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->WalkFfn(&ctx, q, &bf16).ok());
  }
  ASSERT_EQ(bf16.rows().data().size(), h.size() * 2);
  for (size_t i = 0; i < h.size(); ++i) {
    float f;
    uint16_t b;
    std::memcpy(&f, f32.rows().data().data() + 4 * i, 4);
    std::memcpy(&b, bf16.rows().data().data() + 2 * i, 2);
    ASSERT_EQ(b, f32_to_bf16(f)) << i;
  }
}

TEST(Shard, PipelineOfTwoShardsIsTheWholeForward) {
  const int64_t L = Model::load(fixture())->config().n_layers;
  ASSERT_EQ(L, 2);
  ModelPart a, b;
  a.layer_begin = 0, a.layer_end = 1;
  b.layer_begin = 1, b.layer_end = 2;
  Running sa = start(a), sb = start(b);
  shard::ShardClient ca(sa.address(), {}, milliseconds(5000)), cb(sb.address(), {}, milliseconds(5000));

  auto whole = Model::load(fixture());
  const ModelConfig& c = whole->config();
  Forward local(whole, 1);
  KvCache kv(c);
  const std::vector<int32_t> prompt = {1, 4, 8, 15, 16, 23};
  const int64_t n = static_cast<int64_t>(prompt.size()), H = c.hidden;
  std::vector<float> want(static_cast<size_t>(n * H)), got(want.size());
  local.forward(prompt.data(), n, kv, want.data());
  local.embed(prompt.data(), n, got.data());
  EXPECT_EQ(ca.run_layers("s1", 0, 1, 0, got.data(), n), n);
  EXPECT_EQ(cb.run_layers("s1", 1, 2, 0, got.data(), n), n);
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * sizeof(float)));
  // Decode steps continue the K/V each shard keeps.
  for (int32_t tok : {42, 7, 99}) {
    std::vector<float> w1(static_cast<size_t>(H)), g1(static_cast<size_t>(H));
    const int64_t pos = kv.n_past();
    local.forward(&tok, 1, kv, w1.data());
    local.embed(&tok, 1, g1.data());
    ca.run_layers("s1", 0, 1, pos, g1.data(), 1);
    EXPECT_EQ(cb.run_layers("s1", 1, 2, pos, g1.data(), 1), pos + 1);
    EXPECT_EQ(0, std::memcmp(w1.data(), g1.data(), g1.size() * sizeof(float))) << "position " << pos;
  }
  // A rewind (position below the end) drops what followed; a gap is refused.
  std::vector<float> g(static_cast<size_t>(H));
  local.embed(prompt.data(), 1, g.data());
  EXPECT_EQ(ca.run_layers("s1", 0, 1, 3, g.data(), 1), 4);
  try {
    ca.run_layers("s1", 0, 1, 10, g.data(), 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FAILED_PRECONDITION"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(ca.end_sequence("s1"));
  EXPECT_FALSE(ca.end_sequence("s1"));
  EXPECT_THROW(ca.run_layers("s1", 0, 1, 5, g.data(), 1), Error);  // ended: start again at 0
}

TEST(Shard, HostileRequestsAreRefusedAndTheShardStaysUp) {
  Running s = start();
  const uint32_t H = static_cast<uint32_t>(s.model->config().hidden);
  auto stub = pb::Shard::NewStub(grpc::CreateChannel(s.address(), grpc::InsecureChannelCredentials()));
  auto walk = [&](uint32_t layer, const pb::Rows& rows) {
    pb::WalkFfnRequest q;
    q.set_layer(layer);
    *q.mutable_rows() = rows;
    grpc::ClientContext ctx;
    pb::WalkFfnReply r;
    return stub->WalkFfn(&ctx, q, &r);
  };
  struct Case {
    const char* what;
    uint32_t layer;
    pb::Rows rows;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"no rows", 0, raw_rows(0, H, pb::F32, 0), "rows"},
      {"a huge row count", 0, raw_rows(0x7fffffff, H, pb::F32, 64), "rows"},
      {"another width", 0, raw_rows(1, H + 1, pb::F32, (H + 1) * 4), "width"},
      {"too few bytes", 0, raw_rows(2, H, pb::F32, H * 4), "bytes"},
      {"too many bytes", 0, raw_rows(1, H, pb::F32, H * 4 + 1), "bytes"},
      {"an unknown dtype", 0, raw_rows(1, H, static_cast<pb::DType>(7), H * 4), "dtype"},
      {"a layer past the model", 1000, raw_rows(1, H, pb::F32, H * 4), "layer"},
  };
  for (const auto& c : cases) {
    const grpc::Status st = walk(c.layer, c.rows);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what;
    EXPECT_NE(st.error_message().find(c.says), std::string::npos) << c.what << ": " << st.error_message();
  }
  auto run = [&](const std::string& id, uint32_t b, uint32_t e, uint64_t pos, uint32_t window) {
    pb::RunLayersRequest q;
    q.set_sequence_id(id);
    q.set_layer_begin(b);
    q.set_layer_end(e);
    q.set_position(pos);
    q.set_window(window);
    *q.mutable_rows() = raw_rows(1, H, pb::F32, H * 4);
    grpc::ClientContext ctx;
    pb::RunLayersReply r;
    return stub->RunLayers(&ctx, q, &r).error_code();
  };
  EXPECT_EQ(run("", 0, 1, 0, 0), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(run(std::string(129, 'x'), 0, 1, 0, 0), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(run("a", 1, 1, 0, 0), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(run("a", 0, 99, 0, 0), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(run("a", 0, 1, uint64_t{1} << 62, 0), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(run("never", 0, 1, 5, 0), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(run("a", 0, 1, 0, 0x7fffffff), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(run("a", 0, 1, 0, 0), grpc::StatusCode::OK);
  EXPECT_EQ(run("a", 0, 1, 1, 64), grpc::StatusCode::INVALID_ARGUMENT);  // the window is the sequence's
  // Still serving.
  shard::ShardClient c(s.address(), {}, milliseconds(5000));
  EXPECT_TRUE(c.healthy());
}

TEST(Shard, APartRefusesLayersItDoesNotHold) {
  ModelPart p;
  p.layer_begin = 1;
  p.layer_end = 2;
  Running s = start(p);
  shard::ShardClient c(s.address(), {}, milliseconds(5000));
  const int64_t H = s.model->config().hidden;
  std::vector<float> h = rows_of(1, H, 0), out(h.size());
  try {
    c.walk_ffn(0, h.data(), 1, out.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("holds layers 1-1"), std::string::npos) << e.what();
  }
}

TEST(Shard, ASlowShardIsCutOffAtTheDeadline) {
  Running fast = start();
  shard::ShardClient probe(fast.address(), {}, milliseconds(5000));  // Info answered in time
  Running slow = start({}, /*delay_ms=*/3000);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    shard::ShardClient c(slow.address(), {}, milliseconds(300));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BackendUnavailable);
    EXPECT_NE(std::string(e.what()).find("DEADLINE_EXCEEDED"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(2000));
}

TEST(Shard, ConnectChecksCoverageAndTheModel) {
  ModelPart a;
  a.layer_begin = 0, a.layer_end = 1;
  Running sa = start(a), sall = start();
  auto local = Model::load(fixture());
  EXPECT_THROW(shard::connect_ffn_shards(*local, sa.address(), {}, milliseconds(5000)), Error);  // layer 1 missing
  EXPECT_THROW(shard::connect_ffn_shards(*local, sa.address() + "," + sall.address(), {}, milliseconds(5000)),
               Error);  // layer 0 twice
  auto by_layer = shard::connect_ffn_shards(*local, sall.address(), {}, milliseconds(5000));
  ASSERT_EQ(by_layer.size(), 2u);
  auto other = Model::load(testing::source_dir() + "/tests/model/data/families/llama3/llama3-q8_0.gguf");
  try {
    shard::connect_ffn_shards(*other, sall.address(), {}, milliseconds(5000));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
  }
}

TEST(Shard, AReplicaTakesOverAndAShardBackOnAnotherModelIsRefused) {
  auto local = Model::load(fixture());
  const int64_t H = local->config().hidden;
  Running a = start(), b = start();
  const int port_a = a.server->port();
  auto by_layer = shard::connect_ffn_shards(*local, a.address() + "," + b.address(), {}, milliseconds(3000));
  ASSERT_EQ(by_layer[0].size(), 1u);     // one part ...
  ASSERT_EQ(by_layer[0][0].size(), 2u);  // ... with two replicas
  shard::RemoteFfn ffn(by_layer[0][0]);
  Forward f(local, 1);
  const auto h = rows_of(2, H, 3.0f);
  std::vector<float> want(h.size()), got(h.size());
  f.ffn(0).run(f, 0, h.data(), 2, want.data());
  ffn.run(f, 0, h.data(), 2, got.data());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * sizeof(float)));

  a.server->shutdown(milliseconds(0));
  a.server.reset();
  std::fill(got.begin(), got.end(), 0.0f);
  ffn.run(f, 0, h.data(), 2, got.data());  // a is down: b answers
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * sizeof(float)));

  // a comes back on its port serving another file: its next use re-checks Info and refuses it.
  Running other;
  other.model = Model::load(testing::source_dir() + "/tests/model/data/families/llama3/llama3-q8_0.gguf");
  shard::ServerOptions o;
  o.port = port_a;
  other.server = std::make_unique<shard::ShardServer>(other.model, std::make_shared<ThreadPool>(1), o);
  b.server->shutdown(milliseconds(0));
  b.server.reset();
  // Until the channel reconnects (its backoff) a call fails to connect; once it does, Info is asked
  // again and the other model refused. Never an answer.
  bool refused = false;
  for (int i = 0; i < 40 && !refused; ++i) {
    try {
      ffn.run(f, 0, h.data(), 2, got.data());
      FAIL() << "a shard of another model answered";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BackendUnavailable);
      const std::string m = e.what();
      EXPECT_NE(m.find("every replica"), std::string::npos) << m;
      refused = m.find("serving something else") != std::string::npos;
    }
    if (!refused) std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(refused);
}

/// A mixture of experts split over two expert shards (experts 0-1 and 2-3 of every layer), the
/// router, the weighted sum and (Qwen2-MoE) the shared expert here: the whole model's residuals
/// bit for bit, over a prefill and decode steps.
void expert_shards_match(const std::string& family) {
  const std::string path = testing::source_dir() + "/tests/model/data/families/" + family + "/" + family + "-f32.gguf";
  auto whole = Model::load(path);
  const ModelConfig& c = whole->config();
  ASSERT_EQ(c.n_experts, 4);
  auto serve = [&](int64_t b, int64_t e) {
    ModelPart p;
    p.expert_begin = b, p.expert_end = e;
    Running r;
    r.model = Model::load(path, p);
    r.server = std::make_unique<shard::ShardServer>(r.model, std::make_shared<ThreadPool>(1), shard::ServerOptions{});
    return r;
  };
  Running e01 = serve(0, 2), e23 = serve(2, 4);
  ModelPart client;
  client.expert_begin = client.expert_end = 0;  // router and shared expert only
  auto local = Model::load(path, client);
  EXPECT_TRUE(local->weights().layers[0].exp_gate[0].data == nullptr);
  auto map = shard::connect_ffn_shards(*local, e01.address() + "," + e23.address(), {}, milliseconds(5000));
  ASSERT_EQ(map[0].size(), 2u);  // two parts per layer
  Forward split(local, 1), alone(whole, 1);
  shard::attach_remote_ffn(split, map);
  KvCache ka(c), kb(c);
  std::vector<int32_t> prompt(12);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(3 + 7 * i);
  const int64_t n = static_cast<int64_t>(prompt.size()), H = c.hidden;
  std::vector<float> want(static_cast<size_t>(n * H)), got(want.size());
  alone.forward(prompt.data(), n, ka, want.data());
  split.forward(prompt.data(), n, kb, got.data());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * sizeof(float))) << family << " prefill";
  for (int32_t tok : {5, 17, 40}) {
    alone.forward(&tok, 1, ka, want.data());
    split.forward(&tok, 1, kb, got.data());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), static_cast<size_t>(H) * sizeof(float))) << family << " decode";
  }
  // Experts held twice, or not at all, are refused at connect.
  Running e13 = serve(1, 3);
  EXPECT_THROW(shard::connect_ffn_shards(*local, e01.address() + "," + e13.address(), {}, milliseconds(5000)), Error);
  EXPECT_THROW(shard::connect_ffn_shards(*local, e01.address(), {}, milliseconds(5000)), Error);
}

TEST(Shard, ExpertShardsRunMixtralBitForBit) { expert_shards_match("mixtral"); }
TEST(Shard, ExpertShardsRunQwen2MoeWithItsSharedExpertBitForBit) { expert_shards_match("qwen2_moe"); }

TEST(Shard, ANonLoopbackAddressNeedsTls) {
  auto m = Model::load(fixture());
  shard::ServerOptions o;
  o.host = "0.0.0.0";
  EXPECT_THROW(shard::ShardServer(m, std::make_shared<ThreadPool>(1), o), Error);
  o.host = "127.0.0.1";
  o.tls_cert = "/nonexistent.pem";
  EXPECT_THROW(shard::ShardServer(m, std::make_shared<ThreadPool>(1), o), Error);  // no key
}

}  // namespace
}  // namespace larql
