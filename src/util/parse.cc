#include "util/parse.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "util/error.h"

namespace larql {
namespace {

std::string with_commas(int64_t v) {
  std::string d = std::to_string(v < 0 ? -(v + 1) : v);  // no overflow at INT64_MIN
  if (v < 0) {                                           // add the 1 back on the digits
    int i = static_cast<int>(d.size()) - 1;
    while (i >= 0 && d[static_cast<size_t>(i)] == '9') d[static_cast<size_t>(i--)] = '0';
    if (i < 0) d.insert(d.begin(), '1');
    else ++d[static_cast<size_t>(i)];
  }
  std::string out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0 && (d.size() - i) % 3 == 0) out += ',';
    out += d[i];
  }
  if (v < 0) out.insert(out.begin(), '-');
  return out;
}

std::string num_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

bool FloatRange::contains(double v) const {
  if (!std::isfinite(v)) return false;
  if (lo_open ? v <= lo : v < lo) return false;
  if (hi_open ? v >= hi : v > hi) return false;
  return true;
}

std::string FloatRange::to_string() const {
  const bool no_lo = lo <= -std::numeric_limits<double>::max(), no_hi = hi >= std::numeric_limits<double>::max();
  return std::string(lo_open || no_lo ? "(" : "[") + (no_lo ? "-inf" : num_text(lo)) + ", " +
         (no_hi ? "inf" : num_text(hi)) + (hi_open || no_hi ? ")" : "]");
}

std::string int_range_text(int64_t lo, int64_t hi) {
  std::string s = "[";
  s += with_commas(lo);
  s += ", ";
  s += with_commas(hi);
  s += "]";
  return s;
}

int64_t parse_int(std::string_view text, int64_t lo, int64_t hi, const std::string& what) {
  std::string_view t = text;
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size() || v < lo || v > hi)
    throw Error(ErrorKind::InvalidArgument,
                what + " must be an integer in " + int_range_text(lo, hi) + ", got '" + std::string(text) + "'");
  return v;
}

uint64_t parse_uint64(std::string_view text, const std::string& what) {
  std::string_view t = text;
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size())
    throw Error(ErrorKind::InvalidArgument,
                what + " must be an integer in [0, 18,446,744,073,709,551,615], got '" + std::string(text) + "'");
  return v;
}

double parse_float(std::string_view text, const FloatRange& range, const std::string& what) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
  const bool syntax_ok = !s.empty() && end == s.c_str() + s.size() && errno != ERANGE &&
                         s.find_first_of("xXpP") == std::string::npos;  // decimal only, no hex floats
  if (!syntax_ok || !range.contains(v))
    throw Error(ErrorKind::InvalidArgument,
                what + " must be a number in " + range.to_string() + ", got '" + s + "'");
  return v;
}

}  // namespace larql
