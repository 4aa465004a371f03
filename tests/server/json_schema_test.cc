// The schema automaton (json_schema.h) against an independent oracle: nlohmann's JSON parser plus
// a small JSON Schema validator written here for the subset (validate() below), over hand-made
// documents, every one- and two-edit variant of them, and every short string over a small
// alphabet; the vocabulary mask against brute force (every token simulated alone) on the default
// model's 262k vocabulary; unsupported keywords refused with their JSON pointer.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kv/generate.h"
#include "server/json_constraint.h"
#include "server/json_schema.h"
#include "testlib/real_model.h"
#include "util/error.h"

namespace larql::server {
namespace {

using ojson = nlohmann::ordered_json;

bool feed_all(SchemaState& s, const std::string& text) {
  for (unsigned char c : text)
    if (!s.feed(c)) return false;
  return true;
}

bool accepts(const SchemaGrammar& g, const std::string& text) {
  SchemaState s(g);
  return feed_all(s, text) && s.accepting();
}

// ---- the oracle ----

bool compact(const std::string& t) {  // no whitespace outside strings
  bool in = false, esc = false;
  for (char c : t) {
    if (in) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in = false;
    } else if (c == '"') {
      in = true;
    } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      return false;
    }
  }
  return true;
}

bool validate(const ojson& v, const ojson& s, const ojson& root) {
  if (s.contains("$ref")) {
    const std::string r = s["$ref"];
    const std::string sec = r.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    return validate(v, root[sec][r.substr(r.find('/', 2) + 1)], root);
  }
  if (s.contains("anyOf")) {
    for (const auto& a : s["anyOf"])
      if (validate(v, a, root)) return true;
    return false;
  }
  if (s.contains("const")) return v == s["const"];
  if (s.contains("enum")) {
    for (const auto& e : s["enum"])
      if (v == e) return true;
    return false;
  }
  std::vector<std::string> types;
  if (s["type"].is_string()) types.push_back(s["type"]);
  else
    for (const auto& t : s["type"]) types.push_back(t);
  for (const auto& t : types) {
    if (t == "null" && v.is_null()) return true;
    if (t == "boolean" && v.is_boolean()) return true;
    if (t == "string" && v.is_string()) return true;
    if (t == "integer" && (v.is_number_integer() || v.is_number_unsigned())) return true;
    if (t == "number" && v.is_number()) return true;
    if (t == "array" && v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) continue;
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) continue;
      bool ok = true;
      for (const auto& x : v) ok = ok && validate(x, s["items"], root);
      if (ok) return true;
    }
    if (t == "object" && v.is_object()) {
      const ojson props = s.value("properties", ojson::object());
      // Keys: declared ones only, in the schema's order, required ones present.
      std::vector<std::string> order;
      for (auto it = props.begin(); it != props.end(); ++it) order.push_back(it.key());
      size_t at = 0;
      bool ok = true;
      for (auto it = v.begin(); it != v.end() && ok; ++it) {
        while (at < order.size() && order[at] != it.key()) ++at;
        ok = at < order.size() && validate(it.value(), props[it.key()], root);
        ++at;
      }
      for (const auto& r : s.value("required", ojson::array())) ok = ok && v.contains(r.get<std::string>());
      if (ok) return true;
    }
  }
  return false;
}

bool oracle(const ojson& schema, const std::string& text) {
  if (!ojson::accept(text) || !compact(text)) return false;
  return validate(ojson::parse(text), schema, schema);
}

// Every document within one edit (and a sample within two) of the seeds: the automaton and the
// oracle must agree on each.
void agree_near(const std::string& schema_text, const std::vector<std::string>& seeds, const std::string& alphabet) {
  const ojson schema = ojson::parse(schema_text);
  const auto g = SchemaGrammar::compile(schema_text);
  std::vector<std::string> cands;
  auto edits = [&](const std::string& d, std::vector<std::string>& out) {
    for (size_t i = 0; i <= d.size(); ++i) {
      if (i < d.size()) out.push_back(d.substr(0, i) + d.substr(i + 1));
      for (char c : alphabet) {
        out.push_back(d.substr(0, i) + c + d.substr(i));
        if (i < d.size()) out.push_back(d.substr(0, i) + c + d.substr(i + 1));
      }
    }
  };
  for (const auto& d : seeds) {
    ASSERT_TRUE(oracle(schema, d)) << "seed is not valid: " << d;
    cands.push_back(d);
    edits(d, cands);
  }
  std::mt19937 rng(7);
  const size_t one = cands.size();
  for (size_t k = 0; k < 2000 && one > 0; ++k) {
    std::vector<std::string> two;
    edits(cands[rng() % one], two);
    cands.push_back(two[rng() % two.size()]);
  }
  int valid = 0;
  for (const auto& c : cands) {
    const bool want = oracle(schema, c);
    valid += want;
    ASSERT_EQ(accepts(*g, c), want) << schema_text << "\n  document: " << c;
  }
  EXPECT_GT(valid, static_cast<int>(seeds.size()) - 1);
}

