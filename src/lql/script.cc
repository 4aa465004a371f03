#include "lql/script.h"

#include "lql/lexer.h"

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

char open_quote(std::string_view t) {
  char quote = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '-' && i + 1 < t.size() && t[i + 1] == '-') {
      while (i < t.size() && t[i] != '\n') ++i;
    }
  }
  return quote;
}

std::string one_line(std::string_view t) {
  std::string out;
  char quote = 0;
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (quote) {
      if (c == '\n') out += "\\n";
      else if (c == '\r') out += "\\r";
      else out += c;
      if (c == '\\' && i + 1 < t.size() && t[i + 1] != '\n' && t[i + 1] != '\r') out += t[++i];
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
      out += c;
    } else if (c == '-' && i + 1 < t.size() && t[i + 1] == '-') {
      while (i + 1 < t.size() && t[i + 1] != '\n') ++i;  // the comment goes; its line break stays
    } else if (c == '\n' || c == '\r') {
      while (!out.empty() && (out.back() == ' ' || out.back() == '\t')) out.pop_back();
      size_t j = i + 1;
      while (j < t.size() && blank(t[j])) ++j;
      if (!out.empty() && j < t.size() && !(t[j] == '-' && j + 1 < t.size() && t[j + 1] == '-')) out += ' ';
      i = j - 1;
    } else {
      out += c;
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == '\t')) out.pop_back();
  return out;
}

namespace {
std::vector<Chunk> split_at_semicolons(std::string_view src, std::string* rest, Pos* rest_pos) {
  std::vector<Chunk> out;
  size_t start = 0;
  PosCounter pos;
  Pos start_pos;
  char quote = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    const char c = src[i];
    if (quote) {
      if (c == '\\' && i + 1 < src.size()) {
        pos.step(src, i);
        ++i;
        pos.step(src, i);
        continue;
      }
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '-' && i + 1 < src.size() && src[i + 1] == '-') {
      while (i < src.size() && src[i] != '\n') pos.step(src, i++);
      if (i < src.size()) pos.step(src, i);
      continue;
    } else if (c == ';') {
      // The statement's own text only: each chunk is as long as its statement, so a script of
      // N statements costs O(N) memory however long it is (positions come from ch.pos).
      const std::string_view body = src.substr(start, i - start);
      if (!is_blank(body)) out.push_back(Chunk{std::string(body), start_pos});
      pos.step(src, i);
      start = i + 1;
      start_pos = pos.pos();
      continue;
    }
    pos.step(src, i);
  }
  if (rest) *rest = std::string(src.substr(start));
  if (rest_pos) *rest_pos = start_pos;
  return out;
}
}  // namespace

std::vector<Chunk> split_statements(std::string_view src, std::string* rest) {
  return split_at_semicolons(src, rest, nullptr);
}

std::vector<Chunk> script_statements(std::string_view src) {
  std::string rest;
  Pos rest_pos;
  std::vector<Chunk> out = split_at_semicolons(src, &rest, &rest_pos);
  if (!is_blank(rest)) out.push_back(Chunk{std::move(rest), rest_pos});
  return out;
}

}  // namespace larql::lql
