// The HTTP status of an engine or LQL error, one table for every route of `larql serve`
// (docs/server.md, "Routes" and "LQL over HTTP"): the request is at fault — 400 (a bad value), 404 (a
// thing that does not exist), 422 (well-formed but not something this build or this vindex can
// do, or a malformed file it names) — or the server is: 503 (the work was cancelled, e.g. a
// drain, or what it needs is unavailable, e.g. a shard), 500 (anything else).
#pragma once

#include "util/error.h"

namespace larql::server {

inline int http_status_of(ErrorKind k) {
  switch (k) {
    case ErrorKind::InvalidArgument:
    case ErrorKind::Usage:
    case ErrorKind::EmptyPrompt:
    case ErrorKind::ContextOverflow:
      return 400;
    case ErrorKind::NotFound:
      return 404;
    case ErrorKind::Unsupported:
    case ErrorKind::Format:
    case ErrorKind::RetrievalMiss:
      return 422;
    case ErrorKind::Cancelled:
    case ErrorKind::BackendUnavailable:  // e.g. a shard of a split model that does not answer
      return 503;
    default:
      return 500;
  }
}

}  // namespace larql::server
