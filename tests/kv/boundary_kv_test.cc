// The boundary-kv engine: logits identical to standard, one frame per chunk boundary (also
// inside one prefill), the gate's codec on each frame, state files, errors, and Resume from the
// archive alone (synthetic model; then the real model at 1,500 tokens).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "boundary/archive.h"
#include "boundary/codec.h"
#include "inference/forward.h"
#include "kv/boundary_kv.h"
#include "kv/registry.h"
#include "kv/standard.h"
#include "model/model.h"
#include "testlib/paths.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"
#include "testlib/engine_testing.h"

namespace larql {
namespace {

using testing::expect_error;

std::string temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("larql-bkvtest-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::create_directories(p);
  return p.string();
}

using testing::logits_of;

using testing::max_abs_diff;
using testing::pseudo_text;

struct Syn {
  Syn() : sm(testing::make_synthetic_model()), model(Model::load(sm->path)), fwd(std::make_shared<Forward>(model, 2)) {}
  std::unique_ptr<testing::SyntheticModel> sm;
  std::shared_ptr<Model> model;
  std::shared_ptr<Forward> fwd;
};

BoundaryKvOptions opts(const std::string& dir, int64_t chunk, const std::string& seq) {
  BoundaryKvOptions o;
  o.archive_dir = dir;
  o.chunk_tokens = chunk;
  o.sequence_id = seq;
  return o;
}

TEST(BoundaryKv, LogitsIdenticalToStandardAndOneFramePerChunk) {
  Syn s;
  const auto ids = pseudo_text(40, 6, 270, 99);
  const std::string dir = temp_dir("frames");
  BoundaryKvEngine e(s.fwd, opts(dir, 5, "seq1"));
  StandardEngine ref(s.fwd, 0);
  // Prefill 17 tokens crosses three boundaries (positions 4, 9, 14): each gets its frame.
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 17);
  EXPECT_EQ(max_abs_diff(logits_of(*s.fwd, e.prefill(prompt)), logits_of(*s.fwd, ref.prefill(prompt))), 0.0f);
  for (size_t t = 17; t < ids.size(); ++t)
    EXPECT_EQ(max_abs_diff(logits_of(*s.fwd, e.decode_step(ids[t])), logits_of(*s.fwd, ref.decode_step(ids[t]))), 0.0f) << t;
  const boundary::Archive a = boundary::archive_read(e.archive_path());
  EXPECT_EQ(a.header.fingerprint, s.model->fingerprint());
  EXPECT_EQ(a.header.hidden, 64u);
  ASSERT_EQ(a.frames.size(), 8u);  // 40 tokens / 5
  for (size_t i = 0; i < a.frames.size(); ++i) {
    EXPECT_EQ(a.frames[i].position, 5 * i + 4);
    EXPECT_EQ(a.frames[i].kind, boundary::FrameKind::Boundary);
  }
  EXPECT_EQ(a.tokens(), ids);
  EXPECT_EQ(e.stats().frames, 8);
  // Each frame's metadata and codec follow from that position's logits (recomputed here by a
  // standard prefill of the prefix) through the documented gate.
  for (size_t i : {size_t{0}, size_t{5}}) {
    const auto& f = a.frames[i];
    StandardEngine p(s.fwd, 0);
    const auto h = p.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + f.position + 1));
    const auto lg = logits_of(*s.fwd, h);
    const auto c = boundary::confidence_of(lg.data(), static_cast<int64_t>(lg.size()));
    EXPECT_EQ(f.top1_token, c.top1_token);
    EXPECT_FLOAT_EQ(f.log_prob_margin, c.log_prob_margin);
    EXPECT_FLOAT_EQ(f.top1_prob, c.top1_prob);
    std::vector<float> back(64);
    boundary::decode(f.codec, f.payload.data(), f.payload.size(), 64, back.data());
    if (f.codec == boundary::Codec::Bf16) {
      EXPECT_EQ(f.payload, boundary::encode(boundary::Codec::Bf16, h.data(), 64));
    } else {
      EXPECT_GE(c.top1_prob, 0.9f);
      EXPECT_GE(c.log_prob_margin, 2.0f);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(BoundaryKv, GateChoosesInt8WhenForcedConfident) {
  // force_eos makes <eos> dominate every position: confident, so frames are int8 (with the
  // agreement check on), and bf16 again when the gate's thresholds are out of reach.
  testing::SyntheticSpec spec;
  spec.force_eos = true;
  auto sm = testing::make_synthetic_model(spec);
  auto fwd = std::make_shared<Forward>(Model::load(sm->path), 1);
  const std::string dir = temp_dir("gate");
  const auto ids = pseudo_text(12, 6, 200, 5);
  BoundaryKvEngine e(fwd, opts(dir, 4, "conf"));
  e.prefill(ids);
  EXPECT_EQ(e.stats().frames, 3);
  EXPECT_EQ(e.stats().int8_frames, 3);
  for (const auto& f : boundary::archive_read(e.archive_path()).frames) {
    EXPECT_EQ(f.codec, boundary::Codec::Int8Clip3Sigma);
    EXPECT_EQ(f.top1_token, testing::kSynEos);
    EXPECT_EQ(f.payload.size(), 4u + 64u);
  }
  auto strict = opts(dir, 4, "strict");
  strict.gate.min_top1_prob = 1.01f;
  BoundaryKvEngine b(fwd, strict);
  b.prefill(ids);
  EXPECT_EQ(b.stats().bf16_frames, 3);
  std::filesystem::remove_all(dir);
}

TEST(BoundaryKv, ResumeFromArchiveContinuesIdentically) {
  Syn s;
  const auto ids = pseudo_text(30, 6, 270, 7);
  const std::string dir = temp_dir("resume"), dir2 = temp_dir("resume-copy");
  BoundaryKvEngine a(s.fwd, opts(dir, 4, "r"));
  a.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + 9));
  for (size_t t = 9; t < 19; ++t) a.decode_step(ids[t]);
  a.flush();  // 19 tokens: frames at 3, 7, 11, 15 + a flush frame at 18
  std::filesystem::copy_file(a.archive_path(), dir2 + "/r");
  // A fresh model object and engine, reading only the copied archive.
  auto fwd2 = std::make_shared<Forward>(Model::load(s.sm->path), 1);
  auto b = BoundaryKvEngine::resume(fwd2, opts(dir2, 4, "r"));
  EXPECT_EQ(b->n_past(), 19);
  EXPECT_EQ(max_abs_diff(logits_of(*fwd2, b->last_hidden()), logits_of(*s.fwd, a.last_hidden())), 0.0f);
  for (size_t t = 19; t < ids.size(); ++t)
    EXPECT_EQ(max_abs_diff(logits_of(*s.fwd, a.decode_step(ids[t])), logits_of(*fwd2, b->decode_step(ids[t]))), 0.0f) << t;
  // The resumed engine keeps archiving: both archives now describe the same 30 tokens.
  EXPECT_EQ(boundary::archive_read(dir2 + "/r").tokens(), std::vector<int32_t>(ids.begin(), ids.begin() + 28));
  // Another model's archive is refused; a tampered payload fails the replay check.
  boundary::archive_create(dir2 + "/other", {"not-this-model", "other", 1, 64});
  expect_error(ErrorKind::InvalidArgument, [&] { BoundaryKvEngine::resume(fwd2, opts(dir2, 4, "other")); }, "other model");
  auto arch = boundary::archive_read(dir + "/r");
  boundary::archive_create(dir2 + "/bad", {s.model->fingerprint(), "bad", 1, 64});
  arch.frames[1].payload[7] ^= 0x40;
  for (const auto& f : arch.frames) boundary::archive_append(dir2 + "/bad", f);
  expect_error(ErrorKind::InvariantViolation, [&] { BoundaryKvEngine::resume(fwd2, opts(dir2, 4, "bad")); }, "tampered");
  expect_error(ErrorKind::NotFound, [&] { BoundaryKvEngine::resume(fwd2, opts(dir2, 4, "missing")); }, "missing");
  std::filesystem::resize_file(dir + "/r", std::filesystem::file_size(dir + "/r") - 3);
  expect_error(ErrorKind::Format, [&] { BoundaryKvEngine::resume(fwd2, opts(dir, 4, "r")); }, "truncated");
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(dir2);
}

