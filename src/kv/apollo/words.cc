#include "kv/apollo/words.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <climits>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace larql {
namespace {

bool starts_word(UChar32 c) { return c >= 0 && u_isalnum(c); }

bool continues_word(UChar32 c) {
  if (c < 0) return false;
  const int8_t t = u_charType(c);
  return u_isalnum(c) || t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK;
}

void check_icu(UErrorCode st, const char* what) {
  if (U_FAILURE(st)) throw Error(ErrorKind::BackendFailure, std::string("apollo words: ICU ") + what + ": " + u_errorName(st));
}

// Calls emit(begin, end) for each word's byte range [begin, end) of `text`.
template <class Emit>
void scan_words(std::string_view text, Emit emit) {
  if (text.size() > static_cast<size_t>(INT32_MAX))
    throw Error(ErrorKind::InvalidArgument, "apollo words: a text of " + std::to_string(text.size()) + " bytes is over 2 GiB");
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const auto n = static_cast<int32_t>(text.size());
  int32_t i = 0, begin = -1;
  while (i < n) {
    const int32_t at = i;
    UChar32 c;
    U8_NEXT(s, i, n, c);
    if (begin >= 0 ? continues_word(c) : starts_word(c)) {
      if (begin < 0) begin = at;
      continue;
    }
    if (begin >= 0) emit(begin, at);
    begin = -1;
  }
  if (begin >= 0) emit(begin, n);
}

}  // namespace

std::string normalize_word(std::string_view word) {
  if (std::all_of(word.begin(), word.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x80; })) {
    std::string out(word);
    for (char& ch : out)
      if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
    return out;
  }
  UErrorCode st = U_ZERO_ERROR;
  const UNormalizer2* nfkc_cf = unorm2_getNFKCCasefoldInstance(&st);
  check_icu(st, "NFKC_Casefold instance");
  // UTF-8 -> UTF-16 (ill-formed bytes become U+FFFD), normalise, back to UTF-8.
  int32_t len16 = 0;
  std::u16string in(word.size() + 1, u'\0');
  u_strFromUTF8WithSub(in.data(), static_cast<int32_t>(in.size()), &len16, word.data(), static_cast<int32_t>(word.size()),
                       0xFFFD, nullptr, &st);
  check_icu(st, "UTF-8 decoding");
  std::u16string out(static_cast<size_t>(len16) * 2 + 16, u'\0');  // when short: again at the size ICU asks for
  int32_t out_len = unorm2_normalize(nfkc_cf, in.data(), len16, out.data(), static_cast<int32_t>(out.size()), &st);
  if (st == U_BUFFER_OVERFLOW_ERROR) {
    st = U_ZERO_ERROR;
    out.assign(static_cast<size_t>(out_len), u'\0');
    out_len = unorm2_normalize(nfkc_cf, in.data(), len16, out.data(), out_len, &st);
  }
  check_icu(st, "NFKC_Casefold");
  int32_t len8 = 0;
  u_strToUTF8(nullptr, 0, &len8, out.data(), out_len, &st);
  if (st == U_BUFFER_OVERFLOW_ERROR) st = U_ZERO_ERROR;
  check_icu(st, "UTF-8 encoding");
  std::string res(static_cast<size_t>(len8), '\0');
  u_strToUTF8(res.data(), len8, nullptr, out.data(), out_len, &st);
  if (st == U_STRING_NOT_TERMINATED_WARNING) st = U_ZERO_ERROR;
  check_icu(st, "UTF-8 encoding");
  return res;
}

std::vector<std::string> words_of_text(std::string_view text) {
  std::vector<std::string> out;
  scan_words(text, [&](int32_t b, int32_t e) { out.push_back(normalize_word(text.substr(b, e - b))); });
  return out;
}

std::vector<TokenWord> words_of_tokens(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string text;
  std::vector<int64_t> owner;  // byte of text -> token index
  for (size_t i = 0; i < ids.size(); ++i) {
    const TokenType t = tok.token_type(ids[i]);
    if (t == TokenType::Control || t == TokenType::Unknown || t == TokenType::Unused) continue;
    const std::string piece = tok.token_to_piece(ids[i]);
    text += piece;
    owner.insert(owner.end(), piece.size(), static_cast<int64_t>(i));
  }
  std::vector<TokenWord> out;
  scan_words(text, [&](int32_t b, int32_t e) {
    out.push_back({normalize_word(std::string_view(text).substr(b, e - b)), owner[static_cast<size_t>(b)],
                   owner[static_cast<size_t>(e - 1)]});
  });
  return out;
}

}  // namespace larql
