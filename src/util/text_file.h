// Bounded reads of text inputs (prompt files, documents, corpora).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace larql {

/// Default cap on one text input, bytes (CLI: --max-input-mb).
inline constexpr uint64_t kDefaultMaxInputBytes = uint64_t{64} << 20;

/// Offset of the first byte that makes `s` not UTF-8 text — a NUL byte or an invalid UTF-8
/// sequence (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF) — or npos.
size_t first_non_text_byte(std::string_view s);

/// Read a whole UTF-8 text file of at most `max_bytes` bytes and register it as an input
/// (`what`, e.g. "the prompt file": see util/atomic_file.h). Reads stop at max_bytes + 1, so a
/// device such as /dev/zero or an endless pipe cannot exhaust memory.
/// Errors: Error{NotFound} (no such file), Error{Io} (a directory; the OS refused, with its
/// reason), Error{InvalidArgument} (larger than max_bytes: says how to raise the limit),
/// Error{Format} (not text: names the offset of the first NUL or invalid UTF-8 byte).
std::string read_text_file(const std::string& path, const std::string& what,
                           uint64_t max_bytes = kDefaultMaxInputBytes);

}  // namespace larql
