// larql — the one error type used across module boundaries.
#pragma once

#include <stdexcept>
#include <string>

namespace larql {

/// What went wrong, coarsely; the message says exactly what and where.
/// The engine kinds (EmptyPrompt .. BackendFailure) follow docs/engines.md "Errors".
enum class ErrorKind {
  InvalidArgument,     ///< a flag, spec string or API argument is out of range
  Usage,               ///< a command-line value found out of range after parsing (CLI exit 2)
  NotFound,            ///< a file, tensor, key or model name does not exist
  Io,                  ///< the OS refused a read/write/mmap
  Format,              ///< a file is malformed (names the field and byte offset)
  Unsupported,         ///< well-formed but not something we implement (dtype, architecture)
  ContextOverflow,     ///< more tokens than the context holds
  EmptyPrompt,         ///< engine: prefill with no tokens (recoverable)
  BackendUnavailable,  ///< engine: cannot serve this architecture/device (recoverable)
  RetrievalMiss,       ///< engine: retrieval found nothing (recoverable)
  InvariantViolation,  ///< engine: decode before prefill, state from another model, ...
  BackendFailure,      ///< engine: internal failure with details
  Cancelled,           ///< the caller cancelled the work (Ctrl-C, a client that left)
};

/// Stable lower-case name of a kind, e.g. "format".
const char* error_kind_name(ErrorKind kind);

/// The project's exception. what() is the full message.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace larql
