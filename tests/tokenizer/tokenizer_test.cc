// Unit tests of the SPM tokenizer on a hand-built vocabulary. Every expected id sequence is
// derived by hand from the merge rules documented in tokenizer.h (llama.cpp
// llm_tokenizer_spm_session): highest score first, ties to the leftmost pair, byte fallback.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace larql {
namespace {

const std::string kSp = "\xE2\x96\x81";  // U+2581

struct Entry {
  std::string text;
  float score;
  TokenType type;
};

// Layout: 0..7 specials, 8..263 byte tokens <0x00>..<0xFF>, then normal pieces.
std::vector<Entry> entries() {
  std::vector<Entry> e = {
      {"<pad>", 0, TokenType::Control},          // 0
      {"<eos>", 0, TokenType::Control},          // 1
      {"<bos>", 0, TokenType::Control},          // 2
      {"<unk>", 0, TokenType::Unknown},          // 3
      {"<start_of_turn>", 0, TokenType::Control},  // 4
      {"<end_of_turn>", 0, TokenType::Control},    // 5
      {"\n", 0, TokenType::UserDefined},           // 6
      {"  ", 0, TokenType::UserDefined},           // 7  two spaces
  };
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    e.push_back({buf, 0, TokenType::Byte});
  }
  const std::vector<Entry> normal = {
      {"a", -10, TokenType::Normal},   {"b", -10, TokenType::Normal},
      {"ab", -1, TokenType::Normal},   {"x", -10, TokenType::Normal},
      {"y", -10, TokenType::Normal},   {"z", -10, TokenType::Normal},
      {"xy", -1, TokenType::Normal},   {"yz", -1, TokenType::Normal},  // tie: left wins
      {"p", -10, TokenType::Normal},   {"q", -10, TokenType::Normal},
      {"r", -10, TokenType::Normal},   {"pq", -2, TokenType::Normal},
      {"qr", -1, TokenType::Normal},   // higher score wins
      {"h", -10, TokenType::Normal},   {"e", -10, TokenType::Normal},
      {"l", -10, TokenType::Normal},   {"o", -10, TokenType::Normal},
      {"he", -3, TokenType::Normal},   {"ll", -1, TokenType::Normal},
      {"lo", -2, TokenType::Normal},   {"llo", -1.5, TokenType::Normal},
      {"hello", -4, TokenType::Normal},
      {kSp, -5, TokenType::Normal},    {kSp + "a", -0.5, TokenType::Normal},
      {"ST", 0, TokenType::UserDefined}, {"TUV", 0, TokenType::UserDefined},
      {"<unused0>", 0, TokenType::Unused},
  };
  e.insert(e.end(), normal.begin(), normal.end());
  return e;
}

int32_t id(const std::string& text) {
  auto e = entries();
  for (size_t i = 0; i < e.size(); ++i)
    if (e[i].text == text) return static_cast<int32_t>(i);
  ADD_FAILURE() << "test vocab has no '" << text << "'";
  return -1;
}
int32_t byte_id(uint8_t b) { return 8 + b; }

VocabData make_vocab(bool add_space_prefix = false) {
  VocabData v;
  for (const Entry& e : entries()) {
    v.tokens.push_back(e.text);
    v.scores.push_back(e.score);
    v.types.push_back(e.type);
  }
  v.pad_id = 0;
  v.eos_id = 1;
  v.bos_id = 2;
  v.unk_id = 3;
  v.add_bos = true;
  v.add_space_prefix = add_space_prefix;
  return v;
}

using Ids = std::vector<int32_t>;

TEST(Tokenizer, MergeOrderByScoreThenLeftmost) {
  Tokenizer t(make_vocab());
  EXPECT_EQ(t.encode("ab", false, true), (Ids{id("ab")}));
  EXPECT_EQ(t.encode("xyz", false, true), (Ids{id("xy"), id("z")}));   // tie -> left pair
  EXPECT_EQ(t.encode("pqr", false, true), (Ids{id("p"), id("qr")}));   // qr scores higher
  // h e l l o: ll(-1) -> llo(-1.5) -> he(-3) -> hello(-4)
  EXPECT_EQ(t.encode("hello", false, true), (Ids{id("hello")}));
  // h e l o: lo(-2) then he(-3); "helo" is not a piece
  EXPECT_EQ(t.encode("helo", false, true), (Ids{id("he"), id("lo")}));
}