TEST(BoundaryKv, SaveLoadStateContinuesAndErrors) {
  Syn s;
  const auto ids = pseudo_text(24, 6, 270, 3);
  const std::string dir = temp_dir("state");
  const std::string state = dir + "/bkv.state";
  BoundaryKvEngine a(s.fwd, opts(dir, 4, "st"));
  expect_error(ErrorKind::EmptyPrompt, [&] { a.prefill({}); });
  expect_error(ErrorKind::InvariantViolation, [&] { a.decode_step(7); });
  expect_error(ErrorKind::InvariantViolation, [&] { a.save_state(state); });
  a.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + 10));  // frames at 3, 7; 8..9 pending
  a.save_state(state);
  BoundaryKvEngine b(s.fwd, opts(dir, 4, "st"));
  b.load_state(state);
  EXPECT_EQ(b.n_past(), 10);
  EXPECT_EQ(b.memory().hot_bytes, a.memory().hot_bytes);
  for (size_t t = 10; t < 14; ++t)  // b writes the frame at 11 with a's pending tokens 8..9
    EXPECT_EQ(max_abs_diff(logits_of(*s.fwd, a.decode_step(ids[t])), logits_of(*s.fwd, b.decode_step(ids[t]))), 0.0f);
  // Standard's file and another config are refused.
  StandardEngine st(s.fwd, 0);
  st.prefill({2, 100});
  st.save_state(dir + "/std.state");
  expect_error(ErrorKind::InvalidArgument, [&] { b.load_state(dir + "/std.state"); }, "standard's file");
  BoundaryKvEngine c(s.fwd, opts(dir, 8, "st"));
  expect_error(ErrorKind::InvalidArgument, [&] { c.load_state(state); }, "other chunk size");
  // Context overflow (synthetic context 64).
  BoundaryKvEngine d(s.fwd, opts(dir, 4, "ov"));
  expect_error(ErrorKind::ContextOverflow, [&] { d.prefill(pseudo_text(65, 6, 200, 1)); });
  std::filesystem::remove_all(dir);
}

