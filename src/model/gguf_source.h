// A weight source reading a llama.cpp GGUF file (format: formats/gguf.h). The architecture
// record of the file's general.architecture (model/arch.h) gives the config and the tensor
// names; a family's fused matrices (Phi-3's attn_qkv, ffn_up) are handed out split by role.
#pragma once

#include <memory>
#include <string>

#include "model/weight_source.h"

namespace larql {

class GgufFile;
struct ArchRecord;

class GgufSource final : public WeightSource {
 public:
  /// Map and parse `path`, read and validate the config (config_from_gguf), read the special
  /// ids and fingerprint the file. Errors: NotFound/Io (file), Format (bad GGUF or config),
  /// Unsupported (architecture).
  static std::shared_ptr<GgufSource> open(const std::string& path);
  /// The same over an already parsed file (tests: GgufFile::parse of a buffer).
  static std::shared_ptr<GgufSource> from_file(std::shared_ptr<const GgufFile> file);

  const std::string& path() const override;
  std::string format() const override;
  const ModelConfig& config() const override { return config_; }
  std::optional<SourceTensor> tensor(TensorRole role, int64_t layer = -1) const override;
  std::string tensor_name(TensorRole role, int64_t layer = -1) const override;
  std::vector<SourceTensor> tensors() const override;
  VocabData vocabulary() const override;
  const SpecialTokens& special_tokens() const override { return specials_; }
  std::vector<MetadataEntry> metadata() const override;
  uint64_t byte_size() const override;
  /// "xxh3-" + 16 hex digits of XXH3-64 over every byte of the file + "-" + its size in bytes.
  const std::string& fingerprint() const override { return fingerprint_; }

  /// The parsed file (its metadata verbatim: extract/gguf_export.h copies it).
  const GgufFile& file() const { return *file_; }

  GgufSource(std::shared_ptr<const GgufFile> file, const ArchRecord& arch, ModelConfig config);

 private:
  std::shared_ptr<const GgufFile> file_;
  const ArchRecord* arch_;
  ModelConfig config_;
  SpecialTokens specials_;
  std::string fingerprint_;
};

}  // namespace larql
