// Encoding: special-token partition + SPM bigram merges, as llama.cpp does it
// (src/llama-vocab.cpp: tokenizer_st_partition, llm_tokenizer_spm_session, impl::tokenize);
// byte-level BPE fragments go to bpe.cc.
#include <queue>

#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_impl.h"
#include "util/error.h"

namespace larql {

namespace {

/// A piece of the input: either raw text [off, off+len) or an already-decided special token.
struct Fragment {
  int32_t token;  ///< -1 for raw text
  size_t off;
  size_t len;
};

/// Cut special tokens out of `text` exactly as llama.cpp's tokenizer_st_partition does: for each
/// special token in order (longest text first), split every raw fragment at all of its
/// non-overlapping occurrences, scanning left to right. Tokens that occur nowhere in the text
/// are found up front with one hash probe per (position, distinct special length), so the cost
/// is O(n * lengths + n * tokens_present) rather than O(n * all_special_tokens).
/// LSTRIP/RSTRIP attributes are not modelled (llama.cpp sets them only for phi-3, jina and
/// modern-bert vocabularies).
std::vector<Fragment> partition(const Tokenizer::Impl& m, std::string_view text, bool parse_special) {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  if (m.special_order.empty()) return frags;

  std::vector<char> present(m.special_order.size(), 0);
  bool any = false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!m.special_first_byte[static_cast<uint8_t>(text[i])]) continue;
    for (size_t len : m.special_lengths) {
      if (len > text.size() - i) break;
      auto it = m.special_by_text.find(text.substr(i, len));
      if (it != m.special_by_text.end()) {
        present[it->second] = 1;
        any = true;
      }
    }
  }
  if (!any) return frags;

  std::vector<Fragment> next;
  for (size_t k = 0; k < m.special_order.size(); ++k) {
    if (!present[k]) continue;
    const int32_t id = m.special_order[k];
    const TokenType type = m.v.types[id];
    if (!parse_special && (type == TokenType::Control || type == TokenType::Unknown)) continue;
    const std::string& tok = m.v.tokens[id];
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t off = f.off;
      const size_t end = f.off + f.len;
      const std::string_view window = text.substr(0, end);
      while (true) {
        const size_t match = window.find(tok, off);
        if (match == std::string_view::npos) {
          if (end > off) next.push_back({-1, off, end - off});
          break;
        }
        if (match > off) next.push_back({-1, off, match - off});
        next.push_back({id, match, tok.size()});
        off = match + tok.size();
      }
    }
    frags.swap(next);
  }
  return frags;
}

/// Length of the UTF-8 sequence a lead byte announces; 1 for anything else (llama.cpp
/// unicode_len_utf8: lookup on the high nibble).
size_t utf8_len(char c) {
  static constexpr size_t kLookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[static_cast<uint8_t>(c) >> 4];
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
  float score;
  size_t size;
};

/// Max-heap order: higher score first, then smaller left index (llm_bigram_spm::comparator).
struct BigramLess {
  bool operator()(const Bigram& l, const Bigram& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

}  // namespace

void spm_encode_fragment(const Tokenizer::Impl& m, std::string_view text, std::vector<int32_t>& out) {
  if (text.empty()) return;
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offs = 0; offs < text.size();) {
    const size_t n = std::min(utf8_len(text[offs]), text.size() - offs);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offs + n == text.size() ? -1 : index + 1, offs, n});
    offs += n;
  }

  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  auto try_add_bigram = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const size_t size = symbols[left].n + symbols[right].n;
    const int32_t id = m.lookup(text.substr(symbols[left].off, size));
    if (id < 0) return;
    queue.push({left, right, m.v.scores[id], size});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add_bigram(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale entry
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add_bigram(l.prev, b.left);
    try_add_bigram(b.left, l.next);
  }

  // Every merged symbol is a vocabulary entry by construction, so llama.cpp's rev_merge
  // resegmentation never applies; unmerged characters missing from the vocabulary fall back to
  // one `<0xXX>` token per byte.
  for (int i = 0; i != -1; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const std::string_view piece = text.substr(s.off, s.n);
    const int32_t id = m.lookup(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {
      int32_t bid = m.byte_to_id[static_cast<uint8_t>(c)];
      if (bid < 0) bid = m.v.unk_id;
      if (bid < 0)
        throw Error(ErrorKind::Unsupported,
                    "tokenizer: byte value " + std::to_string(static_cast<uint8_t>(c)) + " at offset " +
                        std::to_string(s.off) + " has no byte-fallback token and the vocabulary has no unk id");
      out.push_back(bid);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  const std::vector<Fragment> frags = partition(m, text, parse_special);

  const bool add_special = add_bos;
  bool is_prev_special = true;  // add_space_prefix applies at the start and after specials
  if (add_special && m.v.add_bos) out.push_back(m.v.bos_id);

  if (m.bpe) {  // byte-level BPE: no space prefix, no whitespace escaping (bpe.h)
    for (const Fragment& f : frags) {
      if (f.token >= 0)
        out.push_back(f.token);
      else
        bpe::encode_fragment(*m.bpe, m, text.substr(f.off, f.len), out);
    }
    if (add_special && m.v.add_eos) out.push_back(m.v.eos_id);
    return out;
  }

  std::string escaped;
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      is_prev_special = true;
      continue;
    }
    escaped.clear();
    if (m.v.add_space_prefix && is_prev_special) escaped.append("\xE2\x96\x81");
    for (char c : text.substr(f.off, f.len)) {
      if (c == ' ')
        escaped.append("\xE2\x96\x81");  // llama_escape_whitespace: ' ' -> U+2581
      else
        escaped.push_back(c);
    }
    spm_encode_fragment(m, escaped, out);
    is_prev_special = false;
  }
  if (add_special && m.v.add_eos) out.push_back(m.v.eos_id);
  return out;
}

}  // namespace larql
