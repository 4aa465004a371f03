// Byte-level BPE encoding and decoding helpers (bpe.h), as llama.cpp's llm_tokenizer_bpe_session
// and unicode_regex_split (src/llama-vocab.cpp, src/unicode.cpp, llama-cpp-python 0.3.36).
#include "tokenizer/bpe.h"

#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <cstdio>
#include <queue>

#include "tokenizer/vocab_impl.h"
#include "util/error.h"

namespace larql::bpe {

namespace {

// Pieces of the patterns below. \s -> White_Space, \p{L} + CJK Extension I (see bpe.h).
#define LARQL_L "\\p{L}\\x{2EBF0}-\\x{2EE5D}"
#define LARQL_WS "\\p{White_Space}"
#define LARQL_NWS "\\P{White_Space}"

// llama.cpp llm_tokenizer_bpe's regex_exprs per pre type (the "adapted" forms), in ICU syntax.
constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?[" LARQL_L "]+| ?\\p{N}+| ?[^" LARQL_WS LARQL_L "\\p{N}]+|" LARQL_WS "+(?!" LARQL_NWS ")";
constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n" LARQL_L "\\p{N}]?[" LARQL_L
    "]+|\\p{N}{1,3}| ?[^" LARQL_WS LARQL_L "\\p{N}]+[\\r\\n]*|" LARQL_WS "*[\\r\\n]+|" LARQL_WS "+(?!" LARQL_NWS ")|" LARQL_WS "+";
constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n" LARQL_L "\\p{N}]?[" LARQL_L
    "]+|\\p{N}| ?[^" LARQL_WS LARQL_L "\\p{N}]+[\\r\\n]*|" LARQL_WS "*[\\r\\n]+|" LARQL_WS "+(?!" LARQL_NWS ")|" LARQL_WS "+";
// LLAMA_VOCAB_PRE_TYPE_DEFAULT (a missing or "default" pre): four regexes applied in turn.
constexpr const char* kDefaultPunct = "[\\p{P}\\$\\+<=>\\^~\\|]+";
constexpr const char* kDefaultDigits = "\\p{N}+";
constexpr const char* kDefaultTriples = "[0-9][0-9][0-9]";

#undef LARQL_L
#undef LARQL_WS
#undef LARQL_NWS

/// GPT-2's bytes_to_unicode (llama.cpp unicode_byte_to_utf8_map): printable Latin-1 bytes map to
/// themselves, the other 68 to U+0100.. in byte order.
struct ByteMap {
  std::array<std::string, 256> to_text;
  std::array<int16_t, 0x144> to_byte;  ///< code point -> byte, -1 if none
  ByteMap() {
    to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(n++);
      to_byte[cp] = static_cast<int16_t>(b);
      std::string& s = to_text[b];
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

/// llama.cpp unicode_cpt_from_utf8 + unicode_cpts_from_utf8: no overlong / surrogate checks; a
/// byte that does not start a complete sequence becomes U+FFFD and decoding resumes at the next
/// byte.
std::vector<uint32_t> decode_cpts(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  auto cont = [&](size_t i) { return i < n && (u[i] & 0xC0) == 0x80; };
  for (size_t i = 0; i < n;) {
    const unsigned c = u[i];
    if (!(c & 0x80)) {
      out.push_back(c);
      i += 1;
    } else if (!(c & 0x40)) {
      out.push_back(0xFFFD);
      i += 1;
    } else if (!(c & 0x20)) {
      if (!cont(i + 1)) {
        out.push_back(0xFFFD);
        i += 1;
      } else {
        out.push_back(((c & 0x1F) << 6) | (u[i + 1] & 0x3F));
        i += 2;
      }
    } else if (!(c & 0x10)) {
      if (!cont(i + 1) || !cont(i + 2)) {
        out.push_back(0xFFFD);
        i += 1;
      } else {
        out.push_back(((c & 0x0F) << 12) | ((u[i + 1] & 0x3F) << 6) | (u[i + 2] & 0x3F));
        i += 3;
      }
    } else if (!(c & 0x08)) {
      if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) {
        out.push_back(0xFFFD);
        i += 1;
      } else {
        out.push_back(((c & 0x07) << 18) | ((u[i + 1] & 0x3F) << 12) | ((u[i + 2] & 0x3F) << 6) | (u[i + 3] & 0x3F));
        i += 4;
      }
    } else {
      out.push_back(0xFFFD);
      i += 1;
    }
  }
  return out;
}

/// llama.cpp unicode_cpt_to_utf8. A code point above U+10FFFF (F5..F7 leads, where llama.cpp
/// throws std::invalid_argument out of llama_tokenize) is written as U+FFFD.
void append_utf8(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF) cp = 0xFFFD;
  if (cp <= 0x7F) {
    out.push_back(static_cast<char>(cp));
  } else if (cp <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | ((cp >> 6) & 0x1F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0xFFFF) {
    out.push_back(static_cast<char>(0xE0 | ((cp >> 12) & 0x0F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | ((cp >> 18) & 0x07)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t utf8_len(char c) {
  static constexpr size_t kLookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[static_cast<uint8_t>(c) >> 4];
}

/// Word boundaries (code point counts) of `cpts` under the regex list, as unicode_regex_split:
/// each regex splits every piece of the previous split; a piece is searched alone (ICU's default
/// opaque region bounds: a lookahead sees the piece's end as the end of input).
std::vector<size_t> split_offsets(const State& s, const std::vector<uint32_t>& cpts);

}  // namespace

struct State {
  PreInfo pre;
  std::vector<std::unique_ptr<icu::RegexPattern>> patterns;
  /// merge text "left right" (a view into VocabData::merges) -> rank; first occurrence wins.
  std::unordered_map<std::string_view, int32_t> ranks;

  int32_t rank(std::string_view left, std::string_view right, std::string& buf) const {
    // llama.cpp splits a merge at the first space after its first byte, so a left piece with a
    // space past its first byte never matches.
    if (left.size() > 1 && left.find(' ', 1) != std::string_view::npos) return -1;
    buf.assign(left);
    buf.push_back(' ');
    buf.append(right);
    const auto it = ranks.find(buf);
    return it == ranks.end() ? -1 : it->second;
  }
};

std::optional<PreInfo> find_pre_info(std::string_view pre) {
  if (pre.empty() || pre == "default") return PreInfo{PreType::Default, false, false, true};
  if (pre == "gpt-2" || pre == "phi-2") return PreInfo{PreType::Gpt2, false, false, true};
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe") return PreInfo{PreType::Llama3, true, true, true};
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return PreInfo{PreType::Qwen2, false, false, false};
  return std::nullopt;
}

PreInfo pre_info(std::string_view pre) {
  if (const auto info = find_pre_info(pre)) return *info;
  throw Error(ErrorKind::Unsupported,
              "tokenizer: tokenizer.ggml.pre '" + std::string(pre) +
                  "' is not supported (byte-level BPE pre-tokenizers: llama-bpe/llama3/llama-v3, qwen2/"
                  "deepseek-r1-qwen, gpt-2/phi-2, default)");
}

const PreInfo& info(const State& s) { return s.pre; }

std::shared_ptr<const State> build(const VocabData& v) {
  auto s = std::make_shared<State>();
  s->pre = pre_info(v.pre);
  std::vector<const char*> exprs;
  switch (s->pre.type) {
    case PreType::Gpt2: exprs = {kGpt2}; break;
    case PreType::Llama3: exprs = {kLlama3}; break;
    case PreType::Qwen2: exprs = {kQwen2}; break;
    case PreType::Default: exprs = {kDefaultPunct, kGpt2, kDefaultDigits, kDefaultTriples}; break;
  }
  for (const char* e : exprs) {
    UErrorCode status = U_ZERO_ERROR;
    UParseError perr;
    std::unique_ptr<icu::RegexPattern> p(
        icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(e), 0, perr, status));
    if (U_FAILURE(status))
      throw Error(ErrorKind::InvariantViolation, std::string("tokenizer: ICU rejects the pre-tokenizer regex ") + e +
                                                     ": " + u_errorName(status));
    s->patterns.push_back(std::move(p));
  }
  if (v.merges.empty())
    throw Error(ErrorKind::Format,
                "tokenizer: tokenizer.ggml.merges is missing or empty; a byte-level BPE ('gpt2') vocabulary needs its merges");
  s->ranks.reserve(v.merges.size() * 2);
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sp == std::string::npos)
      throw Error(ErrorKind::Format, "tokenizer: tokenizer.ggml.merges[" + std::to_string(i) + "] = \"" + m +
                                         "\" is not two tokens separated by a space");
    s->ranks.emplace(std::string_view(m), static_cast<int32_t>(i));
  }
  return s;
}

namespace {

std::vector<size_t> split_offsets(const State& s, const std::vector<uint32_t>& cpts) {
  if (cpts.empty()) return {};
  // UTF-16 for ICU; code points ICU would read differently (surrogates, which two adjacent ones
  // would pair into one code point, and values past U+10FFFF) become U+FFFF, which like them is
  // neither letter, number, punctuation nor space.
  std::vector<char16_t> u16;
  u16.reserve(cpts.size() + 8);
  std::vector<int32_t> unit_of(cpts.size() + 1);  // code point index -> UTF-16 index
  for (size_t i = 0; i < cpts.size(); ++i) {
    unit_of[i] = static_cast<int32_t>(u16.size());
    uint32_t c = cpts[i];
    if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) c = 0xFFFF;
    if (c <= 0xFFFF) {
      u16.push_back(static_cast<char16_t>(c));
    } else {
      u16.push_back(static_cast<char16_t>(0xD7C0 + (c >> 10)));
      u16.push_back(static_cast<char16_t>(0xDC00 | (c & 0x3FF)));
    }
  }
  unit_of[cpts.size()] = static_cast<int32_t>(u16.size());
  std::vector<int32_t> cp_of(u16.size() + 1, -1);  // UTF-16 index -> code point index
  for (size_t i = 0; i <= cpts.size(); ++i) cp_of[static_cast<size_t>(unit_of[i])] = static_cast<int32_t>(i);

  const icu::UnicodeString us(false, u16.data(), static_cast<int32_t>(u16.size()));
  std::vector<size_t> offsets = {cpts.size()}, next;
  for (const auto& pattern : s.patterns) {
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::RegexMatcher> m(pattern->matcher(us, status));
    if (U_FAILURE(status)) throw Error(ErrorKind::BackendFailure, std::string("tokenizer: ICU matcher: ") + u_errorName(status));
    next.clear();
    size_t start = 0;
    for (const size_t len : offsets) {
      const size_t end = start + len;
      size_t prev = start;
      m->region(unit_of[start], unit_of[end], status);
      while (m->find(status) && U_SUCCESS(status)) {
        const int32_t ms = cp_of[static_cast<size_t>(m->start(status))];
        const int32_t me = cp_of[static_cast<size_t>(m->end(status))];
        if (ms < 0 || me < 0 || me <= ms) continue;  // (no pattern here matches empty)
        if (static_cast<size_t>(ms) > prev) next.push_back(static_cast<size_t>(ms) - prev);
        next.push_back(static_cast<size_t>(me - ms));
        prev = static_cast<size_t>(me);
      }
      if (U_FAILURE(status)) throw Error(ErrorKind::BackendFailure, std::string("tokenizer: ICU regex: ") + u_errorName(status));
      if (end > prev) next.push_back(end - prev);
      start = end;
    }
    offsets.swap(next);
  }
  return offsets;
}

struct Symbol {
  int prev;
  int next;
  size_t off;
  size_t n;  ///< bytes; 0 once merged into its left neighbour
};

struct Bigram {
  int left;
  int right;
  int32_t rank;
  size_t size;
};

/// Max-heap order so that top() is the lowest rank, then the leftmost (llm_bigram_bpe::comparator).
struct BigramLess {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  }
};

void merge_word(const State& s, const Tokenizer::Impl& m, const std::string& word, std::vector<int32_t>& out,
                std::vector<Symbol>& symbols, std::string& buf) {
  if (word.empty()) return;
  if (s.pre.ignore_merges) {
    const int32_t id = m.lookup(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  symbols.clear();
  for (size_t off = 0; off < word.size();) {
    const size_t n = std::min(utf8_len(word[off]), word.size() - off);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, off + n == word.size() ? -1 : index + 1, off, n});
    off += n;
  }
  const std::string_view w(word);
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  auto try_add = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const int32_t rank = s.rank(w.substr(l.off, l.n), w.substr(r.off, r.n), buf);
    if (rank < 0) return;
    queue.push({left, right, rank, l.n + r.n});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<size_t>(b.left)];
    Symbol& r = symbols[static_cast<size_t>(b.right)];
    // Stale: either side already merged away, or grew (then the text differs from the pair's).
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int i = 0; i != -1; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& sym = symbols[static_cast<size_t>(i)];
    const std::string_view piece = w.substr(sym.off, sym.n);
    const int32_t id = m.lookup(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // llama.cpp: each byte of the (byte-mapped) symbol as a one-byte token text, else nothing.
    for (char c : piece) {
      const int32_t bid = m.lookup(std::string_view(&c, 1));
      if (bid >= 0) out.push_back(bid);
    }
  }
}

}  // namespace

std::vector<std::string> split_words(const State& s, std::string_view text) {
  const std::vector<uint32_t> cpts = decode_cpts(text);
  std::vector<std::string> words;
  size_t start = 0;
  for (const size_t len : split_offsets(s, cpts)) {
    std::string w;
    for (size_t i = start; i < start + len; ++i) append_utf8(w, cpts[i]);
    words.push_back(std::move(w));
    start += len;
  }
  return words;
}

void encode_fragment(const State& s, const Tokenizer::Impl& m, std::string_view text, std::vector<int32_t>& out) {
  if (text.empty()) return;
  const ByteMap& bm = byte_map();
  const std::vector<uint32_t> cpts = decode_cpts(text);
  std::vector<Symbol> symbols;
  std::string raw, word, buf;
  size_t start = 0;
  for (const size_t len : split_offsets(s, cpts)) {
    raw.clear();
    for (size_t i = start; i < start + len; ++i) append_utf8(raw, cpts[i]);
    start += len;
    word.clear();
    for (char c : raw) word += bm.to_text[static_cast<uint8_t>(c)];
    merge_word(s, m, word, out, symbols, buf);
  }
}

std::string decode_token_text(std::string_view text) {
  const ByteMap& bm = byte_map();
  std::string out;
  out.reserve(text.size());
  for (const uint32_t cp : decode_cpts(text)) {
    if (cp < bm.to_byte.size() && bm.to_byte[cp] >= 0) {
      out.push_back(static_cast<char>(bm.to_byte[cp]));
      continue;
    }
    std::string utf8;
    append_utf8(utf8, cp);
    out += "[UNK_BYTE_0x";
    for (char c : utf8) {
      char hex[3];
      std::snprintf(hex, sizeof hex, "%02x", static_cast<uint8_t>(c));
      out += hex;
    }
    out.append(text);
    out += ']';
  }
  return out;
}

void clean_spaces(std::string& t) {
  // A literal port of the three passes in llama_vocab::impl::detokenize, in place.
  size_t total = t.size();
  // first pass: " ?", " !", " .", " ," lose the space
  size_t total1 = total;
  total = total ? 1 : 0;
  for (size_t i = 1; i < total1; ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
    t[total++] = x;
  }
  // second pass: a single apostrophe between spaces loses both spaces
  const size_t total2 = total;
  total = total ? 1 : 0;
  for (size_t i = 1; i < total2; ++i) {
    const char x = t[i];
    if (x == '\'' && i + 1 < total2 && t[i - 1] == ' ' && t[i + 1] == ' ') {
      --total;
      t[++i] = '\0';
    }
    t[total++] = x;
  }
  // third pass: " 's", " 'm", " 're", " 've" lose the space
  const size_t total3 = total;
  total = total ? 1 : 0;
  for (size_t i = 1; i < total3; ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
      const char x1 = t[i + 1];
      if (x1 == 's' || x1 == 'm') {
        --total;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < total3) {
        const char x2 = t[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --total;
      }
    }
    t[total++] = x;
  }
  t.resize(total);
}

}  // namespace larql::bpe
