// Pipeline mode in-process (shard/pipeline.h): a client holding only the embedding, the final norm
// and lm_head runs the layers on shards through RunLayers. The reference is the whole model run
// locally (Forward over a KvCache; the family tests hold it to transformers and llama.cpp): every
// residual, logit and greedy token must be the same bit for bit, through rewinds, restarts, a
// replica taking over a sequence, and batched steps. A dead shard without a replica is an error
// naming it within the deadline; sets that do not make one model are refused at connect.
#include <gtest/gtest.h>

#include <chrono>
#include <algorithm>
#include <cstring>
#include <vector>

#include "kv/registry.h"
#include "shard/pipeline.h"
#include "shard/shard.h"
#include "testlib/paths.h"
#include "util/error.h"

namespace larql {
namespace {

using std::chrono::milliseconds;

std::string fixture(const std::string& family = "llama3") {
  return testing::source_dir() + "/tests/model/data/families/" + family + "/" + family + "-f32.gguf";
}

struct Running {
  std::shared_ptr<const Model> model;
  std::unique_ptr<shard::ShardServer> server;
  std::string address() const { return "127.0.0.1:" + std::to_string(server->port()); }
};

Running start(const std::string& path, int64_t layer_begin, int64_t layer_end, bool ffn_only = false) {
  ModelPart p;
  p.embedding = false;
  p.layer_begin = layer_begin;
  p.layer_end = layer_end;
  p.attention = !ffn_only;
  Running r;
  r.model = Model::load(path, p);
  shard::ServerOptions o;
  o.max_rows = 3;  // prompts go to the shards in pieces
  r.server = std::make_unique<shard::ShardServer>(r.model, std::make_shared<ThreadPool>(1), o);
  return r;
}

/// The client's part: the embedding, the final norm and lm_head.
std::shared_ptr<const Model> client_part(const std::string& path) {
  ModelPart p;
  p.attention = false;
  p.ffn = false;
  return Model::load(path, p);
}

std::shared_ptr<shard::PipelineModel> pipeline(const std::shared_ptr<const Model>& local, const std::string& addrs,
                                               int timeout_ms = 5000) {
  auto stages = shard::connect_pipeline_shards(*local, addrs, {}, milliseconds(timeout_ms));
  return std::make_shared<shard::PipelineModel>(std::make_shared<Forward>(local, 1), std::move(stages));
}

/// The whole model in one process: the final residual of every row of `ids` after `before`.
struct Local {
  std::shared_ptr<const Model> model;
  Forward f;
  KvCache cache;
  explicit Local(const std::string& path) : model(Model::load(path)), f(model, 1), cache(model->config()) {}
  std::vector<float> run(const std::vector<int32_t>& ids) {
    std::vector<float> x(ids.size() * static_cast<size_t>(model->config().hidden));
    f.forward(ids.data(), static_cast<int64_t>(ids.size()), cache, x.data());
    return x;
  }
  std::vector<float> logits(const float* row) {
    std::vector<float> l(static_cast<size_t>(model->config().vocab));
    f.logits(row, 1, l.data());
    return l;
  }
};

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> last_row(const std::vector<float>& x, int64_t H) {
  return std::vector<float>(x.end() - H, x.end());
}

const std::vector<int32_t> kPrompt = {1, 15, 27, 99, 3, 42, 7, 250};

class Pipeline : public ::testing::TestWithParam<std::string> {};

TEST_P(Pipeline, TwoStagesAreTheWholeModelBitForBitThroughRewindsAndRestarts) {
  const std::string path = fixture(GetParam());
  Running a = start(path, 0, 1), b = start(path, 1, 2);
  auto local_part = client_part(path);
  auto pm = pipeline(local_part, b.address() + "," + a.address());  // listed out of order: sorted by layer
  ASSERT_EQ(pm->stages().size(), 2u);
  EXPECT_EQ(pm->stages()[0].begin, 0);
  EXPECT_EQ(pm->info().backend, "pipeline");
  const int64_t H = local_part->config().hidden;

  Local want(path);
  auto seq = pm->open(local_part->config().context_length);
  // A prompt: every row's residual, then the last row's logits.
  const auto x_want = want.run(kPrompt);
  std::vector<float> x_got(x_want.size());
  seq->append_rows(kPrompt.data(), static_cast<int64_t>(kPrompt.size()), x_got.data());
  EXPECT_TRUE(same(x_want, x_got));
  std::vector<float> lg(static_cast<size_t>(local_part->config().vocab));
  seq->logits(lg.data());
  EXPECT_TRUE(same(want.logits(x_want.data() + (kPrompt.size() - 1) * H), lg));

  // Greedy decode, one token at a time: the same tokens and residuals.
  std::vector<int32_t> history = kPrompt;
  std::vector<float> h(static_cast<size_t>(H)), xw = last_row(x_want, H);
  for (int step = 0; step < 6; ++step) {
    const auto wl = want.logits(xw.data());
    const int32_t next = seq->argmax();
    EXPECT_EQ(next, std::max_element(wl.begin(), wl.end()) - wl.begin()) << "step " << step;
    history.push_back(next);
    xw = want.run({next});
    seq->append(&next, 1);
    seq->hidden(h.data());
    EXPECT_TRUE(same(xw, h)) << "step " << step;
  }
  EXPECT_EQ(seq->n_past(), static_cast<int64_t>(history.size()));

  // Rewind to position 5 and continue with other tokens: as a fresh run of the same ids.
  seq->truncate(5);
  const std::vector<int32_t> tail = {11, 12, 13};
  seq->append(tail.data(), 3);
  seq->hidden(h.data());
  Local fresh(path);
  std::vector<int32_t> ids(kPrompt.begin(), kPrompt.begin() + 5);
  ids.insert(ids.end(), tail.begin(), tail.end());
  EXPECT_TRUE(same(last_row(fresh.run(ids), H), h));

  // Back to 0: a new sequence on the same id.
  seq->truncate(0);
  seq->append(kPrompt.data(), 2);
  seq->hidden(h.data());
  Local again(path);
  EXPECT_TRUE(same(last_row(again.run({kPrompt[0], kPrompt[1]}), H), h));
}

INSTANTIATE_TEST_SUITE_P(Families, Pipeline, ::testing::Values("llama3", "gemma2"));

TEST(PipelineModel, BatchedStepsAreEachSequenceAlone) {
  const std::string path = fixture();
  Running a = start(path, 0, 1), b = start(path, 1, 2);
  auto local_part = client_part(path);
  auto pm = pipeline(local_part, a.address() + "," + b.address());
  const int64_t H = local_part->config().hidden;
  std::vector<std::unique_ptr<DeviceSequence>> seqs;
  std::vector<Local> want;
  want.reserve(3);
  for (int i = 0; i < 3; ++i) {
    seqs.push_back(pm->new_sequence(64));
    const std::vector<int32_t> p(kPrompt.begin() + i, kPrompt.end());
    seqs.back()->append(p.data(), static_cast<int64_t>(p.size()));
    want.emplace_back(path);
    want.back().run(p);
  }
  std::vector<DeviceSequence*> ptrs;
  for (auto& s : seqs) ptrs.push_back(s.get());
  const std::vector<int32_t> toks = {5, 6, 7};
  std::vector<int32_t> am(3);
  pm->decode_batch(ptrs, toks.data(), am.data());
  std::vector<float> h(static_cast<size_t>(H));
  for (int i = 0; i < 3; ++i) {
    const auto x = want[static_cast<size_t>(i)].run({toks[static_cast<size_t>(i)]});
    seqs[static_cast<size_t>(i)]->hidden(h.data());
    EXPECT_TRUE(same(x, h)) << i;
    const auto l = want[static_cast<size_t>(i)].logits(x.data());
    EXPECT_EQ(am[static_cast<size_t>(i)], std::max_element(l.begin(), l.end()) - l.begin());
  }
  EXPECT_THROW(pm->decode_batch(std::vector<DeviceSequence*>{ptrs[0], ptrs[0]}, toks.data(), nullptr), Error);
}

TEST(PipelineModel, AReplicaTakesOverASequenceMidwayBitForBit) {
  const std::string path = fixture();
  Running a = start(path, 0, 1), b1 = start(path, 1, 2), b2 = start(path, 1, 2);
  auto local_part = client_part(path);
  auto pm = pipeline(local_part, a.address() + "," + b1.address() + "," + b2.address());
  ASSERT_EQ(pm->stages().size(), 2u);
  ASSERT_EQ(pm->stages()[1].replicas.size(), 2u);
  const int64_t H = local_part->config().hidden;
  auto seq = pm->open(64);
  seq->append(kPrompt.data(), 4);
  // Stop the replica the sequence started on (the stage's first: b1): the next step runs the
  // sequence again on b2 from position 0.
  b1.server->shutdown(milliseconds(0));
  b1.server.reset();
  seq->append(kPrompt.data() + 4, 4);
  std::vector<float> h(static_cast<size_t>(H));
  seq->hidden(h.data());
  Local want(path);
  EXPECT_TRUE(same(last_row(want.run(kPrompt), H), h));
  EXPECT_EQ(seq->n_past(), 8);
  // ... and goes on there.
  const int32_t t = 9;
  seq->append(&t, 1);
  seq->hidden(h.data());
  EXPECT_TRUE(same(want.run({t}), h));
}

TEST(PipelineModel, ADeadShardWithoutAReplicaIsAnErrorNamingItWithinTheDeadline) {
  const std::string path = fixture();
  Running a = start(path, 0, 1), b = start(path, 1, 2);
  const std::string b_addr = b.address();
  auto local_part = client_part(path);
  auto pm = pipeline(local_part, a.address() + "," + b_addr, /*timeout_ms=*/2000);
  auto seq = pm->open(64);
  seq->append(kPrompt.data(), 4);
  b.server->shutdown(milliseconds(0));
  b.server.reset();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    seq->append(kPrompt.data() + 4, 1);
    FAIL() << "a dead shard answered";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BackendUnavailable);
    EXPECT_NE(std::string(e.what()).find(b_addr), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layers 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_EQ(seq->n_past(), 4);  // the failed step left nothing behind here
}

TEST(PipelineModel, OnlyTheStandardEngineRunsOverIt) {
  const std::string path = fixture();
  Running a = start(path, 0, 2);
  auto local_part = client_part(path);
  auto pm = pipeline(local_part, a.address());
  auto f = std::make_shared<Forward>(local_part, 1);
  f->set_device(pm);
  auto std_engine = make_engine(parse_engine_spec("standard"), f);
  Local want(path);
  const auto h = std_engine->prefill(kPrompt);
  EXPECT_TRUE(same(last_row(want.run(kPrompt), local_part->config().hidden), h));
  for (const char* spec : {"markov-rs", "standard:window=4", "turbo-quant"}) {
    try {
      make_engine(parse_engine_spec(spec), f);
      FAIL() << spec << " ran over a pipeline";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BackendUnavailable) << spec;
      EXPECT_NE(std::string(e.what()).find("--pipeline"), std::string::npos) << e.what();
    }
  }
  // What needs the layers here (a plain forward pass) says where they are.
  KvCache cache(local_part->config());
  std::vector<float> x(static_cast<size_t>(local_part->config().hidden));
  try {
    f->forward(kPrompt.data(), 1, cache, x.data());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BackendUnavailable);
    EXPECT_NE(std::string(e.what()).find("pipeline"), std::string::npos) << e.what();
  }
}

TEST(PipelineModel, ConnectRefusesSetsThatAreNotOneModel) {
  const std::string path = fixture();
  auto local_part = client_part(path);
  auto refused = [&](const std::string& addrs, const std::string& says) {
    try {
      shard::connect_pipeline_shards(*local_part, addrs, {}, milliseconds(3000));
      ADD_FAILURE() << addrs << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  Running first = start(path, 0, 1), whole = start(path, 0, 2), ffn_only = start(path, 1, 2, true);
  refused(first.address(), "no pipeline shard holds layer(s) 1");
  refused(first.address() + "," + whole.address(), "overlapping");
  refused(first.address() + "," + ffn_only.address(), "--ffn-only");
  Running other = start(fixture("qwen2"), 1, 2);
  refused(first.address() + "," + other.address(), "serves another model");
  // A dead address: BackendUnavailable naming it.
  const std::string gone = whole.address();
  whole.server.reset();
  try {
    shard::connect_pipeline_shards(*local_part, gone, {}, milliseconds(1000));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BackendUnavailable);
    EXPECT_NE(std::string(e.what()).find(gone), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace larql
