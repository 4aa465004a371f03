// Wall-clock timestamps for files larql writes (index.json's extraction time, a patch's
// created_at).
#pragma once

#include <ctime>
#include <string>

namespace larql {

/// The current UTC time as ISO 8601, e.g. "2026-12-01T04:47:00Z" (second resolution).
inline std::string utc_timestamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace larql
