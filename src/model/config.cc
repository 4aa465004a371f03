#include "model/config.h"

#include "formats/gguf.h"
#include "util/error.h"

namespace larql {

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> kArchs = {"gemma3"};
  return kArchs;
}

ModelConfig config_from_gguf(const GgufFile& file) {
  const auto arch = file.get_string("general.architecture");
  if (!arch) throw Error(ErrorKind::Format, file.path() + ": metadata key general.architecture is missing");
  if (*arch == "gemma3") return gemma3_config_from_gguf(file);
  std::string list;
  for (const auto& a : supported_architectures()) list += (list.empty() ? "" : ", ") + a;
  throw Error(ErrorKind::Unsupported, file.path() + ": architecture '" + *arch +
                                          "' is not supported (supported: " + list + ")");
}

}  // namespace larql
