// Read-only memory-mapped file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace larql {

/// A whole file mapped read-only. Move-only; unmaps on destruction.
/// Errors: Error{NotFound} if the path does not exist, Error{Io} if it cannot be opened/mapped.
class MappedFile {
 public:
  MappedFile() = default;
  static MappedFile open(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }  ///< bytes
  const std::string& path() const { return path_; }
  /// Drop the mapped pages from this process's memory (MADV_DONTNEED on the read-only mapping):
  /// they stay in the page cache and the next read faults them back in. After a pass over the
  /// whole file (a checksum) so that a process using part of it does not keep all of it resident.
  void release_pages() const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace larql
