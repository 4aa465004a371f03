// libFuzzer target for the model readers the families added: the first byte picks one, the rest
// is its input — 0: config.json (config_from_hf_json, every family's record), 1: tokenizer.json
// (vocab_from_hf_tokenizer; when accepted, a Tokenizer is built and encodes and decodes a fixed
// text: the BPE and SentencePiece paths), 2: a GGUF file loaded as a model (GgufFile::parse,
// GgufSource::from_file — the generic config reader, the MoE and RoPE-factor keys, fused
// matrices — then Model::load's shape checks). The only acceptable failure is a larql::Error.
// Seeds: scripts/fuzz.sh prefixes the families' fixture files and the GGUF seeds. Run via
// scripts/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/gguf.h"
#include "model/gguf_source.h"
#include "model/hf_source.h"
#include "model/model.h"
#include "tokenizer/hf_json.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (data[0] % 3) {
      case 0:
        (void)larql::config_from_hf_json(text, "fuzz/config.json");
        break;
      case 1: {
        const larql::Tokenizer tok(larql::vocab_from_hf_tokenizer(text, ""));
        const auto ids = tok.encode("Hello, world! 12345 \xE4\xB8\xAD\xE6\x96\x87 <|im_start|>", true, true);
        (void)tok.decode(ids);
        break;
      }
      default: {
        auto source = larql::GgufSource::from_file(larql::GgufFile::parse(data + 1, size - 1, "fuzz.gguf"));
        (void)larql::Model::load(source);
        break;
      }
    }
  } catch (const larql::Error&) {
  }
  return 0;
}
