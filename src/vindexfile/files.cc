#include "vindexfile/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "util/atomic_file.h"
#include "util/error.h"
#include "vindex/sha256.h"
#include "vindexfile/build.h"

namespace larql::vindexfile {

namespace fs = std::filesystem;

std::string content_digest(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(ErrorKind::NotFound, path + " does not exist");
  if (!fs::is_directory(path, ec)) return vindex::sha256_file(path);
  std::vector<std::pair<std::string, fs::path>> files;
  for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file(ec)) files.emplace_back(it->path().lexically_relative(path).generic_string(), it->path());
  if (ec) throw Error(ErrorKind::Io, "cannot list " + path + ": " + ec.message());
  std::sort(files.begin(), files.end());
  std::string list;
  for (const auto& [rel, p] : files) {
    list += rel;
    list += '\0';
    list += vindex::sha256_file(p.string());
    list += '\n';
  }
  return vindex::sha256_hex(list.data(), list.size());
}

namespace detail {

std::string key_of(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) {
    s += std::to_string(p.size());
    s += ':';
    s += p;
  }
  return vindex::sha256_hex(s.data(), s.size());
}

void link_tree(const fs::path& from, const fs::path& to, const std::vector<std::string>& copy) {
  std::error_code ec;
  if (!fs::create_directory(to, ec)) throw Error(ErrorKind::Io, "cannot create " + to.string() + ": " + (ec ? ec.message() : "it exists"));
  std::vector<fs::path> names;
  for (const auto& e : fs::directory_iterator(from, ec)) {
    if (e.is_directory()) throw Error(ErrorKind::Format, from.string() + " holds a directory, " + e.path().filename().string() + "; a vindex is flat");
    if (e.is_regular_file()) names.push_back(e.path().filename());
  }
  if (ec) throw Error(ErrorKind::Io, "cannot list " + from.string() + ": " + ec.message());
  for (const auto& n : names) {
    const bool must_copy = std::find(copy.begin(), copy.end(), n.string()) != copy.end();
    if (!must_copy) {
      fs::create_hard_link(from / n, to / n, ec);
      if (!ec) continue;
    }
    ec.clear();
    fs::copy_file(from / n, to / n, fs::copy_options::overwrite_existing, ec);
    if (ec) throw Error(ErrorKind::Io, "cannot copy " + (from / n).string() + " to " + to.string() + ": " + ec.message());
    const int fd = ::open((to / n).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      const std::string why = std::strerror(errno);
      if (fd >= 0) ::close(fd);
      throw Error(ErrorKind::Io, "cannot fsync " + (to / n).string() + ": " + why);
    }
    ::close(fd);
  }
  fsync_directory(to.string());
}

DirLock::DirLock(const fs::path& dir) {
  const std::string p = (dir / ".lock").string();
  fd_ = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(ErrorKind::Io, "cannot open " + p + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK) throw Error(ErrorKind::Io, "another build is using the cache " + dir.string() + " (its lock " + p + " is held)");
    throw Error(ErrorKind::Io, "cannot lock " + p + ": " + std::strerror(err));
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

bool process_gone(long pid) { return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

long trailing_pid(const std::string& name, char sep) {
  const size_t at = name.rfind(sep);
  if (at == std::string::npos || at + 1 >= name.size()) return 0;
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + at + 1, &end, 10);
  return end != nullptr && *end == '\0' ? pid : 0;
}

}  // namespace detail
}  // namespace larql::vindexfile
