#include "util/parse.h"

#include <gtest/gtest.h>

#include "util/error.h"

namespace larql {
namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(ParseInt, AcceptsInRangeDecimal) {
  EXPECT_EQ(parse_int("42", 0, 100, "-n"), 42);
  EXPECT_EQ(parse_int("+7", 0, 100, "-n"), 7);
  EXPECT_EQ(parse_int("-3", -5, 5, "x"), -3);
  EXPECT_EQ(parse_int("9223372036854775807", 0, INT64_MAX, "x"), INT64_MAX);
}

TEST(ParseInt, RefusesOverflowJunkAndRangeNamingTheFlag) {
  for (const char* bad : {"99999999999999999999999", "2^70", "1e3", "12abc", "", " 5", "0x10", "-1"}) {
    const std::string m = message_of([&] { parse_int(bad, 0, 32768, "--ctx-size"); });
    EXPECT_NE(m.find("--ctx-size"), std::string::npos) << bad;
    EXPECT_NE(m.find("[0, 32,768]"), std::string::npos) << m;
  }
  EXPECT_NE(message_of([] { parse_int("0", 1, 1024, "--threads"); }).find("got '0'"), std::string::npos);
}

TEST(ParseUint64, FullRangeAndOverflow) {
  EXPECT_EQ(parse_uint64("18446744073709551615", "--seed"), UINT64_MAX);
  EXPECT_EQ(parse_uint64("0", "--seed"), 0u);
  // 2^70 and a 23-digit number used to be accepted and collapsed to one seed.
  for (const char* bad : {"18446744073709551616", "1180591620717411303424", "99999999999999999999999", "-1", "2^70"})
    EXPECT_NE(message_of([&] { parse_uint64(bad, "--seed"); }).find("--seed"), std::string::npos) << bad;
}

TEST(ParseFloat, FiniteAndInsideTheRange) {
  const FloatRange top_p{0.0, 1.0, true, false};
  EXPECT_DOUBLE_EQ(parse_float("0.5", top_p, "--top-p"), 0.5);
  EXPECT_DOUBLE_EQ(parse_float("1", top_p, "--top-p"), 1.0);
  EXPECT_DOUBLE_EQ(parse_float("2.5e-1", top_p, "--top-p"), 0.25);
  for (const char* bad : {"0", "2", "inf", "nan", "-inf", "1e400", "0x1p-1", "", "abc", "0.5x"}) {
    const std::string m = message_of([&] { parse_float(bad, top_p, "--top-p"); });
    EXPECT_NE(m.find("(0, 1]"), std::string::npos) << bad << ": " << m;
  }
  const FloatRange budget{0.0, 100.0, true, false};
  EXPECT_NE(message_of([&] { parse_float("inf", budget, "--budget"); }).find("--budget"), std::string::npos);
}

TEST(IntRangeText, ThousandsSeparators) {
  EXPECT_EQ(int_range_text(1, 32768), "[1, 32,768]");
  EXPECT_EQ(int_range_text(-1000, 999), "[-1,000, 999]");
  EXPECT_EQ(int_range_text(INT64_MIN, INT64_MAX), "[-9,223,372,036,854,775,808, 9,223,372,036,854,775,807]");
}

}  // namespace
}  // namespace larql