// Every string over `alphabet` up to `max_len` bytes.
void agree_exhaustive(const std::string& schema_text, const std::string& alphabet, size_t max_len) {
  const ojson schema = ojson::parse(schema_text);
  const auto g = SchemaGrammar::compile(schema_text);
  int valid = 0;
  std::function<void(std::string&)> rec = [&](std::string& t) {
    const bool want = oracle(schema, t);
    valid += want;
    ASSERT_EQ(accepts(*g, t), want) << schema_text << "\n  document: " << t;
    if (t.size() == max_len) return;
    for (char c : alphabet) {
      t.push_back(c);
      rec(t);
      t.pop_back();
    }
  };
  std::string t;
  rec(t);
  EXPECT_GT(valid, 0);
}

TEST(SchemaGrammar, ExhaustiveShortStrings) {
  agree_exhaustive(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2})", "[]10,-", 7);
  agree_exhaustive(R"({"type":"array","items":{"type":"number"},"maxItems":3})", "[]1,.e-", 7);
  agree_exhaustive(R"({"type":["boolean","null"]})", "truefalsn", 5);
  agree_exhaustive(R"({"enum":[1,12,"a",[1]]})", "[]12\"a", 5);
  agree_exhaustive(R"({"type":"string"})", "\"a\\u0", 6);
}

TEST(SchemaGrammar, Objects) {
  const char* s = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
    "tags":{"type":"array","items":{"enum":["x","yz"]},"maxItems":2},"ok":{"type":"boolean"}},
    "required":["name","age"],"additionalProperties":false})";
  agree_near(s,
             {R"({"name":"Bo","age":3})", R"({"name":"","age":-1,"tags":["x","yz"]})",
              R"({"name":"a","age":0,"tags":[],"ok":true})", R"({"name":"a","age":10,"ok":false})"},
             "{}[]\",:axyzok01-tr");
  const auto g = SchemaGrammar::compile(s);
  EXPECT_FALSE(accepts(*g, R"({"age":3,"name":"Bo"})"));      // schema order
  EXPECT_FALSE(accepts(*g, R"({"name":"Bo"})"));              // required
  EXPECT_FALSE(accepts(*g, R"({"name":"Bo","age":3,"x":1})"));  // additional
  EXPECT_FALSE(accepts(*g, R"({"name": "Bo","age":3})"));     // whitespace: none
}

TEST(SchemaGrammar, AnyOfRefsNullableConst) {
  const char* s = R"({"$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},
    "required":["x","y"],"additionalProperties":false},
    "ptlist":{"type":"array","items":{"$ref":"#/$defs/pt"}}},
    "type":"object","properties":{
      "v":{"anyOf":[{"$ref":"#/$defs/pt"},{"type":"string"},{"const":{"k":[1,null]}}]},
      "w":{"type":["integer","null"]},
      "p":{"$ref":"#/$defs/ptlist"}},
    "required":["v","w","p"],"additionalProperties":false})";
  agree_near(s,
             {R"({"v":{"x":1,"y":-2.5},"w":null,"p":[]})", R"({"v":"s","w":4,"p":[{"x":0,"y":1e3}]})",
              R"({"v":{"k":[1,null]},"w":null,"p":[{"x":1,"y":2},{"x":3,"y":4}]})"},
             "{}[]\",:xyvwpk0123.e-null");
}

