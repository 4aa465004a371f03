#include "util/error.h"

namespace larql {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidArgument: return "invalid_argument";
    case ErrorKind::Usage: return "usage";
    case ErrorKind::NotFound: return "not_found";
    case ErrorKind::Io: return "io";
    case ErrorKind::Format: return "format";
    case ErrorKind::Unsupported: return "unsupported";
    case ErrorKind::ContextOverflow: return "context_overflow";
    case ErrorKind::EmptyPrompt: return "empty_prompt";
    case ErrorKind::BackendUnavailable: return "backend_unavailable";
    case ErrorKind::RetrievalMiss: return "retrieval_miss";
    case ErrorKind::InvariantViolation: return "invariant_violation";
    case ErrorKind::BackendFailure: return "backend_failure";
    case ErrorKind::Cancelled: return "cancelled";
  }
  return "unknown";
}

}  // namespace larql
