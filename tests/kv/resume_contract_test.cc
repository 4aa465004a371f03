// Issue 8, "resume = uninterrupted": for every engine of the registry, on the real model and real
// text, a sequence saved after k prompt tokens + 6 generated ones and resumed in a fresh engine
// continues with exactly the tokens the original process generates when it simply goes on — with
// greedy decoding + a repetition penalty and with seeded sampling, at k = 1, 300 and 513 (past
// the 512-token sliding window). The state file carries the token history (the penalty's window)
// and the sampler's random state; without them the resumed run differs (the penalty forgets the
// generated tokens, the random draws restart).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "kv/generate.h"
#include "kv/registry.h"
#include "model/model.h"
#include "testlib/paths.h"
#include "tokenizer/tokenizer.h"
#include "util/text_file.h"

namespace larql {
namespace {

struct RealText {
  std::shared_ptr<Model> model;
  std::shared_ptr<Forward> fwd;
  std::unique_ptr<Tokenizer> tok;
  std::vector<int32_t> ids;  ///< <bos> + the GPL-3 text used by the parity tests
};

RealText* real() {
  static RealText* r = [] {
    const std::string path = testing::default_model_path();
    if (path.empty()) return static_cast<RealText*>(nullptr);
    auto* x = new RealText;
    x->model = Model::load(path);
    x->fwd = std::make_shared<Forward>(x->model, 2);
    x->tok = std::make_unique<Tokenizer>(Tokenizer(x->model->source().vocabulary()));
    const std::string text =
        read_text_file(testing::source_dir() + "/tests/python/data/long_text_gpl3.txt", "the test text");
    x->ids = x->tok->encode(text, true, false);
    return x;
  }();
  return r;
}

GenerateOptions sampler_options(bool seeded, int64_t n) {
  GenerateOptions o;
  o.max_tokens = n;
  o.stop_at_eog = false;
  if (seeded) {
    o.sampler.temperature = 0.9f;
    o.sampler.seed = 20261130;
  } else {
    o.sampler.temperature = 0.0f;
  }
  o.sampler.repeat_penalty = 1.5f;
  o.sampler.repeat_last_n = 64;
  return o;
}

class ResumeContract : public ::testing::TestWithParam<std::string> {};

TEST_P(ResumeContract, SaveAtKThenResumeEqualsGoingOn) {
  RealText* r = real();
  if (r == nullptr) GTEST_SKIP() << "real model missing: run `make setup`";
  const std::string spec = GetParam();
  const std::string state = ::testing::TempDir() + "/larql-resume-" + std::to_string(::getpid()) + ".kv";
  // no-cache re-runs the whole sequence every step (O(n^2)); its state is the token list alone,
  // so the short prompt covers it.
  const std::vector<int> ks = spec == "no-cache" ? std::vector<int>{1} : std::vector<int>{1, 300, 513};
  const std::string after_prompt = state + ".prompt";
  for (int k : ks) {
    // The prompt's first k - 1 tokens are prefilled once and saved with the k-th pending (fed
    // first when a sequence continues), so both sampler settings share one prefill.
    const std::vector<int32_t> prompt(r->ids.begin(), r->ids.begin() + k);
    if (k > 1) {
      auto base = make_engine(parse_engine_spec(spec), r->fwd);
      generate(*base, *r->fwd, *r->tok, std::vector<int32_t>(prompt.begin(), prompt.end() - 1),
               sampler_options(false, 0), nullptr);
      base->session().history.push_back(prompt.back());
      base->save_state(after_prompt);
    }
    for (bool seeded : {false, true}) {
      SCOPED_TRACE(spec + " k=" + std::to_string(k) + (seeded ? " seeded" : " greedy+penalty"));
      auto original = make_engine(parse_engine_spec(spec), r->fwd);
      GenerateOptions first_opt = sampler_options(seeded, 6);
      GenerateResult first;
      if (k > 1) {
        original->load_state(after_prompt);
        first_opt.continue_sequence = true;
        first_opt.restore_rng = false;  // the prompt's state has no sampler yet: start from the seed
        first = generate(*original, *r->fwd, *r->tok, {}, first_opt, nullptr);
      } else {
        first = generate(*original, *r->fwd, *r->tok, prompt, first_opt, nullptr);
      }
      ASSERT_EQ(first.ids.size(), 6u);
      original->save_state(state);
      GenerateOptions more = sampler_options(seeded, 6);
      more.continue_sequence = true;
      const auto went_on = generate(*original, *r->fwd, *r->tok, {}, more, nullptr);
      auto resumed = make_engine(parse_engine_spec(spec), r->fwd);
      resumed->load_state(state);
      more.sampler.seed = 1;  // ignored: the saved random state continues
      const auto after_resume = generate(*resumed, *r->fwd, *r->tok, {}, more, nullptr);
      EXPECT_EQ(after_resume.ids, went_on.ids);
      EXPECT_TRUE(after_resume.notes.empty());
    }
  }
  std::remove(after_prompt.c_str());
  std::remove(state.c_str());
}

std::vector<std::string> registry_specs() {
  std::vector<std::string> out;
  for (const auto& e : engine_registry())
    if (e.name == "boundary-kv")
      out.push_back("boundary-kv:chunk_tokens=128,archive_dir=" + ::testing::TempDir() + "larql-resume-archive");
    else if (e.name != "apollo")  // apollo needs a store: tests/kv/apollo_test.cc
      out.push_back(e.name);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Registry, ResumeContract, ::testing::ValuesIn(registry_specs()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name;
                           for (char c : info.param) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

}  // namespace
}  // namespace larql
