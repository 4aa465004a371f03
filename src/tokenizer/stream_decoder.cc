// Streaming detokenization and UTF-8 repair.
// Well-formed UTF-8: Unicode 15.0 §3.9, Table 3-7 (byte ranges per lead byte); replacement
// policy: §3.9 "U+FFFD Substitution of Maximal Subparts" (also the WHATWG Encoding Standard).
#include "tokenizer/tokenizer.h"

namespace larql {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

/// Sequence length for a valid lead byte, 0 for a byte that cannot start a sequence.
int lead_length(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;  // 0x80..0xC1 (continuation / overlong), 0xF5..0xFF
}

/// Allowed range of the second byte given the lead (Table 3-7); later bytes are 80..BF.
bool second_ok(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

}  // namespace

std::string utf8_sanitize(std::string_view s, bool hold_incomplete_tail, size_t* held) {
  std::string out;
  out.reserve(s.size());
  if (held) *held = 0;
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t lead = static_cast<uint8_t>(s[i]);
    const int len = lead_length(lead);
    if (len == 1) {
      out.push_back(s[i++]);
      continue;
    }
    if (len == 0) {
      out.append(kReplacement);
      ++i;
      continue;
    }
    // Count how many of the following bytes continue this sequence validly.
    int good = 1;
    while (good < len && i + good < s.size()) {
      const uint8_t b = static_cast<uint8_t>(s[i + good]);
      const bool ok = (good == 1) ? second_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
      if (!ok) break;
      ++good;
    }
    if (good == len) {
      out.append(s.substr(i, len));
      i += len;
    } else if (i + good == s.size() && hold_incomplete_tail) {
      if (held) *held = static_cast<size_t>(good);  // a valid prefix cut by the end: wait
      return out;
    } else {
      out.append(kReplacement);  // maximal subpart s[i, i+good) -> one U+FFFD
      i += good;
    }
  }
  return out;
}

StreamDecoder::StreamDecoder(Tokenizer tokenizer, bool skip_special)
    : tok_(std::move(tokenizer)), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  // decode() of the single id applies add_space_prefix's leading-space rule to the first token
  // only, exactly as decoding the whole sequence at once would.
  std::string piece;
  if (first_) {
    piece = tok_.decode({id}, skip_special_);
    first_ = false;
  } else {
    const TokenType t = tok_.token_type(id);
    if (!(skip_special_ && (t == TokenType::Control || t == TokenType::Unknown)))
      piece = tok_.token_to_piece(id);
  }
  pending_ += piece;
  size_t held = 0;
  std::string out = utf8_sanitize(pending_, /*hold_incomplete_tail=*/true, &held);
  pending_.erase(0, pending_.size() - held);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_sanitize(pending_, /*hold_incomplete_tail=*/false, nullptr);
  pending_.clear();
  first_ = true;
  return out;
}

}  // namespace larql
