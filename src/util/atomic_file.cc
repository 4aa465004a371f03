#include "util/atomic_file.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc 2.28)
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <utility>

#include "util/error.h"

namespace fs = std::filesystem;

namespace larql {
namespace {

std::mutex g_inputs_mu;
/// A registered input: its role in errors, and a descriptor held open so that the inode stays
/// allocated while registered — were the file deleted, a new file could otherwise get the same
/// device + inode and be mistaken for it (-1 when the file cannot be opened for reading).
struct Input {
  std::string role;
  int fd = -1;
};

std::map<std::pair<dev_t, ino_t>, Input>& inputs() {
  static std::map<std::pair<dev_t, ino_t>, Input> m;
  return m;
}

std::string os_reason(int e) { return std::strerror(e); }

std::string label(const std::string& flag, const std::string& path) {
  return flag.empty() ? path : flag + " " + path;
}

/// The file mode a new file gets from this process's umask (read without changing it).
mode_t new_file_mode() {
  mode_t mask = 022;
  std::ifstream st("/proc/self/status");
  std::string line;
  while (std::getline(st, line))
    if (line.rfind("Umask:", 0) == 0) mask = static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  return 0666 & ~mask;
}

/// The path to write: a symlink is followed so the link keeps pointing at the new file.
std::string resolve_target(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const fs::path p = fs::weakly_canonical(path, ec);
    if (!ec) return p.string();
  }
  return path;
}

std::string parent_dir(const std::string& path) {
  fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the rename itself succeeded
  ::fsync(fd);
  ::close(fd);
}

/// Checks shared by check_output_path() and the writer. Returns true when the target exists
/// and is not a regular file (written directly, not renamed over).
bool check_target(const std::string& target, const std::string& shown, const std::string& flag) {
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      throw Error(ErrorKind::InvalidArgument, label(flag, shown) + " is a directory; give a file name");
    {
      std::lock_guard<std::mutex> lock(g_inputs_mu);
      auto it = inputs().find({st.st_dev, st.st_ino});
      if (it != inputs().end())
        throw Error(ErrorKind::InvalidArgument,
                    label(flag, shown) + " is " + it->second.role + " this command reads; refusing to overwrite it");
    }
    if (!S_ISREG(st.st_mode)) return true;
  }
  const std::string dir = parent_dir(target);
  struct stat dst {};
  if (::stat(dir.c_str(), &dst) != 0 || !S_ISDIR(dst.st_mode))
    throw Error(ErrorKind::NotFound, label(flag, shown) + ": directory " + fs::absolute(dir).string() + " does not exist");
  return false;
}

std::string temp_template(const std::string& target) {
  const fs::path p(target);
  std::string name = ".";  // hidden, and never matching the target's own name
  name += p.filename().string();
  name += ".tmp-XXXXXX";
  return (fs::path(parent_dir(target)) / name).string();
}

}  // namespace

void register_input(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if ((fd >= 0 ? ::fstat(fd, &st) : ::stat(path.c_str(), &st)) != 0) {
    if (fd >= 0) ::close(fd);
    return;
  }
  std::lock_guard<std::mutex> lock(g_inputs_mu);
  const bool added = inputs().emplace(std::make_pair(st.st_dev, st.st_ino), Input{what, fd}).second;
  if (!added && fd >= 0) ::close(fd);  // already registered (and held)
}

std::string input_role(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  std::lock_guard<std::mutex> lock(g_inputs_mu);
  auto it = inputs().find({st.st_dev, st.st_ino});
  return it == inputs().end() ? "" : it->second.role;
}

void clear_inputs() {
  std::lock_guard<std::mutex> lock(g_inputs_mu);
  for (auto& [id, in] : inputs())
    if (in.fd >= 0) ::close(in.fd);
  inputs().clear();
}

