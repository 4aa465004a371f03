// The library-level generation session (kv/session.h; issue 9, part 5): the request logic that
// `run`, `chat` and the coming server share. On the synthetic model (context 64, add_bos true):
// BOS on a new sequence only; a saved and resumed sequence continues exactly as an uninterrupted
// one (the expected ids come from one session that never stopped); refusals happen before any
// generation; restart() gives a new sequence equal to a fresh session's.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kv/session.h"
#include "model/model.h"
#include "testlib/engine_testing.h"
#include "testlib/synthetic_model.h"
#include "util/atomic_file.h"

namespace larql {
namespace {

using testing::expect_error;

class SessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sm_ = testing::make_synthetic_model().release();
    model_ = Model::load(sm_->path);
    fwd_ = std::make_shared<Forward>(model_, 2);
    tok_ = std::make_shared<const Tokenizer>(model_->source().vocabulary());
  }
  static void TearDownTestSuite() {
    tok_.reset();
    fwd_.reset();
    model_.reset();
    delete sm_;
  }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("larql-session-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static GenerateOptions greedy(int64_t n) {
    GenerateOptions o;
    o.max_tokens = n;
    o.sampler.temperature = 0;
    o.stop_at_eog = false;
    return o;
  }
  Session make(const std::string& spec, SessionOptions so = {}) { return Session(fwd_, tok_, parse_engine_spec(spec), so); }

  static inline testing::SyntheticModel* sm_ = nullptr;
  static inline std::shared_ptr<Model> model_;
  static inline std::shared_ptr<Forward> fwd_;
  static inline std::shared_ptr<const Tokenizer> tok_;
  std::filesystem::path dir_;
};

TEST_F(SessionTest, BosOnlyOnANewSequence) {
  Session s = make("standard");
  ASSERT_TRUE(s.starts_sequence());
  const auto first = s.encode("hello world");
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first.front(), testing::kSynBos);
  s.generate(first, greedy(2), nullptr);
  EXPECT_FALSE(s.starts_sequence());
  const auto more = s.encode("hello world");
  EXPECT_NE(more.front(), testing::kSynBos) << "a continued sequence already has its BOS";
  EXPECT_EQ(more.size() + 1, first.size());
  s.restart();
  EXPECT_EQ(s.encode("hello world"), first);
}

// The uninterrupted run is the expected value: prompt, 4 tokens, then " the cat" and 4 more in one
// session; the same split over two sessions joined by a state file gives the same ids.
TEST_F(SessionTest, SavedAndResumedContinuesAsAnUninterruptedSequence) {
  for (const char* spec : {"standard", "markov-rs:window=2", "turbo-quant"}) {
    SCOPED_TRACE(spec);
    const std::string state = (dir_ / (std::string("s-") + spec[0] + ".kv")).string();
    Session whole = make(spec);
    const auto a1 = whole.generate(whole.encode("hello world"), greedy(4), nullptr).ids;
    const auto a2 = whole.generate(whole.encode(" the cat"), greedy(4), nullptr).ids;

    SessionOptions save;
    save.save_state = state;
    Session first = make(spec, save);
    EXPECT_EQ(first.generate(first.encode("hello world"), greedy(4), nullptr).ids, a1);
    ASSERT_TRUE(std::filesystem::exists(state));
    SessionOptions resume;
    resume.resume = state;
    Session second = make(spec, resume);
    EXPECT_FALSE(second.starts_sequence());
    EXPECT_EQ(second.generate(second.encode(" the cat"), greedy(4), nullptr).ids, a2);
  }
}

TEST_F(SessionTest, AResumedSequenceAcceptsAnEmptyPromptANewOneDoesNot) {
  const std::string state = (dir_ / "s.kv").string();
  SessionOptions save;
  save.save_state = state;
  Session first = make("standard", save);
  first.generate(first.encode("hello"), greedy(2), nullptr);
  SessionOptions resume;
  resume.resume = state;
  Session second = make("standard", resume);
  EXPECT_TRUE(second.encode("").empty());
  EXPECT_EQ(second.generate({}, greedy(2), nullptr).ids.size(), 2u);
  Session fresh = make("standard");
  expect_error(ErrorKind::EmptyPrompt, [&] { fresh.check_prompt({}); }, "empty prompt, new sequence");
}

TEST_F(SessionTest, ContextIsClampedAndCheckedBeforeRunning) {
  SessionOptions so;
  so.context = 65;  // the synthetic model's context is 64
  expect_error(ErrorKind::InvalidArgument, [&] { make("standard", so); }, "context 65 > 64");
  so.context = -1;
  expect_error(ErrorKind::InvalidArgument, [&] { make("standard", so); }, "context -1");
  EXPECT_EQ(make("standard").context(), 64);
  so.context = 8;
  Session s = make("standard", so);
  EXPECT_EQ(s.context(), 8);
  const std::vector<int32_t> nine(9, testing::kSynFirstByte + 'a');
  expect_error(ErrorKind::ContextOverflow, [&] { s.generate(nine, greedy(1), nullptr); }, "9 tokens > 8");
  EXPECT_EQ(s.engine().n_past(), 0) << "refused before anything ran";
  const auto r = s.generate(std::vector<int32_t>(6, testing::kSynFirstByte + 'a'), greedy(10), nullptr);
  EXPECT_EQ(r.stop_reason, "context");
  EXPECT_GE(r.ids.size(), 2u);
  EXPECT_LE(r.ids.size(), 3u) << "positions 6 and 7 are the last the context holds";
  EXPECT_LE(s.engine().n_past(), 8);
}

TEST_F(SessionTest, SaveStateOntoAnInputIsRefusedBeforeGenerating) {
  const std::string input = (dir_ / "input.txt").string();
  { std::ofstream(input) << "keep me"; }
  register_input(input, "the prompt file");
  SessionOptions so;
  so.save_state = input;
  so.save_state_name = "--save-state";
  try {
    make("standard", so);
    ADD_FAILURE() << "accepted an input as --save-state";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("--save-state"), std::string::npos) << e.what();
  }
  std::stringstream ss;
  ss << std::ifstream(input).rdbuf();
  EXPECT_EQ(ss.str(), "keep me");
}

}  // namespace
}  // namespace larql
