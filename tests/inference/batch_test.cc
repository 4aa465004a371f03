// Many sequences (docs/architecture.md "Many sequences"): Forward::decode_batch against each
// sequence decoded alone (bit for bit, whatever else is in the batch), cancellation within one
// layer, and several sequences on one shared model and pool from several threads (also run under
// ThreadSanitizer: `make tsan`).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "model/model.h"
#include "testlib/paths.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"

namespace larql {
namespace {

using testing::make_synthetic_model;
using testing::SyntheticSpec;

// Sequence s: a prompt of 1 + (3 * s) % 11 tokens, then decode tokens; different per sequence.
std::vector<int32_t> prompt_of(int s, int32_t vocab) {
  std::vector<int32_t> p = {2};
  for (int i = 1; i < 1 + (3 * s) % 11; ++i) p.push_back(static_cast<int32_t>((37 * s + 11 * i + 5) % vocab));
  return p;
}
int32_t decode_token(int s, int step, int32_t vocab) { return static_cast<int32_t>((53 * s + 17 * step + 3) % vocab); }

// Logits after each of `steps` decode steps of sequence s, decoded alone on `f`.
std::vector<std::vector<float>> alone(Forward& f, int s, int steps) {
  const ModelConfig& c = f.config();
  const auto vocab = static_cast<int32_t>(c.vocab);
  KvCache cache(c);
  const auto p = prompt_of(s, vocab);
  std::vector<float> x(p.size() * c.hidden), lg(c.vocab);
  f.forward(p.data(), static_cast<int64_t>(p.size()), cache, x.data());
  std::vector<std::vector<float>> out;
  for (int step = 0; step < steps; ++step) {
    const int32_t t = decode_token(s, step, vocab);
    f.forward(&t, 1, cache, x.data());
    f.logits(x.data(), 1, lg.data());
    out.push_back(lg);
  }
  return out;
}

struct Seqs {
  std::vector<KvCache> caches;
  std::vector<std::vector<float>> x;
};

Seqs prefill_all(Forward& f, int n) {
  const ModelConfig& c = f.config();
  Seqs s;
  for (int i = 0; i < n; ++i) {
    s.caches.emplace_back(c);
    const auto p = prompt_of(i, static_cast<int32_t>(c.vocab));
    std::vector<float> x(p.size() * c.hidden);
    f.forward(p.data(), static_cast<int64_t>(p.size()), s.caches.back(), x.data());
    s.x.emplace_back(c.hidden);
  }
  return s;
}

// 8 sequences of different lengths, all in every step but with members sitting steps out, so a
// sequence's row meets batches of 8, 5 and 2 rows (the tiled GEMM from 4 rows, the row kernels
// below) and sits in different places of the batch.
void check_batch_equals_alone(const std::shared_ptr<Model>& model, int threads) {
  Forward runner(model, threads), single(model, threads);
  const ModelConfig& c = runner.config();
  const auto vocab = static_cast<int32_t>(c.vocab);
  constexpr int kSeqs = 8, kSteps = 4;
  Seqs s = prefill_all(runner, kSeqs);
  std::vector<int> step_of(kSeqs, 0);
  std::vector<std::vector<std::vector<float>>> got(kSeqs);
  const std::vector<std::vector<int>> rounds = {{0, 1, 2, 3, 4, 5, 6, 7}, {7, 5, 3, 1, 0}, {2, 6}, {4, 6, 2},
                                                {0, 1, 2, 3, 4, 5, 6, 7}, {1, 3, 5, 7, 0}, {0, 4, 6, 2}};
  std::vector<float> lg(static_cast<size_t>(kSeqs) * c.vocab), xs(static_cast<size_t>(kSeqs) * c.hidden);
  for (const auto& round : rounds) {
    std::vector<Forward::BatchItem> items;
    for (int i : round) {
      if (step_of[i] >= kSteps) continue;
      items.push_back({decode_token(i, step_of[i], vocab), &s.caches[i], s.x[i].data()});
    }
    runner.decode_batch(items);
    for (size_t r = 0; r < items.size(); ++r) std::copy(items[r].x, items[r].x + c.hidden, xs.begin() + r * c.hidden);
    runner.logits(xs.data(), static_cast<int64_t>(items.size()), lg.data());  // batched lm_head too
    for (size_t r = 0; r < items.size(); ++r) {
      const int i = static_cast<int>(&*items[r].cache - &s.caches[0]);
      EXPECT_FALSE(items[r].cancelled);
      got[i].emplace_back(lg.begin() + r * c.vocab, lg.begin() + (r + 1) * c.vocab);
      ++step_of[i];
    }
  }
  for (int i = 0; i < kSeqs; ++i) {
    ASSERT_EQ(static_cast<int>(got[i].size()), kSteps) << i;
    const auto want = alone(single, i, kSteps);
    for (int step = 0; step < kSteps; ++step) EXPECT_TRUE(got[i][step] == want[step]) << "seq " << i << " step " << step;
  }
}

TEST(DecodeBatch, EightSequencesEqualEachAloneBitForBit) {
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    SyntheticSpec spec;
    spec.matrix_type = t;
    auto sm = make_synthetic_model(spec);
    auto model = Model::load(sm->path);
    SCOPED_TRACE(dtype_name(t));
    check_batch_equals_alone(model, 2);
    check_batch_equals_alone(model, 3);
  }
}

TEST(DecodeBatch, RealModelEightSequencesEqualEachAloneBitForBit) {
  LARQL_REQUIRE_MODEL(path);
  check_batch_equals_alone(Model::load(path), 2);
}

// Cancels one sequence from inside the step (an observer that sets its flag when it sees
// `at_layer`): the flag is seen before the next layer, so the sequence computes layers
// 0..at_layer and no more; its cache is rewound; the others finish as if alone.
class CancelAt final : public LayerObserver {
 public:
  CancelAt(int64_t seq, int64_t at_layer, std::atomic<bool>* flag) : seq_(seq), at_(at_layer), flag_(flag) {}
  void on_layer(const LayerTrace& t) override {
    if (t.seq == seq_) last_layer_seen = t.layer;
    if (t.seq == seq_ && t.layer == at_) flag_->store(true);
  }
  int64_t last_layer_seen = -1;