void check_output_path(const std::string& path, const std::string& flag) {
  if (path.empty()) throw Error(ErrorKind::InvalidArgument, flag + " needs a file name");
  const std::string target = resolve_target(path);
  if (check_target(target, path, flag)) return;
  std::string probe = temp_template(target);
  const int fd = ::mkstemp(probe.data());
  if (fd < 0)
    throw Error(ErrorKind::Io, label(flag, path) + ": cannot create a file in " +
                                   fs::absolute(parent_dir(target)).string() + ": " + os_reason(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

AtomicWriter::AtomicWriter(const std::string& path, const std::string& flag) : flag_(flag) {
  if (path.empty()) throw Error(ErrorKind::InvalidArgument, flag + " needs a file name");
  target_ = resolve_target(path);
  remove_stale_temps(target_);
  if (check_target(target_, path, flag)) {  // a device or pipe: nothing to replace atomically
    fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) throw Error(ErrorKind::Io, label(flag, path) + ": cannot open for writing: " + os_reason(errno));
  } else {
    temp_ = temp_template(target_);
    fd_ = ::mkstemp(temp_.data());
    if (fd_ < 0)
      throw Error(ErrorKind::Io, label(flag, path) + ": cannot create a file in " +
                                     fs::absolute(parent_dir(target_)).string() + ": " + os_reason(errno));
    ::fcntl(fd_, F_SETFD, FD_CLOEXEC);
    ::flock(fd_, LOCK_EX | LOCK_NB);  // marks the temporary as live (remove_stale_temps)
    struct stat st {};
    const mode_t mode = ::stat(target_.c_str(), &st) == 0 ? (st.st_mode & 07777) : new_file_mode();
    ::fchmod(fd_, mode);
  }
  buf_.reserve(1 << 20);
}

AtomicWriter::~AtomicWriter() {
  if (!committed_) discard();
}

void AtomicWriter::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicWriter::flush() {
  size_t off = 0;
  while (off < buf_.size()) {
    const ssize_t w = ::write(fd_, buf_.data() + off, buf_.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      discard();
      throw Error(ErrorKind::Io, target_ + ": write failed: " + os_reason(e) +
                                     (temp_.empty() ? "" : " (the previous file, if any, is untouched)"));
    }
    off += static_cast<size_t>(w);
  }
  buf_.clear();
}

void AtomicWriter::write(const void* data, size_t n) {
  if (committed_ || fd_ < 0) throw Error(ErrorKind::InvariantViolation, target_ + ": write after commit or failure");
  const char* p = static_cast<const char*>(data);
  written_ += n;
  if (buf_.size() + n > buf_.capacity()) flush();
  if (n >= buf_.capacity()) {  // large block: write it straight from the caller's memory
    size_t off = 0;
    while (off < n) {
      const ssize_t w = ::write(fd_, p + off, n - off);
      if (w < 0) {
        if (errno == EINTR) continue;
        const int e = errno;
        discard();
        throw Error(ErrorKind::Io, target_ + ": write failed: " + os_reason(e) +
                                       (temp_.empty() ? "" : " (the previous file, if any, is untouched)"));
      }
      off += static_cast<size_t>(w);
    }
    return;
  }
  buf_.insert(buf_.end(), p, p + n);
}

void AtomicWriter::commit() { commit_impl(true); }
void AtomicWriter::commit_new() { commit_impl(false); }

void AtomicWriter::commit_impl(bool replace) {
  if (committed_ || fd_ < 0) throw Error(ErrorKind::InvariantViolation, target_ + ": commit twice or after a failure");
  flush();
  if (!temp_.empty() && ::fsync(fd_) != 0) {
    const int e = errno;
    discard();
    throw Error(ErrorKind::Io, target_ + ": fsync failed: " + os_reason(e));
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int e = errno;
    discard();
    throw Error(ErrorKind::Io, target_ + ": close failed: " + os_reason(e));
  }
  if (!temp_.empty()) {
    // Without replace: a hard link fails with EEXIST when the target exists (atomically, unlike
    // a check before rename), then the temporary name goes.
    const int rc = replace ? ::rename(temp_.c_str(), target_.c_str()) : ::link(temp_.c_str(), target_.c_str());
    if (rc != 0) {
      const int e = errno;
      discard();
      if (e == EEXIST) throw Error(ErrorKind::InvalidArgument, target_ + " already exists: not written over");
      throw Error(ErrorKind::Io, target_ + ": cannot rename the finished file into place: " + os_reason(e));
    }
    if (!replace) ::unlink(temp_.c_str());
    fsync_dir(parent_dir(target_));
  }
  committed_ = true;
}

size_t remove_stale_temps(const std::string& path) {
  const std::string target = resolve_target(path);
  const std::string prefix = "." + fs::path(target).filename().string() + ".tmp-";
  std::error_code ec;
  size_t removed = 0;
  for (fs::directory_iterator it(parent_dir(target), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0 || name.size() != prefix.size() + 6) continue;
    const int fd = ::open(it->path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        ::unlink(it->path().c_str()) == 0)
      ++removed;
    ::close(fd);
  }
  return removed;
}

void write_file_atomic(const std::string& path, std::string_view data, const std::string& flag) {
  AtomicWriter w(path, flag);
  w.write(data);
  w.commit();
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void replace_directory(const std::string& staging, const std::string& target) {
  fsync_directory(staging);
  std::error_code ec;
  std::string old;
  // Where the OS has it, one atomic exchange: `target` is the old directory or the new one at
  // every instant; the old one is then at `staging`, removed below.
  if (fs::is_directory(target, ec) &&
      ::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    const fs::path parent = fs::path(target).parent_path();
    fsync_directory(parent.empty() ? std::string(".") : parent.string());
    fs::remove_all(staging, ec);
    return;
  }
  if (fs::exists(target, ec)) {
    old = target + ".old-" + std::to_string(::getpid());
    fs::rename(target, old, ec);
    if (ec) throw Error(ErrorKind::Io, "cannot move the old " + target + " aside: " + ec.message());
  }
  fs::rename(staging, target, ec);
  if (ec) throw Error(ErrorKind::Io, "cannot rename " + staging + " to " + target + ": " + ec.message());
  const fs::path parent = fs::path(target).parent_path();
  fsync_directory(parent.empty() ? std::string(".") : parent.string());
  if (!old.empty()) fs::remove_all(old, ec);
}

}  // namespace larql
