// generate() with greedy sampling on synthetic models: max_tokens, stop strings, EOS, context.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compute/logits.h"
#include "inference/forward.h"
#include "inference/kv_cache.h"
#include "inference/sampler.h"
#include "kv/generate.h"
#include "kv/standard.h"
#include "model/model.h"
#include "testlib/synthetic_model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace larql {
namespace {

using testing::make_synthetic_model;
using testing::SyntheticSpec;

struct Gen {
  explicit Gen(SyntheticSpec s = {})
      : sm(make_synthetic_model(s)), model(Model::load(sm->path)), fwd(std::make_shared<Forward>(model, 2)),
        tok(Tokenizer(model->source().vocabulary())) {}
  GenerateResult run(const std::vector<int32_t>& prompt, GenerateOptions o, std::string* streamed = nullptr) {
    StandardEngine e(fwd, 0);
    return generate(e, *fwd, tok, prompt, o,
                    streamed ? std::function<void(std::string_view)>([streamed](std::string_view s) { *streamed += s; })
                             : nullptr);
  }
  /// The greedy continuation computed the slow way: a fresh batched forward over the whole
  /// sequence for every new token, argmax of the last position (no engine state involved).
  /// With `penalty` != 1 the CTRL repetition penalty is applied by hand to every token seen so
  /// far (positive logits divided, negative multiplied).
  std::vector<int32_t> greedy_oracle(std::vector<int32_t> seq, int n, float penalty = 1.0f) {
    const auto& c = model->config();
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      KvCache cache(c);
      std::vector<float> x(seq.size() * c.hidden), lg(c.vocab);
      fwd->forward(seq.data(), static_cast<int64_t>(seq.size()), cache, x.data());
      fwd->logits(x.data() + (seq.size() - 1) * c.hidden, 1, lg.data());
      if (penalty != 1.0f) {
        std::vector<bool> seen(static_cast<size_t>(c.vocab), false);
        for (int32_t id : seq) seen[static_cast<size_t>(id)] = true;
        for (int64_t v = 0; v < c.vocab; ++v)
          if (seen[static_cast<size_t>(v)]) lg[v] = lg[v] > 0 ? lg[v] / penalty : lg[v] * penalty;
      }
      const int32_t next = static_cast<int32_t>(compute::argmax(lg.data(), c.vocab));
      out.push_back(next);
      seq.push_back(next);
    }
    return out;
  }
  std::unique_ptr<testing::SyntheticModel> sm;
  std::shared_ptr<Model> model;
  std::shared_ptr<Forward> fwd;
  Tokenizer tok;
};

GenerateOptions greedy(int64_t max_tokens, bool stop_at_eog = false, float penalty = 1.0f) {
  GenerateOptions o;
  o.sampler.repeat_penalty = penalty;
  o.sampler.repeat_last_n = 1000;
  o.max_tokens = max_tokens;
  o.sampler.temperature = 0.0f;
  o.stop_at_eog = stop_at_eog;
  return o;
}

// Ends with a word token: with tied embeddings a random model tends to repeat its last token, so
// some tests add a repetition penalty to get varied text.
const std::vector<int32_t> kPrompt = {2, 4, 270, 271, 5, 263};

TEST(Generate, EogIds) {
  Gen g;
  EXPECT_EQ(eog_ids(g.tok), (std::vector<int32_t>{testing::kSynEos, testing::kSynEot}));
}

TEST(Generate, StopsAtMaxTokensWithTheGreedyTokens) {
  Gen g;
  std::string streamed;
  const auto r = g.run(kPrompt, greedy(8, false, 3.0f), &streamed);
  EXPECT_EQ(r.stop_reason, "max_tokens");
  ASSERT_EQ(r.ids.size(), 8u);
  EXPECT_EQ(r.decoded, 7);
  EXPECT_EQ(r.prompt_ids, kPrompt);
  EXPECT_EQ(r.ids, g.greedy_oracle(kPrompt, 8, 3.0f));
  EXPECT_GT(std::set<int32_t>(r.ids.begin(), r.ids.end()).size(), 4u);  // not one token repeated
  EXPECT_EQ(streamed, r.text);
  // The streamed text is the detokenised ids with invalid UTF-8 replaced (StreamDecoder).
  EXPECT_EQ(r.text, utf8_sanitize(g.tok.decode(r.ids, /*skip_special=*/true), false, nullptr));
  // max_tokens = 0 generates nothing.
  const auto none = g.run(kPrompt, greedy(0));
  EXPECT_TRUE(none.ids.empty());
  EXPECT_EQ(none.stop_reason, "max_tokens");
  EXPECT_EQ(none.text, "");
}

