#include "kv/engine.h"

#include <algorithm>
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

int64_t max_sliding_window(const ModelConfig& c) {
  int64_t w = 0;
  for (const LayerConfig& l : c.layers)
    if (l.sliding) w = std::max(w, l.window);
  return w;
}

void check_engine_window(const std::string& engine, int64_t window, const ModelConfig& c) {
  const int64_t sw = max_sliding_window(c);
  if (window > 0 && window < sw)
    throw Error(ErrorKind::InvalidArgument,
                engine + ": window=" + std::to_string(window) + " is smaller than the model's sliding window (" +
                    std::to_string(sw) + " positions); the sliding layers would lose part of their own span. Use window >= " +
                    std::to_string(sw) + ", or no window");
}

}  // namespace larql