TEST(Tokenizer, SpacesBecomeU2581) {
  Tokenizer t(make_vocab());
  EXPECT_EQ(t.encode(" a", false, true), (Ids{id(kSp + "a")}));
  EXPECT_EQ(t.encode("b a", false, true), (Ids{id("b"), id(kSp + "a")}));
  EXPECT_EQ(t.encode("a b", false, true), (Ids{id("a"), id(kSp), id("b")}));
}

TEST(Tokenizer, ByteFallback) {
  Tokenizer t(make_vocab());
  // é = C3 A9; 😀 = F0 9F 98 80; neither is a piece.
  EXPECT_EQ(t.encode("\xC3\xA9", false, true), (Ids{byte_id(0xC3), byte_id(0xA9)}));
  EXPECT_EQ(t.encode("a\xF0\x9F\x98\x80", false, true),
            (Ids{id("a"), byte_id(0xF0), byte_id(0x9F), byte_id(0x98), byte_id(0x80)}));
  // A lone continuation byte is its own one-byte symbol.
  EXPECT_EQ(t.encode("\x80" "ab", false, true), (Ids{byte_id(0x80), id("ab")}));
}

TEST(Tokenizer, BosAndEmpty) {
  Tokenizer t(make_vocab());
  EXPECT_EQ(t.encode("", true, true), (Ids{2}));
  EXPECT_EQ(t.encode("", false, true), (Ids{}));
  EXPECT_EQ(t.encode("ab", true, false), (Ids{2, id("ab")}));
}

TEST(Tokenizer, ControlTokensOnlyWithParseSpecial) {
  Tokenizer t(make_vocab());
  EXPECT_EQ(t.encode("<end_of_turn>ab", false, true), (Ids{5, id("ab")}));
  Ids plain;
  // No two adjacent characters of "<end_of_turn>" form a piece; e, o, r are single-char pieces.
  for (char c : std::string("<end_of_turn>")) {
    if (c == 'e' || c == 'o' || c == 'r')
      plain.push_back(id(std::string(1, c)));
    else
      plain.push_back(byte_id(static_cast<uint8_t>(c)));
  }
  plain.push_back(id("ab"));
  EXPECT_EQ(t.encode("<end_of_turn>ab", false, false), plain);
  EXPECT_EQ(t.encode("ab<start_of_turn><end_of_turn>", true, true), (Ids{2, id("ab"), 4, 5}));
}

TEST(Tokenizer, UserDefinedAlwaysMatched) {
  Tokenizer t(make_vocab());
  for (bool special : {false, true}) {
    EXPECT_EQ(t.encode("a\nb", false, special), (Ids{id("a"), 6, id("b")}));
    EXPECT_EQ(t.encode("a  b", false, special), (Ids{id("a"), 7, id("b")}));
    // three spaces: "  " at offset 1, then " b" -> ▁ b
    EXPECT_EQ(t.encode("a   b", false, special), (Ids{id("a"), 7, id(kSp), id("b")}));
  }
}

TEST(Tokenizer, LongestSpecialFirstNotLeftmost) {
  Tokenizer t(make_vocab());
  // "TUV" (3 bytes) is cut before "ST" (2 bytes) is considered, so "ST" never matches.
  EXPECT_EQ(t.encode("STUV", false, false), (Ids{byte_id('S'), id("TUV")}));
}

TEST(Tokenizer, AddSpacePrefix) {
  Tokenizer t(make_vocab(/*add_space_prefix=*/true));
  EXPECT_EQ(t.encode("a", false, true), (Ids{id(kSp + "a")}));
  EXPECT_EQ(t.encode("<end_of_turn>a", true, true), (Ids{2, 5, id(kSp + "a")}));
  EXPECT_EQ(t.decode({id(kSp + "a"), id(kSp + "a")}), "a a");
}

TEST(Tokenizer, PiecesAndDecode) {
  Tokenizer t(make_vocab());
  EXPECT_EQ(t.token_to_piece(id(kSp + "a")), " a");
  EXPECT_EQ(t.token_to_piece(byte_id(0x41)), "A");
  EXPECT_EQ(t.token_to_piece(byte_id(0xFF)), "\xFF");
  EXPECT_EQ(t.token_to_piece(5), "<end_of_turn>");
  EXPECT_EQ(t.token_to_piece(6), "\n");
  EXPECT_EQ(t.token_to_piece(id("<unused0>")), "");
  Ids ids = {2, id("he"), id("lo"), id(kSp + "a"), 6, 5};
  EXPECT_EQ(t.decode(ids), "<bos>helo a\n<end_of_turn>");
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "helo a\n");
}

