// One WalkFfn call's checks and computation, shared by the shard's gRPC WalkFfn (server.cc) and
// `larql serve`'s HTTP POST /v1/walk-ffn (server/walk_ffn_route.h): whichever wire the rows came
// over, the same checks refuse the same requests and the same code computes the answer.
#pragma once

#include <cstdint>

#include "inference/forward.h"

namespace larql::shard {

/// Error{InvalidArgument} naming `what` unless 1 <= n <= max_rows ("WalkFfn rows: 0 rows; a call
/// carries 1 to 4096").
void check_row_count(uint64_t n, int64_t max_rows, const char* what);

/// Error{InvalidArgument} naming `what` unless `layer` is one of the model's layers whose FFN this
/// process can run: held here (require_ffn_weights) or set to run elsewhere (Forward::set_ffn, a
/// router's remote FFN).
void check_walk_ffn_layer(Forward& f, int64_t layer, const char* what);

/// out [n, hidden] = the FFN of `layer` on the rows h [n, hidden], which are ffn_norm of the
/// residual (Ffn::run's contract: the answer is the FFN's output before the post-FFN norm and the
/// residual add). Runs f's FFN for the layer (its own weights, or its shards). Checks first:
/// check_walk_ffn_layer, check_row_count. Rows are independent: any batch of rows gives each row
/// what it gives alone, bit for bit.
void walk_ffn(Forward& f, int64_t layer, const float* h, int64_t n, int64_t max_rows, float* out,
              const char* what = "WalkFfn");

}  // namespace larql::shard
