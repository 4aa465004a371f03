// Tokenizer construction, GGUF loading, piece lookup and decoding.
// Reference: llama.cpp src/llama-vocab.cpp (load, token_to_piece, detokenize).
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "formats/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/vocab_impl.h"
#include "util/error.h"

namespace larql {

namespace {

constexpr std::string_view kSpaceEscape = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

std::string unescape_spaces(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, kSpaceEscape.size(), kSpaceEscape) == 0) {
      out.push_back(' ');
      i += kSpaceEscape.size();
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/// "<0xXX>" -> XX, or -1.
int parse_byte_piece(const std::string& s) {
  if (s.size() != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
  int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

bool is_special_type(TokenType t) {
  return t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown;
}

/// A special id from metadata: absent -> -1; accepts any integer type.
int32_t read_id(const GgufFile& g, const std::string& key) {
  const auto v = g.find(key);
  if (!v) return -1;
  if (const auto* u = std::get_if<uint64_t>(&v->value)) {
    if (*u > static_cast<uint64_t>(INT32_MAX))
      throw Error(ErrorKind::Format, "GGUF key '" + key + "': id " + std::to_string(*u) + " out of range");
    return static_cast<int32_t>(*u);
  }
  if (const auto* s = std::get_if<int64_t>(&v->value)) {
    if (*s < -1 || *s > INT32_MAX)
      throw Error(ErrorKind::Format, "GGUF key '" + key + "': id " + std::to_string(*s) + " out of range");
    return static_cast<int32_t>(*s);
  }
  throw Error(ErrorKind::Format, "GGUF key '" + key + "' is not an integer");
}

}  // namespace

void Tokenizer::Impl::check_id(int32_t id, const char* what) const {
  if (id < 0 || static_cast<size_t>(id) >= v.tokens.size())
    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": token id " + std::to_string(id) +
                                                " out of range [0, " + std::to_string(v.tokens.size()) + ")");
}

Tokenizer::Tokenizer(VocabData vocab) {
  if (vocab.model != "llama" && vocab.model != "gpt2")
    throw Error(ErrorKind::Unsupported, "tokenizer: tokenizer.ggml.model '" + vocab.model +
                                            "' is not supported (only 'llama', SentencePiece-style, and "
                                            "'gpt2', byte-level BPE)");
  const bool is_bpe = vocab.model == "gpt2";
  if (is_bpe) bpe::pre_info(vocab.pre);  // an unknown pre fails before the tables are built
  auto impl = std::make_shared<Impl>();
  impl->v = std::move(vocab);
  VocabData& v = impl->v;
  const size_t n = v.tokens.size();
  if (n == 0) throw Error(ErrorKind::InvalidArgument, "tokenizer: empty vocabulary");
  if (n > static_cast<size_t>(INT32_MAX))
    throw Error(ErrorKind::InvalidArgument, "tokenizer: vocabulary too large");
  if (v.scores.size() != n || v.types.size() != n)
    throw Error(ErrorKind::InvalidArgument,
                "tokenizer: tokens/scores/types lengths differ (" + std::to_string(n) + "/" +
                    std::to_string(v.scores.size()) + "/" + std::to_string(v.types.size()) + ")");
  for (auto [id, name] : {std::pair{v.bos_id, "bos_id"}, {v.eos_id, "eos_id"}, {v.pad_id, "pad_id"},
                          {v.unk_id, "unk_id"}, {v.eot_id, "eot_id"}}) {
    if (id < -1 || id >= static_cast<int64_t>(n))
      throw Error(ErrorKind::InvalidArgument, std::string("tokenizer: ") + name + " " + std::to_string(id) +
                                                  " out of range [0, " + std::to_string(n) + ")");
  }
  if (v.add_bos && v.bos_id < 0)
    throw Error(ErrorKind::InvalidArgument, "tokenizer: add_bos is set but there is no bos_id");
  if (v.add_eos && v.eos_id < 0)
    throw Error(ErrorKind::InvalidArgument, "tokenizer: add_eos is set but there is no eos_id");

  impl->by_text.reserve(n * 2);
  impl->pieces.resize(n);
  impl->byte_to_id.fill(-1);
  for (size_t i = 0; i < n; ++i) {
    std::string& t = v.tokens[i];
    if (t.empty()) t = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp's loader does
    const int raw_type = static_cast<int>(v.types[i]);
    if (raw_type < 0 || raw_type > 6) v.types[i] = TokenType::Undefined;
  }
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = v.tokens[i];
    auto [it, inserted] = impl->by_text.emplace(std::string_view(t), static_cast<int32_t>(i));
    if (!inserted)
      throw Error(ErrorKind::InvalidArgument, "tokenizer: token " + std::to_string(i) +
                                                  " duplicates the text of token " + std::to_string(it->second));
    switch (v.types[i]) {
      case TokenType::Normal:
        impl->pieces[i] = is_bpe ? bpe::decode_token_text(t) : unescape_spaces(t);
        break;
      case TokenType::Byte: {
        int b = parse_byte_piece(t);
        if (b < 0)
          throw Error(ErrorKind::InvalidArgument,
                      "tokenizer: byte token " + std::to_string(i) + " has text '" + t + "', expected <0xXX>");
        impl->pieces[i] = std::string(1, static_cast<char>(b));
        break;
      }
      case TokenType::Control:
      case TokenType::Unknown:
      case TokenType::UserDefined:
        impl->pieces[i] = t;
        break;
      default:
        break;  // UNUSED / UNDEFINED decode to nothing (llama.cpp token_to_piece)
    }
  }
  // byte_to_token: "<0xXX>" first (any type), then the one-byte piece.
  for (int b = 0; b < 256; ++b) {
    char buf[7];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    int32_t id = impl->lookup(std::string_view(buf, 6));
    if (id < 0) {
      char c = static_cast<char>(b);
      id = impl->lookup(std::string_view(&c, 1));
    }
    impl->byte_to_id[b] = id;
  }

  for (size_t i = 0; i < n; ++i)
    if (is_special_type(v.types[i])) impl->special_order.push_back(static_cast<int32_t>(i));
  std::stable_sort(impl->special_order.begin(), impl->special_order.end(), [&](int32_t a, int32_t b) {
    return v.tokens[a].size() > v.tokens[b].size();
  });
  for (uint32_t k = 0; k < impl->special_order.size(); ++k) {
    const std::string& t = v.tokens[impl->special_order[k]];
    impl->special_by_text.emplace(std::string_view(t), k);
    impl->special_first_byte[static_cast<uint8_t>(t[0])] = true;
    impl->special_lengths.push_back(t.size());
  }
  std::sort(impl->special_lengths.begin(), impl->special_lengths.end());
  impl->special_lengths.erase(std::unique(impl->special_lengths.begin(), impl->special_lengths.end()),
                              impl->special_lengths.end());
  if (is_bpe) impl->bpe = bpe::build(impl->v);
  impl_ = std::move(impl);
}

VocabData vocab_from_gguf(const GgufFile& g) {
  const std::string where = g.path().empty() ? std::string("<gguf>") : g.path();
  auto model = g.get_string("tokenizer.ggml.model");
  if (!model)
    throw Error(ErrorKind::NotFound, where + ": missing key 'tokenizer.ggml.model'");
  VocabData v;
  v.model = *model;
  auto tokens = g.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) throw Error(ErrorKind::NotFound, where + ": missing key 'tokenizer.ggml.tokens'");
  v.tokens = std::move(*tokens);
  const size_t n = v.tokens.size();
  if (auto scores = g.get_f32_array("tokenizer.ggml.scores")) {
    if (scores->size() != n)
      throw Error(ErrorKind::Format, where + ": tokenizer.ggml.scores has " + std::to_string(scores->size()) +
                                         " entries, tokenizer.ggml.tokens has " + std::to_string(n));
    v.scores = std::move(*scores);
  } else {
    v.scores.assign(n, 0.0f);
  }
  if (auto types = g.get_int_array("tokenizer.ggml.token_type")) {
    if (types->size() != n)
      throw Error(ErrorKind::Format, where + ": tokenizer.ggml.token_type has " + std::to_string(types->size()) +
                                         " entries, tokenizer.ggml.tokens has " + std::to_string(n));
    v.types.reserve(n);
    for (int64_t t : *types)
      v.types.push_back((t >= 0 && t <= 6) ? static_cast<TokenType>(t) : TokenType::Undefined);
  } else {
    v.types.assign(n, TokenType::Normal);
  }
  if (auto merges = g.get_string_array("tokenizer.ggml.merges")) v.merges = std::move(*merges);
  v.pre = g.get_string("tokenizer.ggml.pre").value_or("");
  v.bos_id = read_id(g, "tokenizer.ggml.bos_token_id");
  v.eos_id = read_id(g, "tokenizer.ggml.eos_token_id");
  v.eot_id = read_id(g, "tokenizer.ggml.eot_token_id");
  v.pad_id = read_id(g, "tokenizer.ggml.padding_token_id");
  v.unk_id = read_id(g, "tokenizer.ggml.unknown_token_id");
  // llama.cpp defaults for SPM: add_bos true, add_eos false, add_space_prefix true. For BPE
  // ("gpt2"): add_space_prefix false, add_bos true only for the Llama 3 pre names (an unknown
  // pre is left for the Tokenizer to refuse).
  const bool is_spm = v.model != "gpt2";
  const auto pre = bpe::find_pre_info(v.pre);
  const bool bpe_add_bos = pre && pre->add_bos;
  v.add_bos = g.get_bool("tokenizer.ggml.add_bos_token").value_or(is_spm ? true : bpe_add_bos);
  v.add_eos = g.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  v.add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix").value_or(is_spm);
  v.chat_template = g.get_string("tokenizer.chat_template").value_or("");
  for (auto [id, key] : {std::pair{v.bos_id, "bos_token_id"}, {v.eos_id, "eos_token_id"}, {v.eot_id, "eot_token_id"},
                         {v.pad_id, "padding_token_id"}, {v.unk_id, "unknown_token_id"}}) {
    if (id >= static_cast<int64_t>(n))
      throw Error(ErrorKind::Format, where + ": tokenizer.ggml." + key + " = " + std::to_string(id) +
                                         " is not below the vocabulary size " + std::to_string(n));
  }
  return v;
}

