// The scheduler on a synthetic model: batch invariance (a job's tokens and logprobs alone equal
// those beside others), chunked prompts equal whole ones, cancellation, the queue bound, errors.
// Expected values come from running the same job alone, or from generate() (kv/generate.h), the
// single-sequence loop the CLI uses — never from a recorded output.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "kv/generate.h"
#include "kv/standard.h"
#include "model/model.h"
#include "server/scheduler.h"
#include "testlib/synthetic_model.h"
#include "tokenizer/tokenizer.h"

namespace larql::server {
namespace {

using larql::testing::make_synthetic_model;
using larql::testing::SyntheticSpec;

struct Fixture {
  Fixture()
      : sm(make_synthetic_model([] {
          SyntheticSpec s;
          s.context_length = 400;
          return s;
        }())),
        model(Model::load(sm->path)),
        fwd(std::make_shared<Forward>(model, 2)),
        tok(Tokenizer(model->source().vocabulary())) {}
  std::unique_ptr<larql::testing::SyntheticModel> sm;
  std::shared_ptr<Model> model;
  std::shared_ptr<Forward> fwd;
  Tokenizer tok;
};

Fixture& fx() {
  static Fixture f;
  return f;
}

struct Outcome {
  std::vector<int32_t> ids;
  std::vector<double> logprobs;
  std::string text, finish;
  bool operator==(const Outcome&) const = default;
};

GenParams params(int seed, int64_t max_tokens, size_t prompt_len = 5) {
  GenParams p;
  for (size_t i = 0; i < prompt_len; ++i) p.prompt.push_back(static_cast<int32_t>(6 + (seed * 7 + i * 13) % 250));
  p.max_tokens = max_tokens;
  p.sampler.temperature = 0.9f;
  p.sampler.top_k = 0;
  p.sampler.top_p = 1;
  p.sampler.min_p = 0;
  p.sampler.seed = static_cast<uint64_t>(seed);
  p.top_logprobs = 2;
  p.engine = parse_engine_spec("standard");
  return p;
}

std::vector<Outcome> collect(Job& job) {
  std::vector<Outcome> out(static_cast<size_t>(job.params().n));
  for (;;) {
    const bool fin = job.finished();
    for (auto& e : job.take()) {
      if (e.kind == Event::Kind::Error) ADD_FAILURE() << e.error;
      Outcome& o = out[static_cast<size_t>(e.choice)];
      if (e.kind == Event::Kind::Done) o.finish = e.finish_reason;
      if (e.kind != Event::Kind::Text) continue;
      o.text += e.text;
      if (e.token) {
        o.ids.push_back(e.token->id);
        o.logprobs.push_back(e.token->logprob);
      }
    }
    if (fin) break;
    job.wait(std::chrono::milliseconds(50));
  }
  return out;
}

// The same job through a scheduler of its own (and its own runner: a runner's scratch belongs
// to one scheduler).
Outcome alone(const GenParams& p) {
  Scheduler s(std::make_shared<Forward>(fx().model, 2), fx().tok, {});
  auto job = std::make_shared<Job>(p);
  EXPECT_TRUE(s.submit(job));
  return collect(*job)[0];
}

TEST(Scheduler, BatchedEqualsAlone) {
  std::vector<Outcome> want;
  for (int i = 0; i < 6; ++i) want.push_back(alone(params(i, 10 + i)));
  Scheduler s(fx().fwd, fx().tok, {});
  std::vector<std::shared_ptr<Job>> jobs;
  for (int i = 0; i < 6; ++i) {
    jobs.push_back(std::make_shared<Job>(params(i, 10 + i)));
    ASSERT_TRUE(s.submit(jobs.back()));
  }
  for (int i = 0; i < 6; ++i) {
    const Outcome got = collect(*jobs[static_cast<size_t>(i)])[0];
    EXPECT_EQ(got, want[static_cast<size_t>(i)]) << "job " << i;
  }
  EXPECT_GT(s.stats().batched_rows.load(), s.stats().decode_steps.load());  // it did batch
}

TEST(Scheduler, GreedyEqualsGenerate) {
  // The single-sequence loop of `larql run` on the same prompt: same ids, same text.
  GenParams p = params(3, 12);
  p.sampler.temperature = 0;
  p.top_logprobs = -1;
  StandardEngine e(fx().fwd, 0);
  GenerateOptions o;
  o.max_tokens = 12;
  o.sampler = p.sampler;
  const GenerateResult r = generate(e, *fx().fwd, fx().tok, p.prompt, o, nullptr);
  const Outcome got = alone(p);
  EXPECT_EQ(got.ids, r.ids);
  EXPECT_EQ(got.text, r.text);
  EXPECT_EQ(got.finish, r.stop_reason == "max_tokens" ? "length" : "stop");
}

TEST(Scheduler, LongPromptReadInChunksEqualsWhole) {
  // 300 tokens: three chunks of the scheduler; generate() prefills them at once.
  GenParams p = params(1, 6, 300);
  p.sampler.temperature = 0;
  StandardEngine e(fx().fwd, 0);
  GenerateOptions o;
  o.max_tokens = 6;
  o.sampler = p.sampler;
  o.stop_at_eog = true;
  const GenerateResult r = generate(e, *fx().fwd, fx().tok, p.prompt, o, nullptr);
  EXPECT_EQ(alone(p).ids, r.ids);
}

TEST(Scheduler, ChoicesUseSeedPlusIndex) {
  GenParams p = params(7, 8);
  p.n = 3;
  Scheduler s(fx().fwd, fx().tok, {});
  auto job = std::make_shared<Job>(p);
  ASSERT_TRUE(s.submit(job));
  const auto got = collect(*job);
  for (int c = 0; c < 3; ++c) {
    GenParams q = params(7, 8);
    q.sampler.seed = static_cast<uint64_t>(7 + c);
    EXPECT_EQ(got[static_cast<size_t>(c)], alone(q)) << "choice " << c;
  }
}

TEST(Scheduler, StopStringCutsAcrossTokens) {
  GenParams p = params(2, 16);
  p.sampler.temperature = 0;
  const Outcome full = alone(p);
  ASSERT_GE(full.text.size(), 6u);
  p.stop = {full.text.substr(3, 3)};
  const Outcome cut = alone(p);
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(p.stop[0])));
  EXPECT_EQ(cut.finish, "stop");
}

