// GGUF export (extract/gguf_export.h) on the synthetic Gemma 3 model (tests/testlib/
// synthetic_model.h). Expected values: the synthetic file's own bytes and the hand-written spec,
// and for the metadata mapping llama.cpp's key names (llama-model.cpp LLM_ARCH_GEMMA3 /
// gguf-py Keys) with values derived by hand from the config.
#include "extract/gguf_export.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "model/gguf_source.h"
#include "model/model.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"

namespace larql {
namespace {

using testing::make_synthetic_model;
using testing::SyntheticSpec;

std::vector<char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string temp_path(const std::string& name) {
  static int counter = 0;
  return (std::filesystem::path(::testing::TempDir()) /
          ("larql-export-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + name))
      .string();
}

/// A source that is not a GgufSource (so the export builds its metadata from the config and
/// vocabulary, as for a vindex or Hugging Face directory), delegating to one.
class Wrapped final : public WeightSource {
 public:
  explicit Wrapped(std::shared_ptr<const WeightSource> s) : s_(std::move(s)) {}
  const std::string& path() const override { return s_->path(); }
  std::string format() const override { return "wrapped"; }
  const ModelConfig& config() const override { return s_->config(); }
  std::optional<SourceTensor> tensor(TensorRole r, int64_t l) const override { return s_->tensor(r, l); }
  std::string tensor_name(TensorRole r, int64_t l) const override { return s_->tensor_name(r, l); }
  std::vector<SourceTensor> tensors() const override { return s_->tensors(); }
  VocabData vocabulary() const override { return s_->vocabulary(); }
  const SpecialTokens& special_tokens() const override { return s_->special_tokens(); }
  std::vector<MetadataEntry> metadata() const override { return {}; }
  uint64_t byte_size() const override { return s_->byte_size(); }
  const std::string& fingerprint() const override { return s_->fingerprint(); }

 private:
  std::shared_ptr<const WeightSource> s_;
};

TEST(GgufExport, GgufSourceExportsToTheSameBytes) {
  auto m = make_synthetic_model(SyntheticSpec{});
  auto src = GgufSource::open(m->path);
  const std::string out = temp_path("copy.gguf");
  const auto r = extract::export_gguf(*src, out);
  EXPECT_TRUE(r.copied_metadata);
  EXPECT_EQ(read_all(out), read_all(m->path));
  std::filesystem::remove(out);
}

TEST(GgufExport, GeneratedMetadataReadsBackAsTheSameModel) {
  SyntheticSpec spec;
  spec.matrix_type = DType::Q8_0;
  spec.hidden = 64;
  auto m = make_synthetic_model(spec);
  auto gsrc = GgufSource::open(m->path);
  Wrapped src(gsrc);
  const std::string out = temp_path("gen.gguf");
  const auto r = extract::export_gguf(src, out);
  EXPECT_FALSE(r.copied_metadata);
  auto back = GgufSource::open(out);
  const ModelConfig &a = gsrc->config(), &b = back->config();
  EXPECT_EQ(b.arch, "gemma3");
  EXPECT_EQ(b.n_layers, spec.n_layers);
  EXPECT_EQ(b.hidden, spec.hidden);
  EXPECT_EQ(b.ffn, spec.ffn);
  EXPECT_EQ(b.n_heads, spec.n_heads);
  EXPECT_EQ(b.n_kv_heads, spec.n_kv_heads);
  EXPECT_EQ(b.head_dim, spec.head_dim);
  EXPECT_EQ(b.context_length, spec.context_length);
  EXPECT_EQ(b.vocab, m->vocab);
  EXPECT_EQ(b.norm_eps, spec.norm_eps);
  EXPECT_EQ(b.attn_scale, a.attn_scale);
  ASSERT_EQ(b.layers.size(), static_cast<size_t>(spec.n_layers));
  for (size_t i = 0; i < b.layers.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(b.layers[i].sliding, (i + 1) % 6 != 0);
    EXPECT_EQ(b.layers[i].window, b.layers[i].sliding ? spec.sliding_window : 0);
    EXPECT_EQ(b.layers[i].rope_base, b.layers[i].sliding ? 10000.0 : spec.rope_global);
    EXPECT_EQ(b.layers[i].rope_freq_scale, 1.0);
  }
  // Every tensor under llama.cpp's name with the source's type, dims and bytes.
  auto fa = GgufFile::open(m->path), fb = GgufFile::open(out);
  ASSERT_EQ(fb->tensors().size(), fa->tensors().size());
  for (const GgufTensor& t : fa->tensors()) {
    SCOPED_TRACE(t.name);
    const GgufTensor* u = fb->find_tensor(t.name);
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(u->type, t.type);
    EXPECT_EQ(u->dims, t.dims);
    ASSERT_EQ(u->nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp(u->data, t.data, t.nbytes), 0);
  }
  EXPECT_EQ(fb->get_uint("general.quantization_version"), 2u);
  EXPECT_EQ(back->vocabulary().tokens, gsrc->vocabulary().tokens);
  EXPECT_EQ(back->special_tokens().bos, gsrc->special_tokens().bos);
  std::filesystem::remove(out);
}

TEST(GgufExport, ConfigKeysForScaledRopeAndAnOddQueryScalar) {
  ModelConfig c;
  c.arch = "gemma3";
  c.name = "tiny";
  c.n_layers = 6;
  c.hidden = 32;
  c.ffn = 64;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 16;
  c.context_length = 128;
  c.norm_eps = 1e-5f;
  c.attn_scale = 1.0f / std::sqrt(128.0f);  // query_pre_attn_scalar 128, not head_dim
  c.layers.resize(6);
  for (int i = 0; i < 6; ++i) {
    auto& l = c.layers[i];
    l.sliding = (i + 1) % 6 != 0;
    l.window = l.sliding ? 8 : 0;
    l.rope_base = l.sliding ? 50000.0 : 1e6;
    l.rope_freq_scale = l.sliding ? 1.0 : 0.125;  // linear x8 on global layers
  }
  GgufWriter w;
  extract::config_to_gguf(c, w);
  const auto bytes = w.serialize();
  auto f = GgufFile::parse(bytes.data(), bytes.size());
  EXPECT_EQ(f->get_string("general.architecture"), "gemma3");
  EXPECT_EQ(f->get_string("general.name"), "tiny");
  EXPECT_EQ(f->get_uint("gemma3.block_count"), 6u);
  EXPECT_EQ(f->get_uint("gemma3.embedding_length"), 32u);
  EXPECT_EQ(f->get_uint("gemma3.feed_forward_length"), 64u);
  EXPECT_EQ(f->get_uint("gemma3.context_length"), 128u);
  EXPECT_EQ(f->get_uint("gemma3.attention.head_count"), 2u);
  EXPECT_EQ(f->get_uint("gemma3.attention.head_count_kv"), 1u);
  EXPECT_EQ(f->get_uint("gemma3.attention.key_length"), 16u);
  EXPECT_EQ(f->get_uint("gemma3.attention.value_length"), 16u);
  EXPECT_EQ(f->get_uint("gemma3.attention.sliding_window"), 8u);
  EXPECT_FLOAT_EQ(*f->get_float("gemma3.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(f->get_float("gemma3.rope.freq_base"), 1e6);
  EXPECT_EQ(f->get_float("gemma3.rope.freq_base_swa"), 50000.0);
  EXPECT_EQ(f->get_string("gemma3.rope.scaling.type"), "linear");
  EXPECT_EQ(f->get_float("gemma3.rope.scaling.factor"), 8.0);
  EXPECT_NEAR(*f->get_float("gemma3.attention.query_pre_attn_scalar"), 128.0, 1e-3);
  EXPECT_FALSE(f->find("gemma3.final_logit_softcapping"));

  c.arch = "mamba";
  GgufWriter w2;
  EXPECT_THROW(extract::config_to_gguf(c, w2), Error);
}

TEST(GgufExport, RefusesAnExistingOutputWithoutForceAndAMissingDirectory) {
  auto m = make_synthetic_model(SyntheticSpec{});
  auto src = GgufSource::open(m->path);
  const std::string out = temp_path("exists.gguf");
  std::ofstream(out) << "keep";
  try {
    extract::export_gguf(*src, out);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--force"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_all(out), std::vector<char>({'k', 'e', 'e', 'p'}));
  extract::ExportOptions opt;
  opt.force = true;
  extract::export_gguf(*src, out, opt);
  EXPECT_EQ(read_all(out), read_all(m->path));
  std::filesystem::remove(out);
  try {
    extract::export_gguf(*src, temp_path("no-such-dir") + "/x.gguf");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotFound) << e.what();
  }
  try {
    extract::export_gguf(*src, m->path, opt);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("refusing to overwrite"), std::string::npos) << e.what();
  }
}

TEST(GgufWriter, StreamedWriteEqualsSerialize) {
  std::vector<float> a(64, 1.5f), b(96, -2.0f);
  GgufWriter w(64);
  w.set("general.architecture", GgufValue::str("x"));
  w.add_tensor_view("a", DType::F32, {64}, a.data(), a.size() * 4);
  w.add_tensor("b", DType::F32, {32, 3}, b.data(), b.size() * 4);
  const std::string out = temp_path("stream.gguf");
  uint64_t last = 0, total = 0;
  w.write(out, [&](uint64_t done, uint64_t t) {
    EXPECT_GE(done, last);
    last = done;
    total = t;
  });
  const auto bytes = w.serialize();
  EXPECT_EQ(read_all(out), std::vector<char>(bytes.begin(), bytes.end()));
  EXPECT_EQ(total, bytes.size());
  EXPECT_EQ(last, bytes.size());
  EXPECT_EQ(w.file_size(), bytes.size());
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace larql
