// SHA-256 against the FIPS 180-2 / NIST example vectors.
#include "vindex/sha256.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "util/error.h"

namespace larql::vindex {
namespace {

TEST(Sha256Test, NistVectors) {
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex(two.data(), two.size()), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256Test, FileOfAMillionAsSpansReadPieces) {
  // FIPS 180-2 appendix B.3: one million 'a' (less than one 1 MiB read piece); then 3 MiB + 1
  // bytes (four pieces) against the one-buffer digest.
  const auto path = std::filesystem::temp_directory_path() / ("larql-sha-" + std::to_string(::getpid()));
  {
    std::ofstream f(path, std::ios::binary);
    f << std::string(1000000, 'a');
  }
  EXPECT_EQ(sha256_file(path.string()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  const std::string big(3u << 20, 'a');
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << big << "b";
  }
  const std::string with_b = big + "b";
  EXPECT_EQ(sha256_file(path.string()), sha256_hex(with_b.data(), with_b.size()));
  std::filesystem::remove(path);
  try {
    sha256_file(path.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotFound);
  }
}

}  // namespace
}  // namespace larql::vindex
