#include "lql/script.h"

namespace larql::lql {

bool is_blank(std::string_view t) {
  size_t i = 0;
  while (i < t.size()) {
    if (t[i] == '-' && i + 1 < t.size() && t[i + 1] == '-') {
      while (i < t.size() && t[i] != '\n') ++i;
    } else if (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r') {
      ++i;
    } else {
      return false;
    }
  }
  return true;
}

std::vector<Chunk> split_statements(std::string_view src, std::string* rest) {
  std::vector<Chunk> out;
  size_t start = 0;
  Pos start_pos, pos;
  char quote = 0;
  auto advance = [&](char c) {
    if (c == '\n') {
      ++pos.line;
      pos.col = 1;
    } else {
      ++pos.col;
    }
  };
  for (size_t i = 0; i < src.size(); ++i) {
    const char c = src[i];
    if (quote) {
      if (c == '\\' && i + 1 < src.size()) {
        advance(c);
        ++i;
        advance(src[i]);
        continue;
      }
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '-' && i + 1 < src.size() && src[i + 1] == '-') {
      while (i < src.size() && src[i] != '\n') advance(src[i++]);
      if (i < src.size()) advance(src[i]);
      continue;
    } else if (c == ';') {
      const std::string_view body = src.substr(start, i - start);
      if (!is_blank(body)) {
        Chunk ch;
        ch.pos = start_pos;
        ch.text.assign(static_cast<size_t>(start_pos.line - 1), '\n');
        ch.text.append(static_cast<size_t>(start_pos.col - 1), ' ');
        ch.text.append(body);
        out.push_back(std::move(ch));
      }
      advance(c);
      start = i + 1;
      start_pos = pos;
      continue;
    }
    advance(c);
  }
  if (rest) *rest = std::string(src.substr(start));
  return out;
}

}  // namespace larql::lql
