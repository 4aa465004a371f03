// Engine spec strings (grammar: docs/engines.md "Spec strings").
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kv/registry.h"
#include "testlib/engine_testing.h"
#include "util/error.h"

namespace larql {
namespace {

// Expect Error{InvalidArgument} whose message contains every one of `needles`.
void expect_bad(const std::string& spec, const std::vector<std::string>& needles, bool list = false) {
  try {
    if (list) parse_engine_list(spec);
    else parse_engine_spec(spec);
    ADD_FAILURE() << "accepted '" << spec << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << spec << ": " << e.what();
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << spec << ": '" << e.what() << "' lacks '" << n << "'";
  }
}

TEST(Registry, StandardAndItsAliases) {
  for (const char* name : {"standard", "full", "fp32", "markov-bounded", "bounded", "sliding"}) {
    const EngineSpec s = parse_engine_spec(name);
    EXPECT_EQ(s.name, "standard") << name;
    EXPECT_TRUE(s.params.empty()) << name;
    EXPECT_EQ(s.to_string(), "standard");
  }
  EXPECT_EQ(parse_engine_spec("  full  ").name, "standard");
}

TEST(Registry, WindowKey) {
  const EngineSpec s = parse_engine_spec("standard:window=8");
  EXPECT_EQ(s.name, "standard");
  ASSERT_EQ(s.params.size(), 1u);
  EXPECT_EQ(s.params.at("window"), "8");
  EXPECT_EQ(s.get_int("window", 0), 8);
  EXPECT_EQ(s.to_string(), "standard:window=8");
  EXPECT_EQ(parse_engine_spec("sliding:window=512").to_string(), "standard:window=512");
  EXPECT_EQ(parse_engine_spec("standard: window = 16 ").get_int("window", 0), 16);
  EXPECT_EQ(parse_engine_spec("standard").get_int("window", 77), 77);
}

TEST(Registry, Errors) {
  expect_bad("no-such-engine", {"no-such-engine", "standard"});
  expect_bad("", {"standard"});
  expect_bad("standard:colour=red", {"colour", "window"});
  expect_bad("standard:window=abc", {"window", "abc"});
  expect_bad("standard:window=0", {"window"});
  expect_bad("standard:window=-3", {"window"});
  expect_bad("standard:window=8x", {"window"});
  expect_bad("standard:window=", {"window"});
  expect_bad("standard:window", {"window"});
  expect_bad("standard:window=8,window=9", {"window", "twice"});
  expect_bad("standard:window=99999999999999999999999", {"window"});
}

TEST(Registry, ListSplitsOnSemicolon) {
  const auto v = parse_engine_list("standard;full:window=4; bounded:window=2");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].to_string(), "standard");
  EXPECT_EQ(v[1].to_string(), "standard:window=4");
  EXPECT_EQ(v[2].to_string(), "standard:window=2");
}

TEST(Registry, ListSplitsOnCommaBeforeAnEngineName) {
  const auto v = parse_engine_list("standard:window=8,full,sliding:window=3");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].to_string(), "standard:window=8");
  EXPECT_EQ(v[1].to_string(), "standard");
  EXPECT_EQ(v[2].to_string(), "standard:window=3");
  const auto one = parse_engine_list("standard");
  ASSERT_EQ(one.size(), 1u);
}

TEST(Registry, ListErrors) {
  expect_bad("", {}, /*list=*/true);
  expect_bad(";", {}, true);
  expect_bad("standard;nope", {"nope"}, true);
  // A comma piece that is not an engine name stays with the previous spec, as a key.
  expect_bad("standard:window=8,nope", {"nope"}, true);
  expect_bad("standard,window=8", {"window"}, true);  // keys need the "name:" form
}

TEST(Registry, RegistryTable) {
  const auto& reg = engine_registry();
  ASSERT_FALSE(reg.empty());
  EXPECT_EQ(reg[0].name, "standard");
  bool has_window = false;
  for (const auto& k : reg[0].keys) has_window |= k.name == "window";
  EXPECT_TRUE(has_window);
  EXPECT_FALSE(reg[0].description.empty());
  EXPECT_FALSE(reg[0].contract.empty());
}

// Every engine of docs/engines.md's table is in the registry, in ladder order, with its keys.
TEST(Registry, EveryEngineAndKeyOfTheSpec) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> spec = {
      {"standard", {"window", "sink"}},
      {"no-cache", {}},
      {"markov-rs", {"window", "cold_kv"}},
      {"markov-rs-codec", {"window", "codec", "cold_kv"}},
      {"boundary-per-layer", {"window", "layers", "budget", "record"}},
      {"turbo-quant", {"bits", "recent"}},
      {"unlimited-context", {"window", "sink"}},
      {"boundary-kv", {"window", "chunk_tokens", "sequence_id", "archive_dir"}},
      {"apollo", {"layer", "coef", "top_k", "store"}},
  };
  const auto& reg = engine_registry();
  ASSERT_EQ(reg.size(), spec.size());
  for (size_t i = 0; i < spec.size(); ++i) {
    EXPECT_EQ(reg[i].name, spec[i].first);
    std::vector<std::string> keys;
    for (const auto& k : reg[i].keys) keys.push_back(k.name);
    EXPECT_EQ(keys, spec[i].second) << spec[i].first;
  }
}

TEST(Registry, ApolloAndColdKvKeys) {
  EXPECT_EQ(parse_engine_spec("apollo:store=/tmp/x.store,coef=0,top_k=4,layer=12").to_string(),
            "apollo:coef=0,layer=12,store=/tmp/x.store,top_k=4");
  EXPECT_EQ(parse_engine_spec("markov_rs:cold_kv=derive").to_string(), "markov-rs:cold_kv=derive");
  const auto bad = testing::expect_bad_spec;
  bad("markov-rs:cold_kv=lazy", {"cold_kv", "lazy", "cache", "derive"});
  bad("apollo:coef=-1", {"coef", "-1"});
  bad("apollo:top_k=0", {"top_k"});
  bad("apollo:store=", {"store", "empty"});
  bad("apollo:window=4", {"unknown key", "window", "layer, coef, top_k, store"});
}

}  // namespace
}  // namespace larql
