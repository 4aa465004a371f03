#include "shard/wire.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "shard/walk_ffn.h"
#include "util/error.h"
#include "util/half.h"

namespace larql::shard::wire {

int64_t decode_rows(const pb::Rows& r, int64_t width, int64_t max_rows, const char* what, std::vector<float>& out) {
  const uint64_t n = r.n(), w = r.width();
  check_row_count(n, max_rows, what);
  if (w != static_cast<uint64_t>(width))
    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": rows of width " + std::to_string(w) +
                                                "; this model's rows are " + std::to_string(width) + " wide");
  const uint64_t per = r.dtype() == pb::BF16 ? 2 : r.dtype() == pb::F32 ? 4 : 0;
  if (per == 0)
    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": unknown dtype " + std::to_string(r.dtype()));
  const uint64_t want = n * w * per;  // n <= max_rows (small), w = width: no overflow
  if (r.data().size() != want)
    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": " + std::to_string(r.data().size()) + " bytes for " +
                                                std::to_string(n) + " x " + std::to_string(w) + " " +
                                                (per == 2 ? "bf16" : "f32") + " values (" + std::to_string(want) +
                                                " expected)");
  out.resize(static_cast<size_t>(n * w));
  const char* p = r.data().data();
  if (per == 4) {
    std::memcpy(out.data(), p, static_cast<size_t>(want));  // little-endian hosts only (x86-64, arm64)
  } else {
    for (uint64_t i = 0; i < n * w; ++i) {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      out[static_cast<size_t>(i)] = bf16_to_f32(b);
    }
  }
  return static_cast<int64_t>(n);
}

void encode_rows(const float* x, int64_t n, int64_t width, pb::DType dtype, pb::Rows* r) {
  r->set_n(static_cast<uint32_t>(n));
  r->set_width(static_cast<uint32_t>(width));
  r->set_dtype(dtype);
  const size_t count = static_cast<size_t>(n * width);
  std::string* d = r->mutable_data();
  if (dtype == pb::BF16) {
    d->resize(count * 2);
    for (size_t i = 0; i < count; ++i) {
      const uint16_t b = f32_to_bf16(x[i]);
      std::memcpy(d->data() + 2 * i, &b, 2);
    }
  } else {
    d->assign(reinterpret_cast<const char*>(x), count * sizeof(float));
  }
}

grpc::Status to_status(const std::exception& e) {
  const auto* le = dynamic_cast<const Error*>(&e);
  if (le == nullptr) return grpc::Status(grpc::StatusCode::INTERNAL, e.what());
  switch (le->kind()) {
    case ErrorKind::InvalidArgument:
    case ErrorKind::Usage:
    case ErrorKind::EmptyPrompt:
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, e.what());
    case ErrorKind::ContextOverflow:
      return grpc::Status(grpc::StatusCode::OUT_OF_RANGE, e.what());
    case ErrorKind::Cancelled:
      return grpc::Status(grpc::StatusCode::CANCELLED, e.what());
    case ErrorKind::NotFound:
      return grpc::Status(grpc::StatusCode::NOT_FOUND, e.what());
    case ErrorKind::InvariantViolation:
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, e.what());
    case ErrorKind::Unsupported:  // a request for another shard (check_expect)
      return grpc::Status(grpc::StatusCode::ABORTED, e.what());
    default:
      return grpc::Status(grpc::StatusCode::INTERNAL, e.what());
  }
}

namespace {
const char* code_name(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    default: return "UNKNOWN";
  }
}
}  // namespace

void throw_status(const grpc::Status& s, const std::string& who, const char* call) {
  const std::string msg = "shard " + who + ": " + call + " failed: " + code_name(s.error_code()) + ": " + s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      throw Error(ErrorKind::InvalidArgument, msg);
    case grpc::StatusCode::CANCELLED:
      throw Error(ErrorKind::Cancelled, msg);
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::FAILED_PRECONDITION:
      throw Error(ErrorKind::BackendFailure, msg);
    default:  // UNAVAILABLE, DEADLINE_EXCEEDED, UNAUTHENTICATED, ...: the shard cannot be reached or used
      throw Error(ErrorKind::BackendUnavailable, msg);
  }
}

std::string identity(const std::string& fingerprint, int64_t layer_begin, int64_t layer_end, int64_t expert_begin,
                     int64_t expert_end, bool attention, bool ffn) {
  return fingerprint + "/layers " + std::to_string(layer_begin) + "-" + std::to_string(layer_end) + "/experts " +
         std::to_string(expert_begin) + "-" + std::to_string(expert_end) + (attention ? "/attention" : "") +
         (ffn ? "/ffn" : "");
}

int max_message_bytes(int64_t max_rows, int64_t width) {
  const int64_t b = max_rows * width * 4 + (1 << 20);
  return static_cast<int>(std::min<int64_t>(b, std::numeric_limits<int>::max()));
}

}  // namespace larql::shard::wire