TEST(Tokenizer, LookupsAndFlags) {
  Tokenizer t(make_vocab());
  EXPECT_EQ(t.bos_id(), 2);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_EQ(t.pad_id(), 0);
  EXPECT_EQ(t.unk_id(), 3);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.vocab_size(), static_cast<int32_t>(entries().size()));
  EXPECT_EQ(t.find_token("<end_of_turn>"), std::optional<int32_t>(5));
  EXPECT_EQ(t.find_token("nope"), std::nullopt);
  EXPECT_TRUE(t.is_control(4));
  EXPECT_FALSE(t.is_control(6));
  EXPECT_FALSE(t.is_control(id("ab")));
}

void expect_kind(ErrorKind kind, const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << "expected larql::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
  }
}

TEST(Tokenizer, Errors) {
  Tokenizer t(make_vocab());
  expect_kind(ErrorKind::InvalidArgument, [&] { t.decode({0, 99999}); });
  expect_kind(ErrorKind::InvalidArgument, [&] { t.token_to_piece(-1); });
  expect_kind(ErrorKind::InvalidArgument, [&] { t.is_control(t.vocab_size()); });
  expect_kind(ErrorKind::InvalidArgument, [&] {
    VocabData v = make_vocab();
    v.scores.pop_back();
    Tokenizer bad(std::move(v));
  });
  expect_kind(ErrorKind::InvalidArgument, [&] {
    VocabData v = make_vocab();
    v.tokens[270] = v.tokens[271];
    Tokenizer bad(std::move(v));
  });
  expect_kind(ErrorKind::InvalidArgument, [&] {
    VocabData v = make_vocab();
    v.bos_id = 100000;
    Tokenizer bad(std::move(v));
  });
}

// ---- GGUF loading (through the project's GGUF writer/reader) ----

std::shared_ptr<GgufFile> vocab_gguf(const std::string& model) {
  GgufWriter w;
  VocabData v = make_vocab();
  std::vector<int32_t> types;
  for (TokenType ty : v.types) types.push_back(static_cast<int32_t>(ty));
  w.set("tokenizer.ggml.model", GgufValue::str(model));
  w.set("tokenizer.ggml.tokens", GgufValue::string_array(v.tokens));
  w.set("tokenizer.ggml.scores", GgufValue::f32_array(v.scores));
  w.set("tokenizer.ggml.token_type", GgufValue::i32_array(types));
  w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(2));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(1));
  w.set("tokenizer.ggml.unknown_token_id", GgufValue::u32(3));
  w.set("tokenizer.ggml.padding_token_id", GgufValue::u32(0));
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
  w.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(false));
  auto bytes = w.serialize();
  return GgufFile::parse(bytes.data(), bytes.size(), "vocab.gguf");
}

TEST(Tokenizer, FromGguf) {
  Tokenizer t = Tokenizer::from_gguf(*vocab_gguf("llama"));
  EXPECT_EQ(t.vocab_size(), static_cast<int32_t>(entries().size()));
  EXPECT_EQ(t.bos_id(), 2);
  EXPECT_EQ(t.encode("pqr", true, true), (Ids{2, id("p"), id("qr")}));
}

TEST(Tokenizer, FromGgufRejectsOtherModels) {
  try {
    Tokenizer::from_gguf(*vocab_gguf("t5"));
    FAIL() << "expected Error{Unsupported}";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("t5"), std::string::npos) << e.what();
  }
  // "gpt2" (byte-level BPE, tests/tokenizer/bpe_test.cc) is accepted, but not without merges.
  try {
    Tokenizer::from_gguf(*vocab_gguf("gpt2"));
    FAIL() << "expected Error{Format}";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.merges"), std::string::npos) << e.what();
  }
}