 private:
  int64_t seq_, at_;
  std::atomic<bool>* flag_;
};

TEST(DecodeBatch, CancelledSequenceStopsWithinOneLayerOthersUnaffected) {
  SyntheticSpec spec;
  spec.matrix_type = DType::Q8_0;
  auto sm = make_synthetic_model(spec);
  auto model = Model::load(sm->path);
  Forward runner(model, 2), single(model, 2);
  const ModelConfig& c = runner.config();
  const auto vocab = static_cast<int32_t>(c.vocab);
  constexpr int kSeqs = 6;
  Seqs s = prefill_all(runner, kSeqs);
  std::vector<std::atomic<bool>> flags(kSeqs);
  CancelAt cancel_at(2, 3, &flags[2]);
  runner.set_observer(&cancel_at);
  std::vector<Forward::BatchItem> items;
  std::vector<int64_t> n_past;
  for (int i = 0; i < kSeqs; ++i) {
    items.push_back({decode_token(i, 0, vocab), &s.caches[i], s.x[i].data(), &flags[i]});
    n_past.push_back(s.caches[i].n_past());
  }
  runner.decode_batch(items);
  runner.set_observer(nullptr);
  EXPECT_EQ(cancel_at.last_layer_seen, 3);
  for (int i = 0; i < kSeqs; ++i) {
    EXPECT_EQ(items[i].cancelled, i == 2) << i;
    for (int64_t li = 0; li < c.n_layers; ++li)
      EXPECT_EQ(s.caches[i].layer(li).end_pos(), n_past[i] + (i == 2 ? 0 : 1)) << "seq " << i << " layer " << li;
  }
  // The rewound sequence goes on as if the cancelled step never happened; the others too.
  flags[2] = false;
  std::vector<float> lg(c.vocab);
  for (int i = 0; i < kSeqs; ++i) {
    const int steps_done = i == 2 ? 0 : 1;
    std::vector<Forward::BatchItem> one = {{decode_token(i, steps_done, vocab), &s.caches[i], s.x[i].data()}};
    if (i == 2) {
      runner.decode_batch(one);
      runner.logits(s.x[i].data(), 1, lg.data());
      EXPECT_TRUE(lg == alone(single, i, 1).back()) << "rewound seq";
    } else {
      runner.logits(s.x[i].data(), 1, lg.data());
      EXPECT_TRUE(lg == alone(single, i, 1).back()) << "seq " << i;
    }
  }
}

TEST(DecodeBatch, RejectsASharedCacheBeforeAnyWork) {
  auto sm = make_synthetic_model();
  auto model = Model::load(sm->path);
  Forward f(model, 1);
  Seqs s = prefill_all(f, 1);
  std::vector<Forward::BatchItem> items = {{5, &s.caches[0], s.x[0].data()}, {6, &s.caches[0], s.x[0].data()}};
  const int64_t before = s.caches[0].n_past();
  try {
    f.decode_batch(items);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
  }
  items.resize(1);
  items[0].token = -3;
  EXPECT_THROW(f.decode_batch(items), Error);
  EXPECT_EQ(s.caches[0].n_past(), before);
}

TEST(Forward, CancelFlagStopsForwardBeforeALayer) {
  auto sm = make_synthetic_model();
  auto model = Model::load(sm->path);
  Forward f(model, 2);
  std::atomic<bool> flag{true};
  f.set_cancel(&flag);
  KvCache cache(f.config());
  const std::vector<int32_t> p = {2, 5, 7};
  std::vector<float> x(3 * f.config().hidden);
  try {
    f.forward(p.data(), 3, cache, x.data());
    ADD_FAILURE() << "not cancelled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Cancelled) << e.what();
  }
  EXPECT_EQ(cache.n_past(), 0);
  flag = false;
  f.forward(p.data(), 3, cache, x.data());
  EXPECT_EQ(cache.n_past(), 3);
}

// 4 sequences on one shared model and the shared pool, each its own Forward on its own thread,
// plus 2 threads stepping batches: every result as when run alone.
TEST(ManySequences, ConcurrentCallersOnOneModelAndPool) {
  SyntheticSpec spec;
  spec.matrix_type = DType::Q8_0;
  auto sm = make_synthetic_model(spec);
  auto model = Model::load(sm->path);
  constexpr int kSteps = 3;
  std::vector<std::vector<std::vector<float>>> want;
  {
    Forward f(model, 2);
    for (int s = 0; s < 8; ++s) want.push_back(alone(f, s, kSteps));
  }
  std::vector<std::vector<std::vector<float>>> got(8);
  std::vector<std::thread> threads;
  for (int s = 0; s < 4; ++s)
    threads.emplace_back([&, s] {
      Forward f(model, 2);  // the same shared pool for every thread
      got[s] = alone(f, s, kSteps);
    });
  for (int b = 0; b < 2; ++b)
    threads.emplace_back([&, b] {
      Forward f(model, 2);
      const ModelConfig& c = f.config();
      Seqs seqs;
      for (int i = 0; i < 2; ++i) {
        const int s = 4 + 2 * b + i;
        seqs.caches.emplace_back(c);
        const auto p = prompt_of(s, static_cast<int32_t>(c.vocab));
        std::vector<float> x(p.size() * c.hidden);
        f.forward(p.data(), static_cast<int64_t>(p.size()), seqs.caches.back(), x.data());
        seqs.x.emplace_back(c.hidden);
      }
      std::vector<float> lg(c.vocab);
      for (int step = 0; step < kSteps; ++step) {
        std::vector<Forward::BatchItem> items;
        for (int i = 0; i < 2; ++i)
          items.push_back({decode_token(4 + 2 * b + i, step, static_cast<int32_t>(c.vocab)), &seqs.caches[i],
                           seqs.x[i].data()});
        f.decode_batch(items);
        for (int i = 0; i < 2; ++i) {
          f.logits(seqs.x[i].data(), 1, lg.data());
          got[4 + 2 * b + i].push_back(lg);
        }
      }
    });
  for (auto& t : threads) t.join();
  for (int s = 0; s < 8; ++s) EXPECT_TRUE(got[s] == want[s]) << "seq " << s;
}

}  // namespace
}  // namespace larql
