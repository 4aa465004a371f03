// Model config validation: a synthetic Gemma 3 file (tests/testlib/synthetic_model.h) rewritten
// with one metadata value out of its valid range must be refused at load, naming the GGUF key.
// The valid ranges are the published ones (ggml/llama.cpp's meaning of each key), not this
// code's output: an RMSNorm epsilon is a small positive number, a window at least one token, a
// RoPE base a positive finite number, heads divide evenly into KV groups, and so on.
#include "model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>

#include "formats/gguf.h"
#include "model/model.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"

namespace larql {
namespace {

using testing::make_synthetic_model;
using testing::SyntheticModel;
using testing::SyntheticSpec;

const SyntheticModel& base_model() {
  static const auto m = make_synthetic_model(SyntheticSpec{});
  return *m;
}

// Copy of `src` with metadata `key` set to `value` (removed when nullopt); tensors unchanged.
class Rewritten {
 public:
  Rewritten(const std::string& src, const std::string& key, std::optional<GgufValue> value) {
    static int counter = 0;
    path = (std::filesystem::path(::testing::TempDir()) /
            ("larql-config-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".gguf"))
               .string();
    auto f = GgufFile::open(src);
    GgufWriter w;
    for (size_t i = 0; i < f->metadata_count(); ++i) {
      const std::string k(f->metadata_key(i));
      if (k != key) w.set(k, f->metadata_value(i));
    }
    if (value) w.set(key, *value);
    for (const GgufTensor& t : f->tensors()) w.add_tensor(t.name, t.type, t.dims, t.data, t.nbytes);
    w.write(path);
  }
  ~Rewritten() { std::filesystem::remove(path); }
  std::string path;
};

// Loads `path` and expects Error{kind} whose message contains `needle`.
void expect_refused(const std::string& path, const std::string& needle, ErrorKind kind = ErrorKind::Format) {
  try {
    auto m = Model::load(path);
    ADD_FAILURE() << "loaded; expected an error containing: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

void expect_refused(const std::string& key, std::optional<GgufValue> v, const std::string& needle,
                    ErrorKind kind = ErrorKind::Format) {
  SCOPED_TRACE(key);
  Rewritten r(base_model().path, key, std::move(v));
  expect_refused(r.path, needle, kind);
}

GgufValue f32(double v) { return GgufValue::f32(static_cast<float>(v)); }
GgufValue u32(uint32_t v) { return GgufValue::u32(v); }
const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(ModelConfig, TheUnchangedSyntheticFileLoads) {
  Rewritten r(base_model().path, "general.name", GgufValue::str("copy"));
  auto m = Model::load(r.path);
  EXPECT_EQ(m->config().n_layers, 7);
  EXPECT_EQ(m->config().norm_eps, 1e-6f);
}

TEST(ModelConfig, RmsEpsilonOutsideZeroOne) {
  const std::string k = "gemma3.attention.layer_norm_rms_epsilon";
  expect_refused(k, f32(-1), k + " = -1 is outside (0, 1)");
  expect_refused(k, f32(0), k + " = 0 is outside (0, 1)");
  expect_refused(k, f32(1.5), k + " = 1.5 is outside (0, 1)");
  expect_refused(k, f32(kNaN), k + " = nan is outside (0, 1)");
  expect_refused(k, f32(kInf), k + " = inf is outside (0, 1)");
  expect_refused(k, GgufValue::str("1e-6"), "'" + k + "' has type string");
}

TEST(ModelConfig, SlidingWindowAtLeastOne) {
  const std::string k = "gemma3.attention.sliding_window";
  expect_refused(k, u32(0), k + " = 0 is outside [1, ");
  expect_refused(k, GgufValue::i32(-4), "'" + k + "' has type int32, expected a non-negative integer");
  expect_refused(k, GgufValue::u64(1ull << 40), k + " = 1099511627776 is outside [1, ");
}

TEST(ModelConfig, HeadCounts) {
  expect_refused("gemma3.attention.head_count", u32(0), "gemma3.attention.head_count = 0 is outside [1, ");
  expect_refused("gemma3.attention.head_count_kv", u32(0), "gemma3.attention.head_count_kv = 0 is outside [1, ");
  expect_refused("gemma3.attention.head_count_kv", u32(3),
                 "gemma3.attention.head_count = 4 is not a multiple of gemma3.attention.head_count_kv = 3");
  expect_refused("gemma3.attention.head_count_kv", u32(8),
                 "gemma3.attention.head_count = 4 is not a multiple of gemma3.attention.head_count_kv = 8");
  // More query heads than the tensors hold: the q projection's rows name both keys.
  expect_refused("gemma3.attention.head_count", u32(8),
                 "gemma3.attention.head_count x gemma3.attention.key_length = 8 x 16 but blk.0.attn_q.weight has "
                 "64 rows");
  expect_refused("gemma3.attention.head_count_kv", u32(2),
                 "gemma3.attention.head_count_kv x gemma3.attention.key_length = 2 x 16 but blk.0.attn_k.weight "
                 "has 16 rows");
}

TEST(ModelConfig, HeadDimMustBeEvenAndDerivableFromHidden) {
  // key_length 15 (value_length too, or the mismatch is refused first as unsupported).
  Rewritten odd(base_model().path, "gemma3.attention.key_length", u32(15));
  Rewritten odd2(odd.path, "gemma3.attention.value_length", u32(15));
  expect_refused(odd2.path, "gemma3.attention.key_length = 15 must be even and in [2, 1024]");
  expect_refused("gemma3.attention.value_length", u32(32), "gemma3.attention.value_length = 32 differs from",
                 ErrorKind::Unsupported);
  // Without key_length, head_dim = hidden / heads must divide: 64 / 3 does not.
  Rewritten no_k(base_model().path, "gemma3.attention.key_length", std::nullopt);
  Rewritten no_kv(no_k.path, "gemma3.attention.value_length", std::nullopt);
  Rewritten three(no_kv.path, "gemma3.attention.head_count", u32(3));
  expect_refused(three.path, "gemma3.embedding_length = 64 is not a multiple of gemma3.attention.head_count = 3");
}

TEST(ModelConfig, RopeBasesAndScaling) {
  for (const char* k : {"gemma3.rope.freq_base", "gemma3.rope.freq_base_swa"}) {
    expect_refused(k, f32(0), std::string(k) + " = 0 is outside (0, inf)");
    expect_refused(k, f32(-10000), std::string(k) + " = -10000 is outside (0, inf)");
    expect_refused(k, f32(kInf), std::string(k) + " = inf is outside (0, inf)");
    expect_refused(k, f32(kNaN), std::string(k) + " = nan is outside (0, inf)");
  }
  const std::string s = "gemma3.rope.scaling.factor";
  expect_refused(s, f32(0), s + " = 0 must be finite and > 0");
  expect_refused(s, f32(-8), s + " = -8 must be finite and > 0");
  expect_refused(s, f32(kInf), s + " = inf must be finite and > 0");
}

TEST(ModelConfig, SoftcapsFiniteAndNonNegative) {
  for (const char* k : {"gemma3.final_logit_softcapping", "gemma3.attn_logit_softcapping"}) {
    expect_refused(k, f32(-30), std::string(k) + " = -30 is outside [0, inf)");
    expect_refused(k, f32(kInf), std::string(k) + " = inf is outside [0, inf)");
    expect_refused(k, f32(kNaN), std::string(k) + " = nan is outside [0, inf)");
  }
}

TEST(ModelConfig, QueryPreAttnScalarPositive) {
  const std::string k = "gemma3.attention.query_pre_attn_scalar";
  expect_refused(k, f32(0), k + " = 0 must be finite and > 0");
  expect_refused(k, f32(-256), k + " = -256 must be finite and > 0");
}

TEST(ModelConfig, ContextLengthBounds) {
  const std::string k = "gemma3.context_length";
  expect_refused(k, u32(0), k + " = 0 is outside [1, 16777216]");
  expect_refused(k, u32(1u << 30), k + " = 1073741824 is outside [1, 16777216]");
}

TEST(ModelConfig, BlockCountMatchesTheTensors) {
  const std::string k = "gemma3.block_count";
  expect_refused(k, u32(0), k + " = 0 is outside [1, ");
  // Fewer blocks than the file holds: the rest would be silently skipped.
  expect_refused(k, u32(6), k + " = 6 but the file has tensor 'blk.6.");
  expect_refused(k, u32(1000000000), k + " = 1000000000 is more than the file's");
  expect_refused(k, u32(8), "tensor 'blk.7.attn_norm.weight' is missing");
}

TEST(ModelConfig, WidthsMatchTheTensors) {
  expect_refused("gemma3.embedding_length", u32(32),
                 "gemma3.embedding_length = 32 but token_embd.weight rows hold 64 values");
  expect_refused("gemma3.embedding_length", u32(0), "gemma3.embedding_length = 0 is outside [1, ");
  expect_refused("gemma3.feed_forward_length", u32(96),
                 "gemma3.feed_forward_length = 96 but blk.0.ffn_up.weight has 128 rows");
  expect_refused("gemma3.feed_forward_length", u32(0), "gemma3.feed_forward_length = 0 is outside [1, ");
}

TEST(ModelConfig, VocabularyMatchesTokenEmbd) {
  std::vector<std::string> tokens = base_model().tokens;
  const size_t n = tokens.size();
  tokens.push_back("extra");
  expect_refused("tokenizer.ggml.tokens", GgufValue::string_array(tokens),
                 "tokenizer.ggml.tokens has " + std::to_string(n + 1) + " entries but token_embd.weight has " +
                     std::to_string(n) + " rows");
  expect_refused("tokenizer.ggml.tokens", GgufValue::string_array({}), "tokenizer.ggml.tokens has 0 entries");
  expect_refused("tokenizer.ggml.tokens", std::nullopt, "required metadata key tokenizer.ggml.tokens is missing");
}

}  // namespace
}  // namespace larql
