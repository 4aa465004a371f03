// `POST /v1/walk-ffn` of `larql serve` (docs/server.md "Remote FFN"): the original LARQL's
// decoupled FFN call over HTTP — a layer's (or several layers') FFN on rows sent in the body, in
// JSON or its binary layout — computed by the same code as the shard's gRPC WalkFfn
// (shard/walk_ffn.h), so both wires refuse the same requests and give the same bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "server/http.h"

namespace larql::server {

/// Rows one walk-ffn request may carry (the shard's default --max-rows); the body limit
/// (--max-body) usually bounds a request first.
inline constexpr int64_t kWalkFfnMaxRows = 4096;

/// A decoded walk-ffn request.
struct WalkFfnRequest {
  std::vector<int64_t> layers;  ///< one or more layers, each run on the same rows
  bool batch = false;           ///< asked with `layers` (JSON) or the 0xFFFFFFFF marker (binary)
  int64_t seq_len = 0;          ///< rows
  std::vector<float> rows;      ///< [seq_len, hidden]: ffn_norm of the residual, row after row
  bool binary = false;          ///< the body was application/x-larql-ffn
};

/// Decode and check a request body for a model of `hidden` width and `n_layers` layers.
/// `content_type`: the request's Content-Type (exactly "application/x-larql-ffn" selects the
/// binary layout; another application/x-larql-ffn-... is refused; anything else is read as JSON,
/// as on every JSON route). Errors: Error{InvalidArgument} naming the field and what was wrong
/// (sizes, types, a missing layer, full_output false, moe_layer true); never anything else for
/// any bytes.
WalkFfnRequest parse_walk_ffn(const std::string& content_type, const std::string& body, int64_t hidden, int64_t n_layers);

/// The answer's encoding from the Accept header and the request: JSON unless the request was
/// binary or Accept names application/x-larql-ffn[-f16]; binary f16 when Accept names
/// application/x-larql-ffn-f16 (exact media types, not substrings).
enum class WalkFfnEncoding { Json, F32, F16 };
WalkFfnEncoding walk_ffn_encoding(const std::string& accept, bool request_binary);

/// Answer one request on a Forward of its own (a sibling of `runner`: its model, pool and FFNs,
/// so a router's walk-ffn runs on its shards). Bad bodies get 400 (415 for a binary content type
/// other than f32) in OpenAI's error envelope,
/// errors of the model the status of server/error_status.h (400 for a layer this process does not
/// hold, 503 for a shard down); never a crash.
void walk_ffn_route(const Forward& runner, const Request& req, Responder& r);

}  // namespace larql::server
