// File helpers of the build (internal to vindexfile/): content digests, hard-linked copies of a
// vindex directory, the cache's lock and the staging directories of builds that died.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace larql::vindexfile::detail {

/// SHA-256 hex of `parts`, each preceded by its length (so no two lists collide by concatenation).
std::string key_of(const std::vector<std::string>& parts);

/// Put every regular file of the flat directory `from` into the new directory `to` (created):
/// a hard link, or a copy where linking fails (another file system); `copy` names files always
/// copied (a file the next step rewrites). Each copy is fsynced, then `to`. Errors: Error{Io}
/// naming the file and the OS reason; Error{Format} for a subdirectory (a vindex is flat).
void link_tree(const std::filesystem::path& from, const std::filesystem::path& to, const std::vector<std::string>& copy = {});

/// An exclusive lock on `dir`/.lock (flock) held while the object lives. Error{Io} "another build
/// is using DIR" when it is held, or naming the OS reason.
class DirLock {
 public:
  explicit DirLock(const std::filesystem::path& dir);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

/// Whether process `pid` is gone (a staging directory named after it is litter).
bool process_gone(long pid);
/// The pid a name ends with after `sep` ("x.partial-123" with '-' -> 123), or 0.
long trailing_pid(const std::string& name, char sep);

}  // namespace larql::vindexfile::detail
