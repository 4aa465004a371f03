// The GGUF weight source: tensors by role, the vocabulary, metadata and the whole-content
// fingerprint. Expected names are llama.cpp's (gguf-py TENSOR_NAMES); expected values are what the
// synthetic writer (tests/testlib/synthetic_model.h) put in the file.
#include "model/gguf_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

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

std::vector<char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A copy of the synthetic file with the byte at `at` XOR-ed with `mask` (0: an exact copy).
class Copy {
 public:
  Copy(size_t at, uint8_t mask) {
    static int counter = 0;
    path = (std::filesystem::path(::testing::TempDir()) /
            ("larql-source-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".gguf"))
               .string();
    std::vector<char> b = read_all(base_model().path);
    b.at(at) = static_cast<char>(static_cast<uint8_t>(b.at(at)) ^ mask);
    std::ofstream(path, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
  }
  ~Copy() { std::filesystem::remove(path); }
  std::string path;
};

// File offset of byte `i` of tensor `name`'s data.
size_t tensor_byte(const std::string& name, size_t i) {
  auto f = GgufFile::open(base_model().path);
  const GgufTensor* t = f->find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  EXPECT_LT(i, t->nbytes);
  return f->data_offset() + t->offset + i;
}

TEST(GgufSource, FingerprintCoversEveryWeightByte) {
  const std::string base = GgufSource::open(base_model().path)->fingerprint();
  {
    Copy same(0, 0);
    EXPECT_EQ(GgufSource::open(same.path)->fingerprint(), base);  // content, not the path
  }
  // One flipped low mantissa bit deep inside a tensor (past the first KiB that the old
  // fingerprint hashed), in the last layer's FFN and in the embedding's last byte.
  const auto& t = base_model().spec;
  for (const auto& [name, at] : std::vector<std::pair<std::string, size_t>>{
           {"blk." + std::to_string(t.n_layers - 1) + ".ffn_down.weight", 4 * 1000},
           {"token_embd.weight", static_cast<size_t>(base_model().vocab * t.hidden * 4 - 4)},
           {"blk.0.attn_q.weight", 0}}) {
    SCOPED_TRACE(name);
    Copy flipped(tensor_byte(name, at), 0x01);
    auto m = Model::load(flipped.path);  // still a valid model: only a weight changed
    EXPECT_NE(m->fingerprint(), base);
  }
}

TEST(GgufSource, TensorsByRoleUseLlamaCppNames) {
  auto s = GgufSource::open(base_model().path);
  EXPECT_EQ(s->config().arch, "gemma3");
  EXPECT_EQ(s->tensor_name(TensorRole::AttnQ, 3), "blk.3.attn_q.weight");
  EXPECT_EQ(s->tensor_name(TensorRole::PostFfnNorm, 0), "blk.0.post_ffw_norm.weight");
  EXPECT_EQ(s->tensor_name(TensorRole::TokenEmbd), "token_embd.weight");
  const auto q = s->tensor(TensorRole::AttnQ, 1);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->dims, (std::vector<uint64_t>{static_cast<uint64_t>(base_model().spec.hidden),
                                            static_cast<uint64_t>(base_model().spec.n_heads * base_model().spec.head_dim)}));
  EXPECT_EQ(q->type, DType::F32);
  EXPECT_FALSE(s->tensor(TensorRole::AttnQBias, 0).has_value());  // Gemma has none
  EXPECT_FALSE(s->tensor(TensorRole::Output).has_value());         // tied
  EXPECT_THROW(s->tensor(TensorRole::AttnQ, base_model().spec.n_layers), Error);
  EXPECT_THROW(s->tensor(TensorRole::TokenEmbd, 0), Error);
  EXPECT_EQ(s->tensors().size(), GgufFile::open(base_model().path)->tensors().size());
  EXPECT_EQ(s->byte_size(), std::filesystem::file_size(base_model().path));
}

TEST(GgufSource, VocabularySpecialsAndMetadata) {
  auto s = GgufSource::open(base_model().path);
  const VocabData v = s->vocabulary();
  EXPECT_EQ(v.tokens, base_model().tokens);
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.bos_id, testing::kSynBos);
  EXPECT_EQ(s->special_tokens().bos, testing::kSynBos);
  EXPECT_EQ(s->special_tokens().eos, testing::kSynEos);
  bool saw_arch = false, saw_tokens = false;
  for (const MetadataEntry& e : s->metadata()) {
    if (e.key == "general.architecture") {
      saw_arch = true;
      EXPECT_EQ(e.type, "str");
      EXPECT_EQ(e.value, "gemma3");
    }
    if (e.key == "tokenizer.ggml.tokens") {
      saw_tokens = true;
      EXPECT_EQ(e.type, "arr[str," + std::to_string(base_model().tokens.size()) + "]");
      EXPECT_EQ(e.value.rfind("[\"<pad>\", \"<eos>\"", 0), 0u) << e.value;
    }
  }
  EXPECT_TRUE(saw_arch);
  EXPECT_TRUE(saw_tokens);
}

TEST(GgufSource, ModelKeepsItsSourceAlive) {
  std::shared_ptr<Model> m;
  {
    auto s = GgufSource::open(base_model().path);
    m = Model::load(s);
  }
  EXPECT_EQ(m->source().config().n_layers, base_model().spec.n_layers);
  EXPECT_EQ(m->weights().token_embd.rows, base_model().vocab);
  EXPECT_EQ(m->path(), base_model().path);
}

}  // namespace
}  // namespace larql
