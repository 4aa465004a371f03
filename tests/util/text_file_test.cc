#include "util/text_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "util/atomic_file.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace larql {
namespace {

fs::path temp_file(const std::string& name, const std::string& bytes) {
  const fs::path p = fs::temp_directory_path() / ("larql-text-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorKind::BackendFailure, "");
}

TEST(FirstNonTextByte, Rfc3629Cases) {
  EXPECT_EQ(first_non_text_byte("plain ascii\n"), std::string_view::npos);
  EXPECT_EQ(first_non_text_byte("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), std::string_view::npos);
  EXPECT_EQ(first_non_text_byte(std::string_view("ab\0c", 4)), 2u);
  EXPECT_EQ(first_non_text_byte("a\xc0\xaf"), 1u);          // overlong '/'
  EXPECT_EQ(first_non_text_byte("ab\xed\xa0\x80"), 2u);      // UTF-16 surrogate
  EXPECT_EQ(first_non_text_byte("\xf4\x90\x80\x80"), 0u);    // above U+10FFFF
  EXPECT_EQ(first_non_text_byte("xyz\xe2\x82"), 3u);         // truncated sequence
  EXPECT_EQ(first_non_text_byte("\xff"), 0u);
}

TEST(ReadTextFile, ReadsAndRegistersAsInput) {
  clear_inputs();
  const fs::path p = temp_file("ok.txt", "hello\nworld\n");
  EXPECT_EQ(read_text_file(p.string(), "the corpus"), "hello\nworld\n");
  EXPECT_EQ(input_role(p.string()), "the corpus");
  clear_inputs();
  fs::remove(p);
}

TEST(ReadTextFile, BinaryDirectoryDeviceAndTooLarge) {
  // An ELF-like binary (NUL bytes) is not text.
  const fs::path bin = temp_file("bin", std::string("\x7f" "ELF\x02\x01\x01\0\0\0", 10) + std::string(100000, '\0'));
  Error e = error_of([&] { read_text_file(bin.string(), "the document"); });
  EXPECT_EQ(e.kind(), ErrorKind::Format);
  EXPECT_NE(std::string(e.what()).find("not text"), std::string::npos) << e.what();
  fs::remove(bin);
  // /dev/zero would never end: the first block shows NUL bytes.
  e = error_of([] { read_text_file("/dev/zero", "the prompt file"); });
  EXPECT_NE(std::string(e.what()).find("not text"), std::string::npos) << e.what();
  e = error_of([] { read_text_file(fs::temp_directory_path().string(), "the corpus"); });
  EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  const fs::path big = temp_file("big.txt", std::string(3 << 20, 'a'));
  e = error_of([&] { read_text_file(big.string(), "the corpus", 1 << 20); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_NE(std::string(e.what()).find("--max-input-mb"), std::string::npos) << e.what();
  fs::remove(big);
  e = error_of([] { read_text_file("/nonexistent/larql.txt", "the corpus"); });
  EXPECT_EQ(e.kind(), ErrorKind::NotFound);
  const fs::path latin1 = temp_file("latin1.txt", "caf\xe9\n");
  e = error_of([&] { read_text_file(latin1.string(), "the prompt file"); });
  EXPECT_NE(std::string(e.what()).find("offset 3"), std::string::npos) << e.what();
  fs::remove(latin1);
}

}  // namespace
}  // namespace larql