void vocab_to_gguf(const VocabData& v, GgufWriter& w) {
  const size_t n = v.tokens.size();
  if (v.scores.size() != n || v.types.size() != n)
    throw Error(ErrorKind::InvalidArgument, "vocab_to_gguf: " + std::to_string(n) + " tokens but " +
                                                std::to_string(v.scores.size()) + " scores and " +
                                                std::to_string(v.types.size()) + " types");
  w.set("tokenizer.ggml.model", GgufValue::str(v.model));
  w.set("tokenizer.ggml.tokens", GgufValue::string_array(v.tokens));
  w.set("tokenizer.ggml.scores", GgufValue::f32_array(v.scores));
  std::vector<int32_t> types(n);
  for (size_t i = 0; i < n; ++i) types[i] = static_cast<int32_t>(v.types[i]);
  w.set("tokenizer.ggml.token_type", GgufValue::i32_array(types));
  if (!v.merges.empty()) w.set("tokenizer.ggml.merges", GgufValue::string_array(v.merges));
  if (!v.pre.empty()) w.set("tokenizer.ggml.pre", GgufValue::str(v.pre));
  for (auto [id, key] : {std::pair{v.bos_id, "bos_token_id"}, {v.eos_id, "eos_token_id"}, {v.eot_id, "eot_token_id"},
                         {v.pad_id, "padding_token_id"}, {v.unk_id, "unknown_token_id"}}) {
    if (id >= 0) w.set(std::string("tokenizer.ggml.") + key, GgufValue::u32(static_cast<uint32_t>(id)));
  }
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(v.add_bos));
  w.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(v.add_eos));
  w.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(v.add_space_prefix));
  if (!v.chat_template.empty()) w.set("tokenizer.chat_template", GgufValue::str(v.chat_template));
}

