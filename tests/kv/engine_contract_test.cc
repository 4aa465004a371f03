// The contract every engine shares (docs/engines.md "Interface", kv/engine.h), checked uniformly over the engines as
// `--engine` builds them, on the synthetic model: decode before prefill is InvariantViolation,
// an empty prompt is EmptyPrompt, save_state then load_state (into a fresh engine) continues with
// identical logits, and a state file from another engine is refused with InvalidArgument.
// (apollo needs a store and boundary-per-layer a calibration record: their own test files run
// the same checks, apollo_test.cc and boundary_per_layer_test.cc.)
// Each engine runs from both weight sources: the synthetic GGUF, and a vindex extracted from it
// once per suite (level inference, quant keep; docs/vindex-format.md); from the vindex, its
// prefill logits must also equal the same engine's on the GGUF.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "extract/extract.h"
#include "inference/forward.h"
#include "kv/registry.h"
#include "model/model.h"
#include "testlib/engine_testing.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"

namespace larql {
namespace {

using testing::expect_error;
using testing::logits_of;
using testing::max_abs_diff;

// (source, engine spec): source "gguf" or "vindex".
using ContractParam = std::tuple<const char*, const char*>;

class EngineContract : public ::testing::TestWithParam<ContractParam> {
 protected:
  static void SetUpTestSuite() {
    sm_ = testing::make_synthetic_model().release();
    dir_ = (std::filesystem::temp_directory_path() / ("larql-contract-" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(dir_);
    auto model = Model::load(sm_->path);
    gguf_ = std::make_shared<Forward>(model, 2);
    extract::ExtractOptions opt;
    opt.level = vindex::ExtractLevel::Inference;
    opt.down_top_k = 2;
    opt.threads = 2;
    extract::extract_vindex(*model, dir_ + "/synthetic.vindex", opt);
    vindex_ = std::make_shared<Forward>(Model::load(dir_ + "/synthetic.vindex"), 2);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(dir_);
    gguf_.reset();
    vindex_.reset();
    delete sm_;
  }
  void SetUp() override { fwd_ = std::string(std::get<0>(GetParam())) == "vindex" ? vindex_ : gguf_; }
  const char* spec() const { return std::get<1>(GetParam()); }
  std::unique_ptr<Engine> make() { return make_engine(testing::spec_with_files(spec(), dir_), fwd_); }

  static inline testing::SyntheticModel* sm_ = nullptr;
  static inline std::shared_ptr<Forward> gguf_, vindex_;
  static inline std::string dir_;
  std::shared_ptr<Forward> fwd_;
};

TEST_P(EngineContract, ErrorsSaveLoadAndForeignState) {
  const std::vector<int32_t> ids = {2, 270, 277, 7, 100, 271, 5, 4, 262, 200, 150, 265, 9, 31, 40, 41, 42, 43};
  auto e = make();
  expect_error(ErrorKind::InvariantViolation, [&] { e->decode_step(5); }, "decode before prefill");
  expect_error(ErrorKind::EmptyPrompt, [&] { e->prefill({}); }, "empty prompt");
  const std::vector<int32_t> prefix(ids.begin(), ids.begin() + 10);
  const std::vector<float> first = logits_of(*fwd_, e->prefill(prefix));
  if (fwd_ == vindex_) {  // the same engine on the GGUF the vindex came from: the same logits
    const std::string gdir = dir_ + "/gguf";
    std::filesystem::create_directories(gdir);
    auto g = make_engine(testing::spec_with_files(spec(), gdir), gguf_);
    EXPECT_EQ(max_abs_diff(first, logits_of(*gguf_, g->prefill(prefix))), 0.0f) << spec() << ": vindex vs GGUF";
  }
  for (size_t t = 10; t < 13; ++t) e->decode_step(ids[t]);
  const std::string state = dir_ + "/engine.state";
  e->save_state(state);
  auto resumed = make();
  resumed->load_state(state);
  EXPECT_EQ(resumed->n_past(), e->n_past());
  for (size_t t = 13; t < ids.size(); ++t)
    EXPECT_EQ(max_abs_diff(logits_of(*fwd_, e->decode_step(ids[t])), logits_of(*fwd_, resumed->decode_step(ids[t]))), 0.0f)
        << spec() << " step " << t;
  // A state from another engine.
  const std::string other_spec = std::string(spec()).rfind("standard", 0) == 0 ? "turbo-quant" : "standard";
  auto other = make_engine(parse_engine_spec(other_spec), fwd_);
  other->prefill(std::vector<int32_t>(ids.begin(), ids.begin() + 5));
  const std::string foreign = dir_ + "/foreign.state";
  other->save_state(foreign);
  auto fresh = make();
  expect_error(ErrorKind::InvalidArgument, [&] { fresh->load_state(foreign); }, "state of " + other_spec);
}

INSTANTIATE_TEST_SUITE_P(
    Ladder, EngineContract,
    ::testing::Combine(::testing::Values("gguf", "vindex"), ::testing::Values("standard", "standard:window=6", "standard:window=6,sink=0", "no-cache", "markov-rs", "markov-rs:window=4",
                      "markov-rs:window=4,cold_kv=derive", "markov-rs-codec:window=4",
                      "markov-rs-codec:window=4,codec=int8,cold_kv=derive", "turbo-quant", "tq3",
                      "unlimited-context:window=8", "unlimited-context:window=8,sink=0", "boundary-kv:chunk_tokens=8",
                      "boundary-kv:chunk_tokens=8,window=5")),
    [](const ::testing::TestParamInfo<ContractParam>& info) {
      std::string name = std::string(std::get<0>(info.param)) + "_";
      for (const char* p = std::get<1>(info.param); *p; ++p) name += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
      return name;
    });

}  // namespace
}  // namespace larql