// vocab_to_gguf writes what vocab_from_gguf reads (whose keys are checked above against the
// hand-written layout and, in gguf_real_test, against llama.cpp's files): every field, including
// the ones whose reader defaults differ from a struct default (add_space_prefix false).
TEST(Tokenizer, VocabToGgufRoundTripsEveryField) {
  VocabData v;
  v.tokens = {"<pad>", "<eos>", "<bos>", "<0x41>", "\xe2\x96\x81a", "b", "<start_of_turn>"};
  v.scores = {0.0f, 0.0f, 0.0f, 0.0f, -1.5f, -2.25f, 0.0f};
  v.types = {TokenType::Control, TokenType::Control, TokenType::Control, TokenType::Byte,
             TokenType::Normal, TokenType::Unused, TokenType::UserDefined};
  v.merges = {"a b"};
  v.pad_id = 0;
  v.eos_id = 1;
  v.bos_id = 2;
  v.eot_id = 6;
  v.unk_id = -1;
  v.add_bos = false;
  v.add_eos = true;
  v.add_space_prefix = false;
  v.chat_template = "{{ messages }}";
  GgufWriter w;
  vocab_to_gguf(v, w);
  const auto bytes = w.serialize();
  const VocabData back = vocab_from_gguf(*GgufFile::parse(bytes.data(), bytes.size(), "tokenizer.gguf"));
  EXPECT_EQ(back.model, v.model);
  EXPECT_EQ(back.tokens, v.tokens);
  EXPECT_EQ(back.scores, v.scores);
  EXPECT_EQ(back.types, v.types);
  EXPECT_EQ(back.merges, v.merges);
  EXPECT_EQ(back.bos_id, 2);
  EXPECT_EQ(back.eos_id, 1);
  EXPECT_EQ(back.eot_id, 6);
  EXPECT_EQ(back.pad_id, 0);
  EXPECT_EQ(back.unk_id, -1);
  EXPECT_FALSE(back.add_bos);
  EXPECT_TRUE(back.add_eos);
  EXPECT_FALSE(back.add_space_prefix);
  EXPECT_EQ(back.chat_template, v.chat_template);

  v.scores.pop_back();
  EXPECT_THROW(vocab_to_gguf(v, w), Error);
}

// ---- StreamDecoder / UTF-8 repair ----

