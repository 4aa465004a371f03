#include "util/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "util/atomic_file.h"
#include "util/error.h"

namespace larql {

size_t first_non_text_byte(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c == 0) return i;
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;  // no UTF-16 surrogates
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;  // <= U+10FFFF
    else return i;
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string read_text_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw Error(e == ENOENT ? ErrorKind::NotFound : ErrorKind::Io,
                path + ": cannot open " + what + ": " + std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorKind::Io, path + ": is a directory, not a text file (" + what + ")");
  }
  std::string out;
  if (S_ISREG(st.st_mode)) out.reserve(static_cast<size_t>(std::min<uint64_t>(st.st_size, max_bytes + 1)));
  char buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      throw Error(ErrorKind::Io, path + ": read failed: " + std::strerror(e));
    }
    if (r == 0) break;
    if (const void* nul = std::memchr(buf, 0, static_cast<size_t>(r))) {  // binary: stop early
      ::close(fd);
      throw Error(ErrorKind::Format, path + ": " + what + " is not text (a NUL byte at offset " +
                                         std::to_string(out.size() + (static_cast<const char*>(nul) - buf)) + ")");
    }
    out.append(buf, static_cast<size_t>(r));
    if (out.size() > max_bytes) {
      ::close(fd);
      throw Error(ErrorKind::InvalidArgument,
                  path + ": " + what + " is larger than the input limit of " + std::to_string(max_bytes >> 20) +
                      " MiB (raise it with --max-input-mb)");
    }
  }
  ::close(fd);
  if (const size_t bad = first_non_text_byte(out); bad != std::string_view::npos)
    throw Error(ErrorKind::Format, path + ": " + what + " is not UTF-8 text (" +
                                       (out[bad] == '\0' ? std::string("a NUL byte") : std::string("an invalid byte sequence")) +
                                       " at offset " + std::to_string(bad) + ")");
  register_input(path, what);
  return out;
}

}  // namespace larql
