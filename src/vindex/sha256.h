// SHA-256 (FIPS 180-4) of files and buffers, through OpenSSL's EVP interface (libssl-dev): the
// checksums a vindex's index.json records for every file it holds.
#pragma once

#include <cstddef>
#include <string>

namespace larql::vindex {

/// Lower-case hex digest (64 characters) of n bytes.
std::string sha256_hex(const void* data, size_t n);

/// Lower-case hex digest of a whole file, read in 1 MiB pieces (memory stays at one piece).
/// Errors: Error{NotFound} if the file does not exist, Error{Io} if it cannot be read (with the
/// OS reason).
std::string sha256_file(const std::string& path);

}  // namespace larql::vindex