TEST(StreamDecoder, HoldsSplitEmojiUntilComplete) {
  Tokenizer t(make_vocab());
  StreamDecoder d(t);
  EXPECT_EQ(d.push(id("a")), "a");
  EXPECT_EQ(d.push(byte_id(0xF0)), "");
  EXPECT_EQ(d.push(byte_id(0x9F)), "");
  EXPECT_EQ(d.push(byte_id(0x98)), "");
  EXPECT_EQ(d.pending_bytes(), 3u);
  EXPECT_EQ(d.push(byte_id(0x80)), "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.push(id("he")), "he");
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, FlushReplacesIncompleteTail) {
  Tokenizer t(make_vocab());
  StreamDecoder d(t);
  EXPECT_EQ(d.push(byte_id(0xF0)), "");
  EXPECT_EQ(d.push(byte_id(0x9F)), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");  // one U+FFFD for the maximal subpart F0 9F
  EXPECT_EQ(d.push(byte_id(0x80)), "\xEF\xBF\xBD");  // lone continuation byte
  // An interrupted sequence: F0 then 'a' -> U+FFFD then 'a'.
  EXPECT_EQ(d.push(byte_id(0xF0)), "");
  EXPECT_EQ(d.push(id("a")), "\xEF\xBF\xBD" "a");
}

TEST(StreamDecoder, SkipSpecial) {
  Tokenizer t(make_vocab());
  StreamDecoder d(t, /*skip_special=*/true);
  EXPECT_EQ(d.push(2), "");
  EXPECT_EQ(d.push(id("ab")), "ab");
  EXPECT_EQ(d.push(5), "");
}

TEST(Utf8Sanitize, MaximalSubparts) {
  // Unicode 15 §3.9 Table 3-8 example: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64
  // -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d
  const std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_sanitize(in, false, nullptr), "a" + r + r + r + "b" + r + "c" + r + r + "d");
  // Surrogate ED A0 80 is ill-formed: three maximal subparts.
  EXPECT_EQ(utf8_sanitize("\xED\xA0\x80", false, nullptr), r + r + r);
  size_t held = 0;
  EXPECT_EQ(utf8_sanitize("ok\xE2\x96", true, &held), "ok");
  EXPECT_EQ(held, 2u);
}

// ---- Chat template ----

TEST(ChatTemplate, GemmaTurns) {
  std::vector<ChatMessage> msgs = {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};
  EXPECT_EQ(apply_gemma_chat_template(msgs, true),
            "<start_of_turn>user\nHi<end_of_turn>\n"
            "<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n"
            "<start_of_turn>model\n");
  EXPECT_EQ(apply_gemma_chat_template({{"user", "Hi"}}, false), "<start_of_turn>user\nHi<end_of_turn>\n");
}

TEST(ChatTemplate, SystemPrependedAndContentTrimmed) {
  std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "  Hi \n"}};
  EXPECT_EQ(apply_gemma_chat_template(msgs, true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplate, RejectsBadRoles) {
  expect_kind(ErrorKind::InvalidArgument,
              [] { apply_gemma_chat_template({{"user", "a"}, {"user", "b"}}, true); });
  expect_kind(ErrorKind::InvalidArgument,
              [] { apply_gemma_chat_template({{"assistant", "a"}}, true); });
  expect_kind(ErrorKind::InvalidArgument,
              [] { apply_gemma_chat_template({{"user", "a"}, {"system", "b"}}, true); });
  expect_kind(ErrorKind::InvalidArgument, [] { apply_gemma_chat_template({{"tool", "a"}}, true); });
}

// Expected strings: llama.cpp's own llama_chat_apply_template (llama-cpp-python 0.3.36) on the same
// messages and template text; detection as its llm_chat_detect_template.
const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", " Hi "}, {"assistant", " Hello! "}, {"user", "Bye"}};

TEST(ChatTemplate, DetectsTheFamilyFromTheJinjaSource) {
  // Excerpts of the published templates (Gemma 3, Qwen2, Llama 3, Llama 2 chat).
  EXPECT_EQ(detect_chat_template("{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + role + '\n' }}"),
            ChatFormat::Gemma);
  EXPECT_EQ(detect_chat_template("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"),
            ChatFormat::ChatML);
  EXPECT_EQ(detect_chat_template("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"),
            ChatFormat::Llama3);
  EXPECT_EQ(detect_chat_template("{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"), ChatFormat::Llama2);
  // llama.cpp's order: ChatML before [INST]; Gemma before Llama 3.
  EXPECT_EQ(detect_chat_template("<|im_start|> [INST]"), ChatFormat::ChatML);
  EXPECT_EQ(detect_chat_template("<start_of_turn> <|start_header_id|><|end_header_id|>"), ChatFormat::Gemma);
  EXPECT_EQ(detect_chat_template("<|start_header_id|> only"), std::nullopt);
  EXPECT_EQ(detect_chat_template("chatml"), ChatFormat::ChatML);
  EXPECT_EQ(detect_chat_template("{{ messages }}"), std::nullopt);
  EXPECT_EQ(detect_chat_template(""), std::nullopt);
}

TEST(ChatTemplate, ChatMLAsLlamaCpp) {
  EXPECT_EQ(apply_chat_template(ChatFormat::ChatML, kConversation, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\n Hello! "
            "<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3AsLlamaCpp) {
  EXPECT_EQ(apply_chat_template(ChatFormat::Llama3, kConversation, true),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>"
            "\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user"
            "<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(apply_chat_template(ChatFormat::Llama3, {{"user", "a"}}, false),
            "<|start_header_id|>user<|end_header_id|>\n\na<|eot_id|>");
}

TEST(ChatTemplate, Llama2VariantsAsLlamaCpp) {
  EXPECT_EQ(apply_chat_template(ChatFormat::Llama2, kConversation, true, "[INST]"),
            "[INST] Be brief.\n Hi  [/INST] Hello! </s>[INST] Bye [/INST]");
  EXPECT_EQ(apply_chat_template(ChatFormat::Llama2, kConversation, true, "[INST] content.strip()"),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]Hello!</s>[INST] Bye [/INST]");
  EXPECT_EQ(apply_chat_template(ChatFormat::Llama2, kConversation, true, "bos_token + '[INST]"),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi  [/INST] Hello! </s><s>[INST] Bye [/INST]");
  EXPECT_EQ(apply_chat_template(ChatFormat::Llama2, kConversation, true, "[INST] <<SYS>>"),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi  [/INST] Hello! </s>[INST] Bye [/INST]");
}

TEST(ChatTemplate, Phi3AsLlamaCpp) {
  // llama-chat.cpp LLM_CHAT_TEMPLATE_PHI_3: "<|" role "|>\n" content "<|end|>\n", then "<|assistant|>\n".
  EXPECT_EQ(detect_chat_template("{{'<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n'}}"
                                 "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}"),
            ChatFormat::Phi3);
  EXPECT_EQ(apply_chat_template(ChatFormat::Phi3, kConversation, true),
            "<|system|>\nBe brief.<|end|>\n<|user|>\n Hi <|end|>\n<|assistant|>\n Hello! <|end|>\n<|user|>\nBye<|end|>\n"
            "<|assistant|>\n");
}

TEST(ChatTemplate, MistralVariantsAsLlamaCpp) {
  // llama.cpp 0.3.36's llama_chat_apply_template("mistral-v7" / "-v1" / "-v3" / "-v3-tekken") on
  // kConversation, printed by it (not by larql).
  EXPECT_EQ(apply_chat_template(ChatFormat::Mistral, kConversation, true, "mistral-v7"),
            "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST]  Hi [/INST]  Hello! </s>[INST] Bye[/INST]");
  EXPECT_EQ(apply_chat_template(ChatFormat::Mistral, kConversation, true, "mistral-v1"),
            " [INST] Be brief.\n\n Hi  [/INST]  Hello! </s> [INST] Bye [/INST]");
  EXPECT_EQ(apply_chat_template(ChatFormat::Mistral, kConversation, true, "mistral-v3"),
            "[INST] Be brief.\n\n Hi [/INST] Hello!</s>[INST] Bye[/INST]");
  EXPECT_EQ(apply_chat_template(ChatFormat::Mistral, kConversation, true, "mistral-v3-tekken"),
            "[INST]Be brief.\n\n Hi [/INST] Hello! </s>[INST]Bye[/INST]");
  // Detection as llm_chat_detect_template: Mistral's official templates, else Llama 2's.
  EXPECT_EQ(detect_chat_template("{%- if messages[0]['role'] == 'system' %}[SYSTEM_PROMPT]{{ m }}[/SYSTEM_PROMPT]"
                                 "{%- endif %}[INST]"),
            ChatFormat::Mistral);
  EXPECT_EQ(detect_chat_template("{{ bos_token }}{% if loop.first %}{{ ' [INST] ' + system_message }}{% endif %}[INST]"),
            ChatFormat::Mistral);
  EXPECT_EQ(detect_chat_template("[AVAILABLE_TOOLS] {{ '[INST]' }}"), ChatFormat::Mistral);
  EXPECT_EQ(detect_chat_template("{{ bos_token + '[INST] ' + m + ' [/INST]' }}"), ChatFormat::Llama2);
  EXPECT_EQ(detect_chat_template("mistral-v7"), ChatFormat::Mistral);
}

TEST(ChatTemplate, GemmaThroughTheDispatcherAndUnknownRoles) {
  EXPECT_EQ(apply_chat_template(ChatFormat::Gemma, kConversation, true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  expect_kind(ErrorKind::InvalidArgument, [] { apply_chat_template(ChatFormat::ChatML, {{"tool", "a"}}, true); });
}

TEST(Tokenizer, EotIdAndChatTemplateFromTheVocabulary) {
  VocabData v = make_vocab();
  v.eot_id = 5;
  v.chat_template = "<start_of_turn>";
  Tokenizer t(v);
  EXPECT_EQ(t.eot_id(), 5);
  EXPECT_EQ(t.chat_template(), "<start_of_turn>");
  EXPECT_EQ(chat_format_of(t), ChatFormat::Gemma);
  v.chat_template = "";  // absent: the vocabulary's turn markers decide (token 4 is <start_of_turn>)
  EXPECT_EQ(chat_format_of(Tokenizer(v)), ChatFormat::Gemma);
  v.chat_template = "{{ messages }}";  // present but unknown: no guess from the vocabulary
  EXPECT_EQ(chat_format_of(Tokenizer(v)), std::nullopt);
  v.eot_id = static_cast<int32_t>(v.tokens.size());
  expect_kind(ErrorKind::InvalidArgument, [&] { Tokenizer bad(v); });
}

}  // namespace
}  // namespace larql