TEST(Generate, StopsAtAStopStringWhichIsNotInTheText) {
  Gen g;
  const auto full = g.run(kPrompt, greedy(24, false, 3.0f));
  ASSERT_GE(full.text.size(), 4u) << "the synthetic model produced too little text to cut: "
                                   << ::testing::PrintToString(full.ids);
  // Stop at a piece of the text that starts in its second half.
  const size_t at = full.text.size() / 2;
  const std::string stop = full.text.substr(at, std::min<size_t>(3, full.text.size() - at));
  const size_t first = full.text.find(stop);
  GenerateOptions o = greedy(24, false, 3.0f);
  o.stop_strings = {"this never appears \x01", stop};
  std::string streamed;
  const auto r = g.run(kPrompt, o, &streamed);
  EXPECT_EQ(r.stop_reason, "stop_string");
  EXPECT_EQ(r.text, full.text.substr(0, first));
  EXPECT_EQ(r.text.find(stop), std::string::npos);
  EXPECT_EQ(streamed, r.text);
  EXPECT_LT(r.ids.size(), full.ids.size());
  // The ids are a prefix of the uninterrupted generation.
  EXPECT_EQ(r.ids, std::vector<int32_t>(full.ids.begin(), full.ids.begin() + r.ids.size()));
}

TEST(Generate, StopsAtEosWhenTheModelEmitsIt) {
  SyntheticSpec s;
  s.force_eos = true;
  Gen g(s);
  // The reference: eos is the argmax.
  EXPECT_EQ(g.greedy_oracle(kPrompt, 1), std::vector<int32_t>{testing::kSynEos});
  std::string streamed;
  const auto r = g.run(kPrompt, greedy(10, /*stop_at_eog=*/true), &streamed);
  EXPECT_EQ(r.stop_reason, "eog");
  EXPECT_TRUE(r.ids.empty());
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(streamed, "");
  EXPECT_EQ(r.decoded, 0);
  // With stop_at_eog off, <eos> is generated (and skipped in the text) until max_tokens.
  const auto r2 = g.run(kPrompt, greedy(4, /*stop_at_eog=*/false));
  EXPECT_EQ(r2.stop_reason, "max_tokens");
  EXPECT_EQ(r2.ids, std::vector<int32_t>(4, testing::kSynEos));
  EXPECT_EQ(r2.text, "");
}

TEST(Generate, StopsWhenTheContextIsFull) {
  SyntheticSpec s;
  s.context_length = 8;
  Gen g(s);
  const auto r = g.run(kPrompt, greedy(20));
  EXPECT_EQ(r.stop_reason, "context");
  // Prompt and generated text together fit the context: the 6-token prompt leaves positions 6
  // and 7, so 8 - 6 = 2 tokens (the same count run's -c gives every engine).
  EXPECT_EQ(r.ids.size(), 2u);
  EXPECT_EQ(r.ids, g.greedy_oracle(kPrompt, 2));
  // A prompt longer than the context is the engine's ContextOverflow.
  try {
    g.run(std::vector<int32_t>(9, 270), greedy(2));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ContextOverflow) << e.what();
  }
}

TEST(Generate, EmptyPromptIsAnError) {
  Gen g;
  try {
    g.run({}, greedy(3));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::EmptyPrompt) << e.what();
  }
}