TEST(Scheduler, CancelledJobLeavesAndOthersGoOn) {
  Scheduler s(fx().fwd, fx().tok, {});
  auto a = std::make_shared<Job>(params(1, 300));
  auto b = std::make_shared<Job>(params(2, 20));
  ASSERT_TRUE(s.submit(a));
  ASSERT_TRUE(s.submit(b));
  a->wait(std::chrono::milliseconds(2000));
  a->cancel = true;
  const auto got_a = collect(*a);
  EXPECT_EQ(got_a[0].finish, "cancelled");
  EXPECT_LT(got_a[0].ids.size(), 300u);
  EXPECT_EQ(collect(*b)[0], alone(params(2, 20)));
  EXPECT_EQ(s.stats().jobs_cancelled.load(), 1u);
}

TEST(Scheduler, QueueBoundRefuses) {
  SchedulerOptions o;
  o.max_batch = 1;
  o.max_queue = 1;
  Scheduler s(fx().fwd, fx().tok, o);
  std::vector<std::shared_ptr<Job>> jobs;
  int refused = 0;
  for (int i = 0; i < 6; ++i) {
    jobs.push_back(std::make_shared<Job>(params(i, 200)));
    if (!s.submit(jobs.back())) ++refused;
  }
  EXPECT_GE(refused, 4);  // one running, one waiting
  EXPECT_EQ(s.stats().jobs_refused.load(), static_cast<uint64_t>(refused));
  for (auto& j : jobs) j->cancel = true;
}

TEST(Scheduler, BadJobsReportErrors) {
  Scheduler s(fx().fwd, fx().tok, {});
  GenParams empty = params(1, 4);
  empty.prompt.clear();
  GenParams too_long = params(1, 4, 400);
  for (auto* p : {&empty, &too_long}) {
    auto job = std::make_shared<Job>(*p);
    ASSERT_TRUE(s.submit(job));
    std::vector<Event> ev;
    while (!job->finished()) job->wait(std::chrono::milliseconds(50));
    ev = job->take();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].kind, Event::Kind::Error);
    EXPECT_EQ(ev[0].http_status, 400);
  }
  GenParams bad_engine = params(1, 4);
  bad_engine.engine = parse_engine_spec("standard:window=2");  // below the sliding window: refused
  auto job = std::make_shared<Job>(bad_engine);
  ASSERT_TRUE(s.submit(job));
  while (!job->finished()) job->wait(std::chrono::milliseconds(50));
  const auto ev = job->take();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, Event::Kind::Error);
}

TEST(StandardEngine, ExtendEqualsOnePrefill) {
  const std::vector<int32_t> ids = params(4, 1, 40).prompt;
  StandardEngine whole(fx().fwd, 0), parts(fx().fwd, 0);
  const auto a = whole.prefill(ids);
  parts.prefill({ids.begin(), ids.begin() + 17});
  parts.extend({ids.begin() + 17, ids.begin() + 30});
  const auto b = parts.extend({ids.begin() + 30, ids.end()});
  EXPECT_EQ(a, b);
  EXPECT_EQ(whole.decode_step(9), parts.decode_step(9));
}

}  // namespace
}  // namespace larql::server
