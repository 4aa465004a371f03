#include "kv/engine.h"

#include <string>

#include "model/config.h"
#include "util/error.h"

namespace larql {

void check_context(int64_t tokens, const ModelConfig& c) {
  if (tokens > c.context_length)
    throw Error(ErrorKind::ContextOverflow, "sequence of " + std::to_string(tokens) +
                                                " tokens exceeds the context length of " +
                                                std::to_string(c.context_length));
}

}  // namespace larql
