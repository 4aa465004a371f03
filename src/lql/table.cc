#include "lql/table.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <unicode/uchar.h>
#include <unicode/utf8.h>

namespace larql::lql {

int Table::column(const std::string& name) const {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i].name == name) return static_cast<int>(i);
  return -1;
}

const char* column_type_name(Column::Type t) {
  switch (t) {
    case Column::Type::Int: return "int";
    case Column::Type::Float: return "float";
    case Column::Type::Text: return "text";
    case Column::Type::List: return "list";
  }
  return "text";
}

std::string trim_blanks(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\n\r");
  if (b == std::string::npos) return s;
  const auto e = s.find_last_not_of(" \t\n\r");
  return s.substr(b, e - b + 1);
}

namespace {

// Valid UTF-8 with bad bytes as U+FFFD and control characters escaped.
std::string clean(const std::string& s, bool escape_controls) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (escape_controls && (c < 0x20 || c == 0x7f)) {
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c == '\r') out += "\\r";
        else {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02X", c);
          out += buf;
        }
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && len == 3) {
      unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
    }
    if (ok && len == 4) {
      unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace

int display_width(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  const int8_t type = u_charType(u);
  if (type == U_NON_SPACING_MARK || type == U_ENCLOSING_MARK || type == U_FORMAT_CHAR) return 0;
  if (u >= 0x1160 && u <= 0x11FF) return 0;  // Hangul medial vowels and final consonants join the syllable
  const int ea = u_getIntPropertyValue(u, UCHAR_EAST_ASIAN_WIDTH);
  return ea == U_EA_WIDE || ea == U_EA_FULLWIDTH ? 2 : 1;
}

size_t display_width(std::string_view s) {
  size_t w = 0;
  int32_t i = 0;
  const auto n = static_cast<int32_t>(s.size());
  while (i < n) {
    UChar32 c;
    U8_NEXT(s.data(), i, n, c);
    w += c < 0 ? 1 : static_cast<size_t>(display_width(static_cast<char32_t>(c)));  // a bad byte: one cell
  }
  return w;
}

namespace {

// The longest start of s that is at most `n` terminal cells wide, with "…" (one cell) as the last
// cell when cut; zero-width marks stay with the character they follow.
std::string cut(const std::string& s, size_t n) {
  if (display_width(s) <= n) return s;
  size_t w = 0;
  int32_t i = 0, keep = 0;
  const auto len = static_cast<int32_t>(s.size());
  while (i < len) {
    UChar32 c;
    U8_NEXT(s.data(), i, len, c);
    const size_t cw = c < 0 ? 1 : static_cast<size_t>(display_width(static_cast<char32_t>(c)));
    if (w + cw + 1 > n) break;
    w += cw;
    keep = i;
  }
  return s.substr(0, static_cast<size_t>(keep)) + "\xE2\x80\xA6";
}

std::string format_cell(const Cell& c, const Column& col) {
  if (std::holds_alternative<std::monostate>(c)) return "-";
  if (auto* i = std::get_if<int64_t>(&c)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&c)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", col.precision, *d);
    return buf;
  }
  if (auto* s = std::get_if<std::string>(&c)) {
    // A token whose blanks would vanish on screen: quoted, blanks kept, controls escaped.
    const bool blanks = s->empty() || std::string(" \t\n\r").find(s->front()) != std::string::npos ||
                        std::string(" \t\n\r").find(s->back()) != std::string::npos;
    if (col.token && blanks) return "\"" + clean(*s, true) + "\"";
    return clean(*s, true);
  }
  const auto& list = std::get<std::vector<std::string>>(c);
  std::string out;
  for (size_t i = 0; i < list.size(); ++i) out += (i ? ", " : "") + clean(list[i], true);
  return out;
}

}  // namespace

