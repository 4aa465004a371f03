#include "lql/lexer.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "util/error.h"

namespace larql::lql {

std::string Token::describe() const {
  switch (kind) {
    case TokKind::End: return "end of input";
    case TokKind::String: return "string \"" + text + "\"";
    default: return "\"" + text + "\"";
  }
}

namespace {

[[noreturn]] void fail(const Pos& p, const std::string& what) {
  throw Error(ErrorKind::InvalidArgument, what + " at " + p.str());
}

}  // namespace

size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n = 0;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3;
  else if (c >= 0xF0 && c <= 0xF4) n = 4;
  else return 1;  // ASCII, a continuation byte, or a lead byte no valid sequence starts with
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((b(k) & 0xC0) != 0x80) return 1;
  // Overlong 3- and 4-byte forms, UTF-16 surrogates, above U+10FFFF.
  if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F) || (c == 0xF0 && b(1) < 0x90) ||
      (c == 0xF4 && b(1) > 0x8F))
    return 1;
  return n;
}

std::vector<Token> lex(std::string_view s, Pos start) {
  std::vector<Token> out;
  size_t i = 0;
  PosCounter counter(start);
  Pos p = start;
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n && i < s.size(); ++k, ++i) counter.step(s, i);
    p = counter.pos();
  };
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      advance(1);
      continue;
    }
    if (c == '-' && i + 1 < s.size() && s[i + 1] == '-') {
      while (i < s.size() && s[i] != '\n') advance(1);
      continue;
    }
    Token t;
    t.pos = p;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      t.kind = TokKind::Word;
      t.text = std::string(s.substr(i, j - i));
      advance(j - i);
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      bool is_float = false;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        is_float = true;
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      t.text = std::string(s.substr(i, j - i));
      if (is_float) {
        t.kind = TokKind::Float;
        t.number = std::strtod(t.text.c_str(), nullptr);
      } else {
        t.kind = TokKind::Integer;
        const auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), t.integer);
        if (r.ec != std::errc())
          fail(p, "integer " + t.text + " does not fit in a signed 64-bit integer (the largest is 9223372036854775807)");
        t.number = static_cast<double>(t.integer);
      }
      advance(j - i);
    } else if (c == '"' || c == '\'') {
      t.kind = TokKind::String;
      advance(1);
      bool closed = false;
      while (i < s.size()) {
        const char d = s[i];
        if (d == c) {
          advance(1);
          closed = true;
          break;
        }
        if (d == '\\') {
          if (i + 1 >= s.size()) break;
          const char e = s[i + 1];
          switch (e) {
            case '\\': t.text += '\\'; break;
            case '"': t.text += '"'; break;
            case '\'': t.text += '\''; break;
            case 'n': t.text += '\n'; break;
            case 't': t.text += '\t'; break;
            case 'r': t.text += '\r'; break;
            default: {
              Pos ep = p;
              fail(ep, std::string("unknown escape \\") + e + " in a string (use \\\\ \\\" \\' \\n \\t \\r)");
            }
          }
          advance(2);
          continue;
        }
        t.text += d;
        advance(1);
      }
      if (!closed) fail(t.pos, "unterminated string");
    } else {
      t.kind = TokKind::Punct;
      const std::string_view two = s.substr(i, 2);
      if (two == "|>" || two == "!=" || two == "<=" || two == ">=") {
        t.text = std::string(two);
        advance(2);
      } else if (std::string_view("*,;()=<>-").find(c) != std::string_view::npos) {
        t.text = std::string(1, c);
        advance(1);
      } else if (c == '|') {
        fail(p, "a lone '|' (the pipe is |>)");
      } else if (c == '!') {
        fail(p, "a lone '!' (not equal is !=)");
      } else {
        // The whole code point when it is valid UTF-8 (a terminal shows it), else the byte.
        const size_t n = utf8_sequence_length(s, i);
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02X", static_cast<unsigned>(static_cast<unsigned char>(c)));
        const bool shown = n > 1 || std::isprint(static_cast<unsigned char>(c));
        fail(p, "unexpected character '" + (shown ? std::string(s.substr(i, n)) : std::string(hex)) + "'");
      }
    }
    out.push_back(std::move(t));
  }
  Token end;
  end.pos = p;
  out.push_back(end);
  return out;
}

}  // namespace larql::lql