TEST(Generate, ContinueSequenceDecodesOnTopOfTheWholeSequence) {
  Gen g;
  // Generating after [prompt] then continuing with [more] equals generating after
  // prompt + the generated token + more: the generated token belongs to the sequence (it is
  // in the session's history, fed before `more`).
  const std::vector<int32_t> more = {270, 277};
  StandardEngine e(g.fwd, 0);
  const auto first = generate(e, *g.fwd, g.tok, kPrompt, greedy(1), nullptr);
  ASSERT_EQ(first.ids.size(), 1u);
  EXPECT_EQ(e.n_past(), static_cast<int64_t>(kPrompt.size()));  // the generated token is pending
  EXPECT_EQ(e.session().history.size(), kPrompt.size() + 1);
  std::vector<int32_t> joined = kPrompt;
  joined.push_back(first.ids[0]);
  joined.insert(joined.end(), more.begin(), more.end());
  GenerateOptions o = greedy(5);
  o.continue_sequence = true;
  const auto r = generate(e, *g.fwd, g.tok, more, o, nullptr);
  EXPECT_EQ(r.ids, g.greedy_oracle(joined, 5));
}

// Issue 8, "resume is not the uninterrupted run": the repetition penalty must see the tokens
// generated before the state was saved. Expected ids: the oracle over the whole sequence with
// the penalty applied by hand.
TEST(Generate, ResumedSequenceKeepsThePenaltyHistory) {
  Gen g;
  const std::string path = ::testing::TempDir() + "/larql-penalty.kv";
  const GenerateOptions first_opt = greedy(4, false, 1.5f);
  std::vector<int32_t> gen1;
  {
    StandardEngine e(g.fwd, 0);
    gen1 = generate(e, *g.fwd, g.tok, kPrompt, first_opt, nullptr).ids;
    e.save_state(path);
  }
  StandardEngine resumed(g.fwd, 0);
  resumed.load_state(path);
  EXPECT_EQ(resumed.session().history.size(), kPrompt.size() + 4);
  const std::vector<int32_t> more = {270};
  GenerateOptions o = greedy(8, false, 1.5f);
  o.continue_sequence = true;
  const auto r = generate(resumed, *g.fwd, g.tok, more, o, nullptr);
  std::vector<int32_t> whole = kPrompt;
  whole.insert(whole.end(), gen1.begin(), gen1.end());
  whole.insert(whole.end(), more.begin(), more.end());
  EXPECT_EQ(gen1, g.greedy_oracle(kPrompt, 4, 1.5f));
  EXPECT_EQ(r.ids, g.greedy_oracle(whole, 8, 1.5f));
  std::remove(path.c_str());
}

// Seeded sampling: k tokens, save, load in a fresh engine, continue with no new prompt =
// k + m tokens in one run (the sampler's random state travels in the state file).
TEST(Generate, SaveAtKThenContinueEqualsUninterruptedSampling) {
  Gen g;
  GenerateOptions o;
  o.sampler.temperature = 1.0f;
  o.sampler.top_k = 0;
  o.sampler.top_p = 1.0f;
  o.sampler.min_p = 0.0f;
  o.sampler.repeat_penalty = 1.3f;
  o.sampler.seed = 1234;
  o.stop_at_eog = false;
  for (int k : {1, 7}) {
    o.max_tokens = k + 9;
    std::vector<int32_t> whole;
    {
      StandardEngine e(g.fwd, 0);
      whole = generate(e, *g.fwd, g.tok, kPrompt, o, nullptr).ids;
    }
    const std::string path = ::testing::TempDir() + "/larql-seeded.kv";
    std::vector<int32_t> parts;
    {
      StandardEngine e(g.fwd, 0);
      GenerateOptions a = o;
      a.max_tokens = k;
      parts = generate(e, *g.fwd, g.tok, kPrompt, a, nullptr).ids;
      e.save_state(path);
    }
    StandardEngine e(g.fwd, 0);
    e.load_state(path);
    GenerateOptions b = o;
    b.max_tokens = 9;
    b.continue_sequence = true;
    b.sampler.seed = 999;  // ignored: the saved random state continues
    const auto rest = generate(e, *g.fwd, g.tok, {}, b, nullptr);
    parts.insert(parts.end(), rest.ids.begin(), rest.ids.end());
    EXPECT_EQ(parts, whole) << "k=" << k;
    // Another sampler configuration: continues, with a fresh random state, and says so.
    StandardEngine e2(g.fwd, 0);
    e2.load_state(path);
    b.sampler.temperature = 0.7f;
    const auto other = generate(e2, *g.fwd, g.tok, {}, b, nullptr);
    ASSERT_EQ(other.notes.size(), 1u);
    EXPECT_NE(other.notes[0].find("temperature=0.7"), std::string::npos) << other.notes[0];
    std::remove(path.c_str());
  }
}