TEST(SchemaGrammar, DefinitionsAndBounds) {
  const char* s = R"({"definitions":{"c":{"enum":["red","green","blue"]}},"type":"array",
    "items":{"$ref":"#/definitions/c"},"minItems":2,"maxItems":3})";
  agree_near(s, {R"(["red","blue"])", R"(["green","green","red"])"}, "[]\",redgnbl");
  const auto g = SchemaGrammar::compile(s);
  EXPECT_FALSE(accepts(*g, R"(["red"])"));
  EXPECT_FALSE(accepts(*g, R"(["red","red","red","red"])"));
}

TEST(SchemaGrammar, DeepestNestingFits) {
  // 31 objects inside each other (with the root's, 32 levels of schema): the automaton's stacks
  // hold the deepest document; one level more is refused when the schema is compiled.
  std::string schema = R"({"type":"integer"})", doc = "7";
  for (int i = 0; i < 31; ++i) {
    schema = R"({"type":"object","properties":{"k":)" + schema + R"(,"z":{"type":"boolean"}},"required":["k"]})";
    doc = R"({"k":)" + doc + "}";
  }
  const auto g = SchemaGrammar::compile(schema);
  EXPECT_TRUE(accepts(*g, doc));
  EXPECT_FALSE(accepts(*g, doc + "}"));
  EXPECT_THROW(SchemaGrammar::compile(R"({"type":"array","items":)" + schema + "}"), Error);
}

