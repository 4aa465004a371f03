#include "shard/walk_ffn.h"

#include <string>

#include "inference/ffn.h"
#include "util/error.h"

namespace larql::shard {

void check_row_count(uint64_t n, int64_t max_rows, const char* what) {
  if (n == 0 || n > static_cast<uint64_t>(max_rows))
    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": " + std::to_string(n) + " rows; a call carries 1 to " +
                                                std::to_string(max_rows));
}

void check_walk_ffn_layer(Forward& f, int64_t layer, const char* what) {
  const int64_t n_layers = f.config().n_layers;
  if (layer < 0 || layer >= n_layers)
    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": layer " + std::to_string(layer) + " is past the model's " +
                                                std::to_string(n_layers) + " layers");
  if (!f.ffn_replaced(layer)) require_ffn_weights(f.model(), layer);
}

void walk_ffn(Forward& f, int64_t layer, const float* h, int64_t n, int64_t max_rows, float* out, const char* what) {
  check_walk_ffn_layer(f, layer, what);
  check_row_count(static_cast<uint64_t>(n), max_rows, what);
  f.ffn(layer).run(f, layer, h, n, out);
}

}  // namespace larql::shard