TEST(Generate, StopIdsCancelAndAFailingSinkStopGeneration) {
  Gen g;
  GenerateOptions sampled = greedy(12, false, 1.0f);  // seeded sampling: varied tokens
  sampled.sampler.temperature = 100.0f;  // the random model's logits are far apart: flatten them
  sampled.sampler.top_k = 0;
  sampled.sampler.top_p = 1.0f;
  sampled.sampler.min_p = 0.0f;
  sampled.sampler.seed = 5;
  const auto free_run = g.run(kPrompt, sampled).ids;
  ASSERT_EQ(free_run.size(), 12u);
  size_t first_new = 1;  // the first token that did not occur before it
  while (first_new < free_run.size() &&
         std::find(free_run.begin(), free_run.begin() + first_new, free_run[first_new]) != free_run.begin() + first_new)
    ++first_new;
  ASSERT_LT(first_new, free_run.size()) << "the free run repeats one token";
  GenerateOptions o = sampled;
  o.stop_ids = {free_run[first_new]};
  auto r = g.run(kPrompt, o);
  EXPECT_EQ(r.stop_reason, "stop_id");
  EXPECT_EQ(r.ids, std::vector<int32_t>(free_run.begin(), free_run.begin() + first_new));
  std::atomic<bool> cancel{true};
  o = greedy(12, false, 1.5f);
  o.cancel = &cancel;
  StandardEngine e(g.fwd, 0);
  try {  // set before the prompt: the prompt is abandoned within a layer
    generate(e, *g.fwd, g.tok, kPrompt, o, nullptr);
    ADD_FAILURE() << "not cancelled";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::Cancelled);
  }
  // A sink that fails (stdout closed) stops generation at that token.
  int calls = 0;
  StandardEngine e2(g.fwd, 0);
  EXPECT_THROW(generate(e2, *g.fwd, g.tok, kPrompt, greedy(12, false, 1.5f),
                        [&calls](std::string_view) {
                          ++calls;
                          throw Error(ErrorKind::Io, "writing to stdout failed");
                        }),
               Error);
  EXPECT_EQ(calls, 1);
  EXPECT_LE(e2.n_past(), static_cast<int64_t>(kPrompt.size()));  // nothing decoded after the failure
}

TEST(StopTextStream, HoldsBackWhatMayStartAStopAndCutsAcrossTokens) {
  Gen g;
  auto byte = [](char c) { return static_cast<int32_t>(6 + static_cast<unsigned char>(c)); };  // <0xNN> tokens
  // Stop "cd" spans the tokens 'c' and 'd': "ab" is emitted, "c" held, then the stop cuts it.
  StopTextStream s(g.tok, {"cd", ""});
  EXPECT_EQ(s.push(byte('a')), "a");
  EXPECT_EQ(s.push(byte('b')), "b");
  EXPECT_EQ(s.push(byte('c')), "");  // could be the start of "cd"
  EXPECT_EQ(s.push(byte('d')), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.push(byte('e')), "");
  EXPECT_EQ(s.finish(), "");
  // A held "c" that turns out not to start the stop is released with the next token.
  StopTextStream t(g.tok, {"cd"});
  EXPECT_EQ(t.push(byte('c')), "");
  EXPECT_EQ(t.push(byte('x')), "cx");
  EXPECT_EQ(t.push(byte('c')), "");
  EXPECT_EQ(t.finish(), "c");  // the end of generation releases it
  EXPECT_FALSE(t.stopped());
  // A UTF-8 character split over byte tokens is held until complete ("é" = C3 A9).
  StopTextStream u(g.tok, {});
  EXPECT_EQ(u.push(6 + 0xC3), "");
  EXPECT_EQ(u.push(6 + 0xA9), "\xC3\xA9");
}

}  // namespace
}  // namespace larql
