// One parsing layer for numbers given as text: command-line flags, engine spec keys, request
// fields. Range-checked and overflow-checked; the message names the value's owner and its range.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace larql {

/// A closed or half-open interval of doubles, e.g. (0, 1] for top-p.
struct FloatRange {
  double lo = -std::numeric_limits<double>::max();
  double hi = std::numeric_limits<double>::max();
  bool lo_open = false;
  bool hi_open = false;
  bool contains(double v) const;
  std::string to_string() const;  ///< "(0, 1]"
};

/// "[lo, hi]" with thousands separators for large values ("[1, 32,768]").
std::string int_range_text(int64_t lo, int64_t hi);

/// A decimal integer in [lo, hi]: optional sign, digits, nothing else (no "2^70", "1e3", "12abc").
/// Errors: Error{InvalidArgument} "<what> must be an integer in [lo, hi], got '<text>'" (also on
/// overflow of 64 bits).
int64_t parse_int(std::string_view text, int64_t lo, int64_t hi, const std::string& what);

/// A decimal integer in [0, 2^64 - 1] (seeds). Errors as parse_int.
uint64_t parse_uint64(std::string_view text, const std::string& what);

/// A finite decimal or scientific number inside `range` ("inf", "nan", "1e400" are refused).
/// Errors: Error{InvalidArgument} "<what> must be a number in <range>, got '<text>'".
double parse_float(std::string_view text, const FloatRange& range, const std::string& what);

}  // namespace larql