TEST(SchemaGrammar, RefusesWhatIsOutsideTheSubset) {
  auto refusal = [](const std::string& schema) {
    try {
      SchemaGrammar::compile(schema);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal(R"({"type":"object","properties":{"name":{"type":"string","pattern":"^a"}}})"),
            "json_schema: 'pattern' at /properties/name/pattern is not supported");
  EXPECT_NE(refusal(R"({"type":"string","format":"date"})").find("'format' at /format"), std::string::npos);
  EXPECT_NE(refusal(R"({"if":{"type":"string"},"then":{"type":"string"}})").find("'if' at /if"), std::string::npos);
  EXPECT_NE(refusal(R"({"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"})")
                .find("recursive"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"type":"object","additionalProperties":true})").find("additionalProperties"), std::string::npos);
  EXPECT_NE(refusal(R"({"type":"array","items":{"type":"integer"},"maxItems":100000})").find("maxItems"), std::string::npos);
  EXPECT_NE(refusal(R"({"type":"string","maxLength":4})").find("'maxLength' at /maxLength"), std::string::npos);
  EXPECT_NE(refusal(R"({"type":"object","required":["a"]})").find("/required"), std::string::npos);
  EXPECT_NE(refusal(R"({"description":"no type"})").find("none of 'type'"), std::string::npos);
  EXPECT_NE(refusal("{\"type\":").find("not valid JSON"), std::string::npos);
  std::string deep = R"({"type":"string"})";
  for (int i = 0; i < 100; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_NE(refusal(deep).find("deeper than"), std::string::npos);
}

// Every token simulated alone from `s` against the mask.
int64_t mask_mismatches(const JsonVocab& v, const larql::testing::RealModel& m, const std::vector<int32_t>& eog,
                        const SchemaState& s, std::vector<uint8_t>& allowed, int64_t* n_allowed) {
  int64_t mismatches = 0;
  *n_allowed = 0;
  for (int32_t id = 0; id < m.tok.vocab_size(); ++id) {
    const TokenType type = m.tok.token_type(id);
    const bool is_eog = std::find(eog.begin(), eog.end(), id) != eog.end();
    bool want = false;
    if (type == TokenType::Normal || type == TokenType::Byte) {
      const std::string piece = m.tok.token_to_piece(id);
      SchemaState t = s;
      want = !piece.empty() && feed_all(t, piece);
    }
    if (is_eog) want = s.accepting();
    *n_allowed += allowed[static_cast<size_t>(id)];
    mismatches += want != (allowed[static_cast<size_t>(id)] != 0);
  }
  return mismatches;
}

TEST(SchemaVocab, MaskEqualsBruteForceOnTheRealVocabulary) {
  auto* m = larql::testing::shared_real_model();
  if (!m) GTEST_SKIP() << "default model absent";
  JsonVocab v(m->tok);
  const std::vector<int32_t> eog = eog_ids(m->tok);
  const std::string g_text = R"({"type":"object","properties":{
    "name":{"type":"string"},"kind":{"enum":["cat","dog","cattle"]},"age":{"type":"integer"},
    "tags":{"type":"array","items":{"type":"string"},"maxItems":3},"score":{"type":["number","null"]},
    "note":{"anyOf":[{"type":"string"},{"enum":["n/a","none"]}]}},
    "required":["name","kind","age"],"additionalProperties":false})";
  const auto g = SchemaGrammar::compile(g_text);
  std::vector<uint8_t> allowed;
  // States: start, structure, a key, a free string (twice: the second from the cache), an enum,
  // a number, mid-character, an array, a literal, a string beside an enum (anyOf), done.
  for (const std::string prefix : {"", "{", "{\"na", "{\"name\":\"Ca", "{\"name\":\"Ca", "{\"name\":\"x\",\"kind\":\"ca",
                                   "{\"name\":\"x\",\"kind\":\"cat\",\"age\":-1", "{\"name\":\"\xE2\x82",
                                   "{\"name\":\"x\",\"kind\":\"dog\",\"age\":7,\"tags\":[\"a\",",
                                   "{\"name\":\"x\",\"kind\":\"dog\",\"age\":7,\"score\":n",
                                   "{\"name\":\"x\",\"kind\":\"dog\",\"age\":7,\"note\":\"",
                                   "{\"name\":\"x\",\"kind\":\"dog\",\"age\":7,\"note\":\"n",
                                   "{\"name\":\"x\",\"kind\":\"dog\",\"age\":7}"}) {
    SchemaState s(*g);
    ASSERT_TRUE(feed_all(s, prefix)) << prefix;
    const auto a = std::chrono::steady_clock::now();
    v.mask(s, eog, allowed);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
    int64_t n_allowed = 0;
    EXPECT_EQ(mask_mismatches(v, *m, eog, s, allowed, &n_allowed), 0) << "after \"" << prefix << "\"";
    EXPECT_GT(n_allowed, 0);
    std::printf("  schema mask after %-48s %7lld allowed, %.2f ms%s\n", ("\"" + prefix + "\"").c_str(),
                static_cast<long long>(n_allowed), ms, s.accepts_plain() ? " (plain tokens from the list)" : "");
  }
  // A whole document, token by token as the tokenizer splits it: every token is allowed when it
  // comes (the mask never cuts a valid document), and the end of generation only at the end. The
  // time per step is what docs/BENCHMARKS.md records ("JSON schema mask").
  const std::string doc =
      R"({"name":"Ada Lovelace, the first programmer \"ever\"","kind":"cattle","age":36,"tags":["math","poetry"],)"
      R"("score":-12.5e3,"note":"n/a"})";
  const auto ids = m->tok.encode(doc, false, false);
  // Five passes, each with a fresh grammar (an empty mask cache, as a new request has); per step
  // the fastest pass, so that a time slice lost to another process does not count.
  std::vector<double> step_ms(ids.size() + 1, 1e9);
  for (int pass = 0; pass < 5; ++pass) {
    const auto fresh = SchemaGrammar::compile(g_text);
    SchemaState s(*fresh);
    for (size_t i = 0; i <= ids.size(); ++i) {
      const auto a = std::chrono::steady_clock::now();
      v.mask(s, eog, allowed);
      step_ms[i] = std::min(step_ms[i], std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
      if (i == ids.size()) {
        for (int32_t e : eog) EXPECT_TRUE(allowed[static_cast<size_t>(e)]);
        break;
      }
      ASSERT_TRUE(allowed[static_cast<size_t>(ids[i])]) << "token " << i << " of " << doc;
      for (int32_t e : eog) EXPECT_FALSE(allowed[static_cast<size_t>(e)]) << "token " << i;
      ASSERT_TRUE(v.advance(s, ids[i]));
    }
    EXPECT_TRUE(s.done());
  }
  std::sort(step_ms.begin(), step_ms.end());
  double sum = 0;
  for (double x : step_ms) sum += x;
  std::printf("  schema mask over a %zu-token document: mean %.3f ms, median %.3f ms, max %.3f ms per step\n",
              ids.size(), sum / static_cast<double>(step_ms.size()), step_ms[step_ms.size() / 2], step_ms.back());
}

}  // namespace
}  // namespace larql::server