std::string render_text(const Table& t, int width) {
  std::string out;
  if (!t.title.empty()) out += clean(t.title, true) + "\n";
  const size_t nc = t.columns.size();
  if (nc > 0) {
    std::vector<std::vector<std::string>> cells(t.rows.size(), std::vector<std::string>(nc));
    std::vector<size_t> w(nc);
    for (size_t c = 0; c < nc; ++c) w[c] = display_width(t.columns[c].name);
    for (size_t r = 0; r < t.rows.size(); ++r)
      for (size_t c = 0; c < nc && c < t.rows[r].size(); ++c) {
        cells[r][c] = format_cell(t.rows[r][c], t.columns[c]);
        w[c] = std::max(w[c], display_width(cells[r][c]));
      }
    // Shrink the widest text / list column, one character at a time, until the line fits.
    auto total = [&] {
      size_t s = 2 * (nc - 1);
      for (size_t x : w) s += x;
      return s;
    };
    while (total() > static_cast<size_t>(std::max(width, 20))) {
      int widest = -1;
      for (size_t c = 0; c < nc; ++c) {
        bool text = t.columns[c].type == Column::Type::Text || t.columns[c].type == Column::Type::List;
        if (text && w[c] > 8 && (widest < 0 || w[c] > w[static_cast<size_t>(widest)])) widest = static_cast<int>(c);
      }
      if (widest < 0) break;
      --w[static_cast<size_t>(widest)];
    }
    auto line = [&](const std::vector<std::string>& row) {
      std::string l;
      for (size_t c = 0; c < nc; ++c) {
        std::string s = cut(row[c], w[c]);
        std::string pad(w[c] - std::min(w[c], display_width(s)), ' ');
        bool right = t.columns[c].type == Column::Type::Int || t.columns[c].type == Column::Type::Float;
        if (c) l += "  ";
        l += right ? pad + s : (c + 1 == nc ? s : s + pad);
      }
      while (!l.empty() && l.back() == ' ') l.pop_back();
      return l + "\n";
    };
    std::vector<std::string> head(nc);
    for (size_t c = 0; c < nc; ++c) head[c] = t.columns[c].name;
    out += line(head);
    std::string rule;
    for (size_t c = 0; c < nc; ++c) {
      if (c) rule += "  ";
      for (size_t k = 0; k < w[c]; ++k) rule += "\xE2\x94\x80";
    }
    out += rule + "\n";
    for (const auto& row : cells) out += line(row);
  }
  for (const auto& n : t.notes) out += clean(n, true) + "\n";
  if (t.elapsed_ms >= 0) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.1f ms\n", t.elapsed_ms);
    out += buf;
  }
  return out;
}

std::string render_json(const Table& t) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["statement"] = t.statement;
  j["title"] = clean(t.title, false);
  j["columns"] = ordered_json::array();
  for (const auto& c : t.columns) j["columns"].push_back({{"name", c.name}, {"type", column_type_name(c.type)}});
  j["rows"] = ordered_json::array();
  for (const auto& row : t.rows) {
    ordered_json r = ordered_json::array();
    for (size_t k = 0; k < row.size(); ++k) {
      const Cell& c = row[k];
      const bool token = k < t.columns.size() && t.columns[k].token;
      if (std::holds_alternative<std::monostate>(c)) r.push_back(nullptr);
      else if (auto* i = std::get_if<int64_t>(&c)) r.push_back(*i);
      else if (auto* d = std::get_if<double>(&c)) r.push_back(*d);
      else if (auto* s = std::get_if<std::string>(&c)) r.push_back(clean(token ? trim_blanks(*s) : *s, false));
      else {
        ordered_json l = ordered_json::array();
        for (const auto& s2 : std::get<std::vector<std::string>>(c)) l.push_back(clean(s2, false));
        r.push_back(l);
      }
    }
    j["rows"].push_back(r);
  }
  j["notes"] = ordered_json::array();
  for (const auto& n : t.notes) j["notes"].push_back(clean(n, false));
  if (t.elapsed_ms >= 0) j["elapsed_ms"] = t.elapsed_ms;
  return j.dump();
}

}  // namespace larql::lql