Tokenizer Tokenizer::from_gguf(const GgufFile& g) { return Tokenizer(vocab_from_gguf(g)); }

std::string Tokenizer::token_to_piece(int32_t id) const {
  impl_->check_id(id, "token_to_piece");
  return impl_->pieces[id];
}

const std::string& Tokenizer::token_text(int32_t id) const {
  impl_->check_id(id, "token_text");
  return impl_->v.tokens[id];
}

float Tokenizer::token_score(int32_t id) const {
  impl_->check_id(id, "token_score");
  return impl_->v.scores[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  impl_->check_id(id, "token_type");
  return impl_->v.types[id];
}

bool Tokenizer::is_control(int32_t id) const {
  return token_type(id) == TokenType::Control;
}

int32_t Tokenizer::bos_id() const { return impl_->v.bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->v.eos_id; }
int32_t Tokenizer::pad_id() const { return impl_->v.pad_id; }
int32_t Tokenizer::unk_id() const { return impl_->v.unk_id; }
int32_t Tokenizer::eot_id() const { return impl_->v.eot_id; }
const std::string& Tokenizer::chat_template() const { return impl_->v.chat_template; }
bool Tokenizer::add_bos() const { return impl_->v.add_bos; }
int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->v.tokens.size()); }

std::optional<int32_t> Tokenizer::find_token(std::string_view piece) const {
  int32_t id = impl_->lookup(piece);
  if (id < 0) return std::nullopt;
  return id;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& m = *impl_;
  for (int32_t id : ids) m.check_id(id, "decode");
  size_t begin = 0;
  bool remove_space = m.v.add_space_prefix;
  if (skip_special && m.v.add_bos && !ids.empty() && ids[0] == m.v.bos_id) {
    remove_space = false;
    begin = 1;
  }
  size_t end = ids.size();
  if (skip_special && m.v.add_eos && end > begin && ids[end - 1] == m.v.eos_id) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    const int32_t id = ids[i];
    const TokenType t = m.v.types[id];
    const bool first = remove_space;
    remove_space = false;
    if (skip_special && (t == TokenType::Control || t == TokenType::Unknown)) continue;
    const std::string& p = m.pieces[id];
    if (first && !p.empty() && p[0] == ' ')
      out.append(p, 1, std::string::npos);
    else
      out += p;
  }
  if (m.bpe && bpe::info(*m.bpe).clean_spaces) bpe::clean_spaces(out);
  return out;
}

}  // namespace larql
