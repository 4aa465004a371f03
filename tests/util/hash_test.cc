#include "util/hash.h"

#include <gtest/gtest.h>

#include <string>

namespace larql {
namespace {

// Test vector from the xxHash reference (XXH3_64bits of the empty input, seed 0).
TEST(Xxh3, EmptyInputMatchesReferenceVector) { EXPECT_EQ(xxh3_64("", 0), 0x2D06800538D394C2ULL); }

TEST(Xxh3, StreamingEqualsOneShotAndDetectsOneBit) {
  std::string s(100000, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 31 + 7);
  Xxh3Stream st;
  for (size_t off = 0; off < s.size(); off += 777) st.update(s.data() + off, std::min<size_t>(777, s.size() - off));
  EXPECT_EQ(st.digest(), xxh3_64(s));
  std::string t = s;
  t[54321] ^= 0x10;
  EXPECT_NE(xxh3_64(t), xxh3_64(s));
  EXPECT_EQ(hex64(0x2D06800538D394C2ULL), "2d06800538d394c2");
}

}  // namespace
}  // namespace larql
