// One ErrorKind -> HTTP status table for every route (server/error_status.h). Expected values:
// docs/server.md ("Routes", "LQL over HTTP"): 400 bad value, 404 missing, 422 well-formed but unsupported
// (or a malformed file), 503 cancelled or unavailable, 500 the rest. The generation routes once answered
// Unsupported with 400 while /v1/lql answered 422.
#include "server/error_status.h"

#include <gtest/gtest.h>

namespace larql::server {
namespace {

TEST(ErrorStatus, OneTableForEveryRoute) {
  EXPECT_EQ(http_status_of(ErrorKind::InvalidArgument), 400);
  EXPECT_EQ(http_status_of(ErrorKind::Usage), 400);
  EXPECT_EQ(http_status_of(ErrorKind::EmptyPrompt), 400);
  EXPECT_EQ(http_status_of(ErrorKind::ContextOverflow), 400);
  EXPECT_EQ(http_status_of(ErrorKind::NotFound), 404);
  EXPECT_EQ(http_status_of(ErrorKind::Unsupported), 422);
  EXPECT_EQ(http_status_of(ErrorKind::Format), 422);
  EXPECT_EQ(http_status_of(ErrorKind::RetrievalMiss), 422);
  EXPECT_EQ(http_status_of(ErrorKind::Cancelled), 503);
  EXPECT_EQ(http_status_of(ErrorKind::BackendUnavailable), 503);  // a shard that does not answer
  EXPECT_EQ(http_status_of(ErrorKind::Io), 500);
  EXPECT_EQ(http_status_of(ErrorKind::BackendFailure), 500);
  EXPECT_EQ(http_status_of(ErrorKind::InvariantViolation), 500);
}

}  // namespace
}  // namespace larql::server
