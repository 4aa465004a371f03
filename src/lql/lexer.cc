#include "lql/lexer.h"

#include <cctype>
#include <charconv>
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

std::vector<Token> lex(std::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  Pos p;
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n && i < s.size(); ++k, ++i) {
      if (s[i] == '\n') {
        ++p.line;
        p.col = 1;
      } else {
        ++p.col;
      }
    }
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
        if (r.ec != std::errc()) fail(p, "integer " + t.text + " does not fit in 64 bits");
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
        fail(p, std::string("unexpected character '") + c + "'");
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