TEST(BoundaryKv, RegistrySpecAndBadOptions) {
  Syn s;
  const std::string dir = temp_dir("reg");
  auto e = make_engine(parse_engine_spec("boundary:chunk_tokens=64,sequence_id=abc,archive_dir=" + dir), s.fwd);
  EXPECT_EQ(e->info().name, "boundary-kv");
  EXPECT_EQ(e->info().config, "chunk_tokens=64,sequence_id=abc");
  EXPECT_EQ(static_cast<BoundaryKvEngine*>(e.get())->archive_path(), dir + "/abc");
  expect_error(ErrorKind::InvalidArgument, [&] { parse_engine_spec("boundary-kv:chunk_tokens=0"); });
  expect_error(ErrorKind::InvalidArgument, [&] { parse_engine_spec("boundary-kv:archive=x"); });
  expect_error(ErrorKind::InvalidArgument, [&] { make_engine(parse_engine_spec("boundary_kv:sequence_id=../x"), s.fwd); });
  std::filesystem::remove_all(dir);
}

// Issue 9: engines read no environment variable. The archive directory is the spec's
// `archive_dir`, else ./larql-archive; $LARQL_ARCHIVE_DIR is the CLI's default for that key
// (tests/python/test_hardening_writes.py), which the engine itself ignores.
TEST(BoundaryKv, ArchiveDirComesFromTheSpecNotTheEnvironment) {
  Syn s;
  const std::string dir = temp_dir("env");
  ::setenv("LARQL_ARCHIVE_DIR", dir.c_str(), 1);
  auto e = make_engine(parse_engine_spec("boundary-kv:sequence_id=abc"), s.fwd);
  ::unsetenv("LARQL_ARCHIVE_DIR");
  EXPECT_EQ(static_cast<BoundaryKvEngine*>(e.get())->archive_path(), "./larql-archive/abc");
  std::filesystem::remove_all(dir);
}

// The contract on the real model: a sequence of 1,500 tokens (chunk 256: five boundary frames
// plus a flush frame) resumed by a new engine reading only the archive continues with logits
// identical to the uninterrupted run.
TEST(BoundaryKvRealModel, ResumeAt1500ContinuesWithIdenticalLogits) {
  LARQL_REQUIRE_MODEL(path);
  auto model = Model::load(path);
  auto fwd = std::make_shared<Forward>(model, 2);
  const auto ids = pseudo_text(1508, 300, 20000, 4242);
  const std::string dir = temp_dir("real"), dir2 = temp_dir("real-copy");
  BoundaryKvEngine a(fwd, opts(dir, 256, "long"));
  a.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + 1500));
  a.flush();
  EXPECT_EQ(a.stats().frames, 6);
  std::printf("[boundary-kv] 1500 tokens, chunk 256: %lld frames (%lld int8, %lld bf16), %zu payload bytes, archive %llu bytes\n",
              static_cast<long long>(a.stats().frames), static_cast<long long>(a.stats().int8_frames),
              static_cast<long long>(a.stats().bf16_frames), a.stats().payload_bytes,
              static_cast<unsigned long long>(std::filesystem::file_size(a.archive_path())));
  std::filesystem::copy_file(a.archive_path(), dir2 + "/long");
  auto b = BoundaryKvEngine::resume(std::make_shared<Forward>(Model::load(path), 2), opts(dir2, 256, "long"));
  ASSERT_EQ(b->n_past(), 1500);
  float worst = max_abs_diff(logits_of(*fwd, a.last_hidden()), logits_of(*fwd, b->last_hidden()));
  for (size_t t = 1500; t < ids.size(); ++t)
    worst = std::max(worst, max_abs_diff(logits_of(*fwd, a.decode_step(ids[t])), logits_of(*fwd, b->decode_step(ids[t]))));
  std::printf("[boundary-kv] resumed vs uninterrupted, 9 positions: max |dlogit| = %g\n", worst);
  EXPECT_LE(worst, 1e-5f);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(dir2);
}

}  // namespace
}  // namespace larql
