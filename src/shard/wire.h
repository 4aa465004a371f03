// Rows on the wire (shard.proto `Rows`): checked decoding and encoding, shared by the server and
// the client. Internal to src/shard/ (it names protobuf types).
#pragma once

#include <cstdint>
#include <string>

#include <grpcpp/grpcpp.h>

#include <larql/shard/v1/shard.pb.h>

namespace larql::shard::wire {

namespace pb = ::larql::shard::v1;

/// Check `r` is [n, width] with n in [1, max_rows] and exactly n * width values of its dtype, and
/// decode it into out (n * width floats; bf16 widened). Returns n. Errors: Error{InvalidArgument}
/// naming `what`, the sizes asked and the sizes given.
int64_t decode_rows(const pb::Rows& r, int64_t width, int64_t max_rows, const char* what, std::vector<float>& out);

/// r = [n, width] of x in `dtype` (f32 bit-exact; bf16 rounded to nearest even).
void encode_rows(const float* x, int64_t n, int64_t width, pb::DType dtype, pb::Rows* r);

/// A larql::Error (or any exception) as a gRPC status: InvalidArgument/Usage -> INVALID_ARGUMENT,
/// ContextOverflow -> OUT_OF_RANGE, Cancelled -> CANCELLED, NotFound -> NOT_FOUND, the rest
/// INTERNAL; the message kept.
grpc::Status to_status(const std::exception& e);

/// A gRPC status as a larql::Error naming the shard `who`: INVALID_ARGUMENT / OUT_OF_RANGE ->
/// InvalidArgument, CANCELLED -> Cancelled, INTERNAL / FAILED_PRECONDITION -> BackendFailure,
/// anything else (UNAVAILABLE, DEADLINE_EXCEEDED, ...) -> BackendUnavailable.
[[noreturn]] void throw_status(const grpc::Status& s, const std::string& who, const char* call);

/// What a shard is, as one string: its model's fingerprint and the part it holds. Requests carry
/// the one the client connected to (`expect`); a shard restarted on another file or part refuses
/// them (ABORTED) instead of answering for a model the client did not check.
std::string identity(const std::string& fingerprint, int64_t layer_begin, int64_t layer_end, int64_t expert_begin,
                     int64_t expert_end, bool attention, bool ffn);

/// Bytes a call may carry at most for rows of `width` f32 values (gRPC's message size limit).
int max_message_bytes(int64_t max_rows, int64_t width);

}  // namespace larql::shard::wire
