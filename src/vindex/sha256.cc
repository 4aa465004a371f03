#include "vindex/sha256.h"

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include "util/error.h"

namespace larql::vindex {

namespace {

struct CtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_MD_CTX, CtxDeleter>;

Ctx new_ctx() {
  Ctx c(EVP_MD_CTX_new());
  if (!c || EVP_DigestInit_ex(c.get(), EVP_sha256(), nullptr) != 1)
    throw Error(ErrorKind::BackendFailure, "sha256: OpenSSL could not start a SHA-256 digest");
  return c;
}

std::string finish(EVP_MD_CTX* c) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(c, md, &len) != 1) throw Error(ErrorKind::BackendFailure, "sha256: OpenSSL could not finish the digest");
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

}  // namespace

std::string sha256_hex(const void* data, size_t n) {
  Ctx c = new_ctx();
  if (EVP_DigestUpdate(c.get(), data, n) != 1) throw Error(ErrorKind::BackendFailure, "sha256: digest update failed");
  return finish(c.get());
}

std::string sha256_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw Error(e == ENOENT ? ErrorKind::NotFound : ErrorKind::Io, path + ": cannot open: " + std::strerror(e));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  Ctx c = new_ctx();
  std::vector<unsigned char> buf(1 << 20);
  for (;;) {
    const ssize_t got = ::read(fd, buf.data(), buf.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorKind::Io, path + ": read failed: " + std::strerror(errno));
    }
    if (got == 0) break;
    if (EVP_DigestUpdate(c.get(), buf.data(), static_cast<size_t>(got)) != 1)
      throw Error(ErrorKind::BackendFailure, "sha256: digest update failed");
  }
  return finish(c.get());
}

}  // namespace larql::vindex
