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

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace larql
