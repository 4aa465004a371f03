// Crash-safe output files, and the registry of files this process reads.
//
// Every file larql writes goes through AtomicWriter: the bytes go to a temporary file beside the
// target, which is fsynced and renamed over the target only when complete, so a crash, a kill
// or a full disk leaves either the old file or the whole new one, never a mix. A writer refuses
// a target that this process has opened as input (the model, a store, a corpus, a prompt file,
// a calibration record): inputs are registered by identity (device + inode), not by name, so a
// copy, a hard link or a symlink of an input is caught as well.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace larql {

/// Record that this process reads `path` as input. `what` names it in errors ("the model",
/// "the corpus"). Symlinks are followed; a path that does not exist is ignored. The file is held
/// open (one descriptor) until clear_inputs(), so its device + inode cannot be reused by a new
/// file while registered. Thread-safe.
void register_input(const std::string& path, const std::string& what);

/// What `path` is as a registered input ("the model"), or "" when it is not one.
std::string input_role(const std::string& path);

/// Forget every registered input (tests).
void clear_inputs();

/// Check up front that `path` can be written as an output named by `flag` (e.g. "--save-state"):
/// not a directory, not a registered input, its directory exists and accepts a new file (a probe
/// file is created and removed, so the OS reason is reported). Errors: Error{InvalidArgument}
/// (a directory, an input), Error{NotFound} (no such directory), Error{Io} (the OS refused, with
/// its reason).
void check_output_path(const std::string& path, const std::string& flag);

/// Writes a file atomically: temporary sibling, checked writes, fsync, rename, directory fsync.
/// A target that exists and is not a regular file (/dev/null, a pipe) is written directly.
/// The temporary sibling (`.<name>.tmp-XXXXXX`) is held under an exclusive flock(2) while the
/// writer lives, so the next writer to the same target removes the temporaries of writers
/// that were killed (remove_stale_temps) and leaves those of live ones alone.
/// Errors: those of check_output_path() at construction; Error{Io} naming the file and the OS
/// reason (ENOSPC, EIO, ...) from write() and commit(). The destructor removes the temporary
/// file unless commit() succeeded, leaving the target untouched.
class AtomicWriter {
 public:
  explicit AtomicWriter(const std::string& path, const std::string& flag = "output");
  ~AtomicWriter();
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  /// Make the file the target. No writes after this.
  void commit();
  /// As commit(), but never over an existing target: Error{InvalidArgument} "<path> already
  /// exists" (checked atomically by link(2), so a file that appeared since is kept too).
  void commit_new();
  /// Bytes written so far.
  uint64_t size() const { return written_; }
  const std::string& path() const { return target_; }

 private:
  void flush();
  void discard() noexcept;
  void commit_impl(bool replace);
  std::string target_;   ///< the path the file will have (symlinks resolved)
  std::string temp_;     ///< the temporary sibling ("" when writing directly)
  std::string flag_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t written_ = 0;
  std::vector<char> buf_;
};

/// Remove the temporary siblings of `path` (`.<name>.tmp-*`) that no live AtomicWriter holds
/// (flock is released when a process dies, even by kill -9). Returns how many were removed.
/// Best effort: entries that cannot be opened or removed are skipped. Temporaries of writers
/// older than this lock (or of another program) that are not locked are removed too.
size_t remove_stale_temps(const std::string& path);

/// Write `data` to `path` through an AtomicWriter.
void write_file_atomic(const std::string& path, std::string_view data, const std::string& flag = "output");

/// fsync a directory, so the entries created or renamed in it survive a crash. Best effort: a
/// directory that cannot be opened is skipped (the files in it were fsynced by their writers).
void fsync_directory(const std::string& dir);

/// Put a finished, fsynced staging directory at `target` (an extract's or a slice's output):
/// fsync `staging`; where `target` is a directory, exchange the two atomically (renameat2
/// RENAME_EXCHANGE), so a crash leaves the old directory or the new one at `target`, and remove
/// the old one (then at `staging`); where the file system has no exchange, move an existing
/// `target` aside to `<target>.old-<pid>`, rename `staging` to `target` and remove the old one
/// (a crash between the two renames leaves the old one at `.old-<pid>`). The parent is fsynced.
/// Errors: Error{Io} naming the rename that failed and the OS reason.
void replace_directory(const std::string& staging, const std::string& target);

}  // namespace larql
