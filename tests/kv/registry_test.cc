// Engine spec strings (grammar: shared/design/ENGINES.md "Spec strings").
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kv/registry.h"
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

}  // namespace
}  // namespace larql
