// The Vindexfile parser (docs/vindexfile.md): line by line, by hand, every error at LINE:COL.
#include <algorithm>
#include <cctype>
#include <charconv>

#include "lql/parser.h"
#include "lql/printer.h"
#include "util/error.h"
#include "util/text_file.h"
#include "vindex/index.h"
#include "vindexfile/vindexfile.h"

namespace larql::vindexfile {

namespace {

constexpr const char* kDirectives = "FROM, LEVEL, DTYPE, QUANT, DOWN_TOP_K, PATCH, INSERT, UPDATE, DELETE, LABELS";
/// The short form `INSERT ("e", "r", "t") ...` is this prefix and the rest of the line.
constexpr std::string_view kInsertPrefix = "INSERT INTO EDGES (entity, relation, target) VALUES ";

bool blank(char c) { return c == ' ' || c == '\t'; }

std::string upper(std::string_view s) {
  std::string u(s);
  std::transform(u.begin(), u.end(), u.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return u;
}

std::string lower(std::string_view s) {
  std::string u(s);
  std::transform(u.begin(), u.end(), u.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return u;
}

/// The column of byte `i` of `line`: 1 + the code points before it (lql's rule).
int column(std::string_view line, size_t i) {
  int col = 1;
  for (size_t k = 0; k < i && k < line.size(); k += lql::utf8_sequence_length(line, k)) ++col;
  return col;
}

class Parser {
 public:
  Parser(std::string_view text, std::string name) : name_(std::move(name)) {
    vf_.name = name_;
    // Lines without their '\n' (and a '\r' before it); a UTF-8 byte order mark is skipped.
    if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
    size_t at = 0;
    while (at <= text.size()) {
      size_t end = text.find('\n', at);
      if (end == std::string_view::npos) end = text.size();
      std::string_view l = text.substr(at, end - at);
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      lines_.push_back(l);
      at = end + 1;
    }
    text_ = text;
  }

  Vindexfile run() {
    if (const size_t bad = first_non_text_byte(text_); bad != std::string_view::npos) {
      // The line and column of the offending byte.
      const std::string_view before = text_.substr(0, bad);
      const int line = 1 + static_cast<int>(std::count(before.begin(), before.end(), '\n'));
      const size_t sol = before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1;
      fail({line, column(text_.substr(sol), bad - sol)},
           text_[bad] == '\0' ? "a NUL byte (a Vindexfile is text)" : "a byte that is not UTF-8 text");
    }
    for (size_t li = 0; li < lines_.size(); ++li) {
      const std::string_view l = lines_[li];
      const int line = static_cast<int>(li) + 1;
      size_t i = 0;
      while (i < l.size() && blank(l[i])) ++i;
      if (i == l.size() || l[i] == '#') continue;  // blank or comment: part of no directive
      if (i > 0) {                                 // an indented line continues a statement
        if (!open_) {
          if (last_line_.empty())
            fail({line, column(l, i)}, "an indented line continues the LQL statement above it, and there is none "
                                       "(directives start at column 1)");
          fail({line, column(l, i)}, "an indented line continues only INSERT, UPDATE or DELETE; " + last_line_ +
                                         " takes one line");
        }
        open_->last = li;
        continue;
      }
      finish_statement();
      directive(li);
    }
    finish_statement();
    if (!vf_.from.given()) fail({1, 1}, "no FROM: a Vindexfile starts with FROM and the model or vindex it builds on");
    return std::move(vf_);
  }

 private:
  struct Open {
    Edit edit;
    size_t first = 0, last = 0;  ///< lines of the statement
    size_t start = 0;            ///< byte of the keyword in the first line
  };

  [[noreturn]] void fail(Pos p, const std::string& what) const {
    throw Error(ErrorKind::Format, name_ + ":" + p.str() + ": " + what);
  }

  /// A directive's argument: a quoted string or a word; `i` moves past it.
  std::string argument(size_t li, size_t& i, const std::string& dir, const char* what) {
    const std::string_view l = lines_[li];
    const int line = static_cast<int>(li) + 1;
    while (i < l.size() && blank(l[i])) ++i;
    if (i == l.size()) fail({line, column(l, i)}, dir + " needs " + what);
    std::string out;
    if (l[i] == '"' || l[i] == '\'') {
      const char q = l[i];
      const Pos open{line, column(l, i)};
      ++i;
      for (;;) {
        if (i >= l.size()) fail(open, "unterminated string (a string ends on its line)");
        const char c = l[i];
        if (c == q) {
          ++i;
          break;
        }
        if (c == '\\') {
          if (i + 1 >= l.size()) fail(open, "unterminated string (a string ends on its line)");
          const char e = l[i + 1];
          switch (e) {
            case '\\': out += '\\'; break;
            case '"': out += '"'; break;
            case '\'': out += '\''; break;
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            default:
              fail({line, column(l, i)}, std::string("unknown escape \\") + e + " in a string (escapes: \\\\ \\\" \\' \\n \\t \\r)");
          }
          i += 2;
          continue;
        }
        out += c;
        ++i;
      }
      if (out.empty()) fail(open, dir + " needs " + what + ", not an empty string");
    } else {
      const size_t s = i;
      while (i < l.size() && !blank(l[i])) ++i;
      out = std::string(l.substr(s, i - s));
    }
    return out;
  }

  /// Move `i` past blanks; the place it reaches.
  Pos skip_blanks(size_t li, size_t& i) const {
    const std::string_view l = lines_[li];
    while (i < l.size() && blank(l[i])) ++i;
    return {static_cast<int>(li) + 1, column(l, i)};
  }

  /// Nothing but blanks, and then a `#` comment, may follow a directive's argument.
  void end_of_line(size_t li, size_t i, const std::string& dir) {
    const std::string_view l = lines_[li];
    const size_t after = i;
    while (i < l.size() && blank(l[i])) ++i;
    if (i < l.size() && l[i] == '#' && i > after) return;
    if (i < l.size()) {
      size_t e = i;
      while (e < l.size() && !blank(l[e])) ++e;
      fail({static_cast<int>(li) + 1, column(l, i)},
           "unexpected \"" + std::string(l.substr(i, e - i)) + "\" after " + dir + "'s argument (quote a path that holds blanks)");
    }
  }

  template <class T>
  void once(Setting<T>& s, const std::string& dir, Pos p) {
    if (s.given()) fail(p, dir + " given twice (first at " + s.pos.str() + ")");
    if (!vf_.edits.empty())
      fail(p, dir + " follows an edit (" + vf_.edits.front().keyword + " at " + vf_.edits.front().pos.str() +
                  "): the extract settings come before the edits, which run on what they extract");
    s.pos = p;
  }

  void directive(size_t li) {
    const std::string_view l = lines_[li];
    const int line = static_cast<int>(li) + 1;
    size_t i = 0;
    while (i < l.size() && (std::isalnum(static_cast<unsigned char>(l[i])) || l[i] == '_')) ++i;
    const Pos p{line, 1};
    if (i == 0) {
      size_t e = 0;
      while (e < l.size() && !blank(l[e])) e += lql::utf8_sequence_length(l, e);
      fail(p, "expected a directive, found \"" + std::string(l.substr(0, e)) + "\" (directives: " + kDirectives + ")");
    }
    const std::string kw = upper(l.substr(0, i));
    const bool statement = kw == "INSERT" || kw == "UPDATE" || kw == "DELETE";
    if (!statement && kw != "FROM" && kw != "LEVEL" && kw != "DTYPE" && kw != "QUANT" && kw != "DOWN_TOP_K" && kw != "PATCH" &&
        kw != "LABELS")
      fail(p, "unknown directive \"" + std::string(l.substr(0, i)) + "\" (directives: " + kDirectives + ")");
    if (kw != "FROM" && !vf_.from.given())
      fail(p, kw + " comes before FROM: a Vindexfile starts with FROM and the model or vindex it builds on");
    if (i < l.size() && !blank(l[i]) && !(statement && l[i] == '('))
      fail({line, column(l, i)}, "expected a blank after " + kw + ", found \"" + std::string(1, l[i]) + "\"");
    last_line_ = kw + " at " + p.str();
    if (statement) {
      Open o;
      o.edit.kind = Edit::Kind::Statement;
      o.edit.keyword = kw;
      o.edit.pos = p;
      o.first = o.last = li;
      open_ = std::move(o);
      return;
    }
    if (kw == "FROM") {
      once(vf_.from, kw, p);
      const Pos vp = skip_blanks(li, i);
      vf_.from.value = argument(li, i, kw, "the model or vindex to build on (a path or a model name)");
      if (const size_t scheme = vf_.from.value->find("://"); scheme != std::string::npos && scheme > 0)
        fail(vp, "FROM " + *vf_.from.value + ": remote sources (" + vf_.from.value->substr(0, scheme) +
                     "://) are not read; download the model and give its path or name");
    } else if (kw == "LEVEL") {
      once(vf_.level, kw, p);
      const Pos vp = skip_blanks(li, i);
      const std::string v = lower(argument(li, i, kw, "a level (browse, attention, inference, all)"));
      if (v != "browse" && v != "attention" && v != "inference" && v != "all")
        fail(vp, "LEVEL \"" + v + "\" is not one of browse, attention, inference, all");
      vf_.level.value = v;
    } else if (kw == "DTYPE") {
      once(vf_.dtype, kw, p);
      const Pos vp = skip_blanks(li, i);
      const std::string v = lower(argument(li, i, kw, "a float type (f32, f16, bf16)"));
      if (v != "f32" && v != "f16" && v != "bf16") fail(vp, "DTYPE \"" + v + "\" is not one of f32, f16, bf16");
      vf_.dtype.value = v;
    } else if (kw == "QUANT") {
      once(vf_.quant, kw, p);
      const Pos vp = skip_blanks(li, i);
      const std::string v = lower(argument(li, i, kw, "a weight format (keep, none, q4k)"));
      if (v != "keep" && v != "none" && v != "q4k") fail(vp, "QUANT \"" + v + "\" is not one of keep, none, q4k");
      vf_.quant.value = v;
    } else if (kw == "DOWN_TOP_K") {
      once(vf_.down_top_k, kw, p);
      const Pos vp = skip_blanks(li, i);
      const std::string v = argument(li, i, kw, "a number of tokens per feature in [1, 4096]");
      int n = 0;
      const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || ptr != v.data() + v.size() || n < 1 || n > 4096)
        fail(vp, "DOWN_TOP_K \"" + v + "\" is not a whole number in [1, 4096]");
      vf_.down_top_k.value = n;
    } else if (kw == "PATCH") {
      Edit e;
      e.kind = Edit::Kind::Patch;
      e.keyword = kw;
      e.pos = p;
      e.path = argument(li, i, kw, "a patch file (.vlp)");
      vf_.edits.push_back(std::move(e));
    } else if (kw == "LABELS") {
      if (vf_.labels) fail(p, "LABELS given twice (first at " + vf_.labels->pos.str() + ")");
      Labels lb;
      lb.pos = p;
      while (i < l.size() && blank(l[i])) ++i;
      const bool quoted = i < l.size() && (l[i] == '"' || l[i] == '\'');
      lb.path = argument(li, i, kw, "a relation set or a feature_labels.json file, or DEFAULT");
      if (!quoted && upper(lb.path) == "DEFAULT") lb.builtin = true, lb.path.clear();
      vf_.labels = std::move(lb);
    }
    end_of_line(li, i, kw);
  }

  /// Parse the open INSERT / UPDATE / DELETE with LQL's parser, at its place in the file.
  void finish_statement() {
    if (!open_) return;
    Open o = std::move(*open_);
    open_.reset();
    // The statement's text: from its keyword to the end of its last continuation line; comment
    // lines between are blanked so that positions stay those of the file.
    std::string text;
    for (size_t k = o.first; k <= o.last; ++k) {
      std::string_view l = lines_[k];
      size_t j = 0;
      while (j < l.size() && blank(l[j])) ++j;
      if (j < l.size() && l[j] == '#') l = {};
      if (k > o.first) text += '\n';
      text += std::string(l);
    }
    Pos start{o.edit.pos.line, 1};
    // The short form INSERT ("e", "r", "t") ...: LQL's INSERT with the rest of the text as its
    // VALUES; positions of the rest stay the file's (the prefix is given columns before it).
    if (o.edit.keyword == "INSERT") {
      size_t j = 6;
      int line = start.line;
      size_t sol = 0;
      while (j < text.size() && (blank(text[j]) || text[j] == '\n')) {
        if (text[j] == '\n') ++line, sol = j + 1;
        ++j;
      }
      if (j < text.size() && text[j] == '(') {
        const int col = column(std::string_view(text).substr(sol), j - sol);
        text = std::string(kInsertPrefix) + text.substr(j);
        start = {line, col - static_cast<int>(kInsertPrefix.size())};
      }
    }
    try {
      o.edit.pipeline = lql::parse_one(text, start);
    } catch (const Error& e) {
      throw Error(ErrorKind::Format, name_ + ":" + o.edit.pos.str() + ": " + o.edit.keyword + ": " + e.what());
    }
    if (o.edit.pipeline.stages.size() != 1)
      fail(o.edit.pipeline.stages[1].pos, o.edit.keyword + " holds one statement; a Vindexfile has no pipes (|>)");
    vf_.edits.push_back(std::move(o.edit));
  }

  std::string name_;
  std::string_view text_;
  std::vector<std::string_view> lines_;
  Vindexfile vf_;
  std::optional<Open> open_;
  std::string last_line_;  ///< "FROM at 3:1": the directive before an indented line
};

}  // namespace

Vindexfile parse(std::string_view text, const std::string& name) { return Parser(text, name).run(); }

std::string canonical(const Edit& e) {
  if (e.kind == Edit::Kind::Patch) return "PATCH " + lql::quote_string(e.path);
  return lql::to_lql(e.pipeline);
}

}  // namespace larql::vindexfile
