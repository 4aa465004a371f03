// index.json: parse / validate / round trip with unknown fields kept; verify() on a directory.
#include "vindex/index.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "util/error.h"
#include "vindex/sha256.h"

namespace larql::vindex {
namespace {

using nlohmann::json;

// Two layers, hidden 4, f32: gate slots of 3 and 2 features (48 and 32 bytes).
json sample() {
  return json{
      {"version", 2}, {"vindex_spec_version", 1}, {"model", "tiny"}, {"family", "gemma3"},
      {"source", {{"format", "gguf"}, {"name", "tiny.gguf"}, {"fingerprint", "abc"}}},
      {"num_layers", 2}, {"hidden_size", 4}, {"intermediate_size", 3}, {"vocab_size", 10},
      {"embed_scale", 2.0}, {"extract_level", "browse"}, {"dtype", "f32"}, {"quant", "none"},
      {"layer_bands", {{"syntax", {0, 0}}, {"knowledge", {1, 1}}}},
      {"layers", json::array({{{"layer", 0}, {"num_features", 3}, {"offset", 0}, {"length", 48}},
                              {{"layer", 1}, {"num_features", 2}, {"offset", 48}, {"length", 32}}})},
      {"down_top_k", 10}, {"has_model_weights", false}, {"model_config", {{"head_dim", 2}}},
      {"checksums", json::object()}, {"future_field", {{"x", 1}}}};
}

void expect_format(const json& j, const std::string& needle) {
  try {
    parse_index(j.dump());
    ADD_FAILURE() << "parsed; expected " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(IndexTest, ParsesAndRoundTripsUnknownFields) {
  const VindexIndex x = parse_index(sample().dump());
  EXPECT_EQ(x.family, "gemma3");
  EXPECT_EQ(x.source.fingerprint, "abc");
  EXPECT_EQ(x.layers.size(), 2u);
  EXPECT_EQ(x.layers[1].offset, 48u);
  EXPECT_EQ(x.layer_bands.at("knowledge").first, 1);
  EXPECT_EQ(x.embed_scale, 2.0);
  const json back = json::parse(serialize_index(x));
  EXPECT_EQ(back["future_field"], (json{{"x", 1}}));
  EXPECT_EQ(back["model_config"], (json{{"head_dim", 2}}));
  EXPECT_EQ(back["layers"], sample()["layers"]);
  EXPECT_EQ(parse_index(back.dump()).layers[1].length, 32u);
}

TEST(IndexTest, RejectsWhatIsWrongNamingIt) {
  expect_format(json::array(), "not a JSON object");
  json j = sample();
  j.erase("hidden_size");
  expect_format(j, "missing field \"hidden_size\"");
  j = sample();
  j["vindex_spec_version"] = 2;
  expect_format(j, "vindex_spec_version 2 is not supported");
  j = sample();
  j["dtype"] = "f8";
  expect_format(j, "unknown dtype \"f8\"");
  j = sample();
  j["extract_level"] = "everything";
  expect_format(j, "unknown extract_level");
  j = sample();
  j["layers"][1]["length"] = 33;
  expect_format(j, "layers[1]: length 33");
  j = sample();
  j["layers"][1]["offset"] = 64;
  expect_format(j, "does not follow");
  j = sample();
  j["layers"][1]["layer"] = 0;
  expect_format(j, "listed in order");
  j = sample();
  j["layers"].erase(1);
  expect_format(j, "\"layers\" has 1 entries for num_layers 2");
  j = sample();
  j["layer_bands"]["output"] = {1, 2};
  expect_format(j, "layer_bands.output");
  j = sample();
  j["checksums"]["../x"] = std::string(64, 'a');
  expect_format(j, "\"../x\"");
  j = sample();
  j["checksums"]["index.json"] = std::string(64, 'a');
  expect_format(j, "\"index.json\"");
  j = sample();
  j["checksums"]["a.bin"] = "ABC";
  expect_format(j, "checksums[\"a.bin\"]");
  j = sample();
  j["num_layers"] = -1;
  expect_format(j, "\"num_layers\" = -1");
  expect_format(json::parse("{\"version\": 2}"), "missing field");
  try {
    parse_index("{not json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos);
  }
}

// A mixture-of-experts layer slot: num_experts and num_features_per_expert, both or neither, their
// product within num_features (the rest the shared expert's); round-tripped; expert_of numbers
// experts first, then the shared expert (docs/vindex-format.md "Experts").
TEST(IndexTest, ExpertSlots) {
  json j = sample();
  j.erase("model_config");  // no model_config: nothing to check the slots against
  j["layers"][0]["num_experts"] = 1;
  j["layers"][0]["num_features_per_expert"] = 2;  // 1 expert x 2, then 1 shared feature
  const VindexIndex x = parse_index(j.dump());
  EXPECT_EQ(x.layers[0].num_experts, 1);
  EXPECT_EQ(x.layers[0].num_features_per_expert, 2);
  EXPECT_EQ(x.layers[1].num_experts, 0);
  EXPECT_EQ(expert_of(x.layers[0], 0), 0);
  EXPECT_EQ(expert_of(x.layers[0], 1), 0);
  EXPECT_EQ(expert_of(x.layers[0], 2), -2);
  EXPECT_EQ(expert_of(x.layers[1], 1), -1);
  json back = json::parse(serialize_index(x));
  EXPECT_EQ(back["layers"], j["layers"]);
  EXPECT_FALSE(back["layers"][1].contains("num_experts"));
  json k = j;
  k["layers"][0].erase("num_features_per_expert");
  expect_format(k, "layers[0]: missing field \"num_features_per_expert\"");
  k = j;
  k["layers"][0]["num_experts"] = 2;  // 2 x 2 > 3 features
  expect_format(k, "num_experts x num_features_per_expert = 4 is more than num_features 3");
  k = j;
  k["layers"][0]["num_experts"] = 0;
  expect_format(k, "\"num_experts\" = 0");
}

// index.json "version" is the original's layout version, 2 (docs/vindex-format.md "index.json"):
// a later one (a file this larql cannot read) is refused naming the file, the key and the value
// it reads.
TEST(IndexTest, RefusesALayoutVersionItDoesNotRead) {
  for (int64_t v : {99, 1, 3}) {
    json j = sample();
    j["version"] = v;
    try {
      parse_index(j.dump(), "/x/gemma.vindex/index.json");
      ADD_FAILURE() << "version " << v << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Format);
      const std::string m = e.what();
      EXPECT_NE(m.find("/x/gemma.vindex/index.json"), std::string::npos) << m;
      EXPECT_NE(m.find("\"version\" = " + std::to_string(v) + " is not supported"), std::string::npos) << m;
      EXPECT_NE(m.find("layout version 2"), std::string::npos) << m;
    }
  }
  json j = sample();
  j["version"] = "2";
  expect_format(j, "\"version\" must be an integer");
}

// Every layer slot's num_experts is the model's model_config.moe.n_experts (extract writes both
// from one config; docs/vindex-format.md "Experts"): a slot that disagrees, experts in a dense
// model or a slot without experts in a mixture is refused naming the layer and both values.
TEST(IndexTest, ExpertSlotsAgreeWithTheModelConfig) {
  json j = sample();
  j["model_config"] = {{"moe", {{"n_experts", 1}, {"n_experts_used", 1}}}};
  for (int l : {0, 1}) {
    j["layers"][l]["num_experts"] = 1;
    j["layers"][l]["num_features_per_expert"] = 2;
  }
  EXPECT_EQ(parse_index(j.dump()).layers[1].num_experts, 1);  // consistent: accepted
  json k = j;
  k["model_config"]["moe"]["n_experts"] = 8;
  expect_format(k, "layers[0].num_experts = 1 differs from model_config.moe.n_experts = 8");
  k = j;
  k["layers"][1]["num_experts"] = 2;
  k["layers"][1]["num_features_per_expert"] = 1;
  expect_format(k, "layers[1].num_experts = 2 differs from model_config.moe.n_experts = 1");
  k = j;
  k["layers"][1].erase("num_experts");
  k["layers"][1].erase("num_features_per_expert");
  expect_format(k, "layers[1] has no num_experts, but model_config.moe.n_experts = 1");
  k = j;
  k["model_config"].erase("moe");
  expect_format(k, "layers[0].num_experts = 1, but model_config has no moe");
  k = j;
  k["model_config"]["moe"]["n_experts"] = "1";
  expect_format(k, "model_config.moe.n_experts must be an integer");
}

class VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("larql-vx-" + std::to_string(::getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    put("gate_vectors.bin", std::string(80, 'g'));
    put("embeddings.bin", std::string(160, 'e'));
    json j = sample();
    j["checksums"] = {{"gate_vectors.bin", sha256_hex(std::string(80, 'g').data(), 80)},
                      {"embeddings.bin", sha256_hex(std::string(160, 'e').data(), 160)}};
    put("index.json", j.dump());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void put(const std::string& name, const std::string& s) { std::ofstream(dir_ / name, std::ios::binary) << s; }
  std::string problems() {
    std::string all;
    for (const auto& p : verify(dir_.string()).problems) all += p + "\n";
    return all;
  }
  std::filesystem::path dir_;
};

TEST_F(VerifyTest, AcceptsAnIntactDirectory) {
  const VerifyReport r = verify(dir_.string());
  EXPECT_TRUE(r.problems.empty()) << problems();
  EXPECT_EQ(r.files, 2);
  EXPECT_EQ(r.bytes, 240u);
}

TEST_F(VerifyTest, CatchesAFlippedByte) {
  std::string e(160, 'e');
  e[100] = 'f';
  put("embeddings.bin", e);
  EXPECT_NE(problems().find("embeddings.bin: SHA-256"), std::string::npos) << problems();
}

TEST_F(VerifyTest, CatchesMissingExtraAndShortFiles) {
  std::filesystem::remove(dir_ / "embeddings.bin");
  put("stray.bin", "x");
  put("gate_vectors.bin", std::string(79, 'g'));
  const std::string p = problems();
  EXPECT_NE(p.find("embeddings.bin: missing"), std::string::npos) << p;
  EXPECT_NE(p.find("stray.bin: not listed"), std::string::npos) << p;
  EXPECT_NE(p.find("gate_vectors.bin: 79 bytes; the layer slots need 80"), std::string::npos) << p;
}

TEST_F(VerifyTest, ATruncatedIndexIsAFormatError) {
  put("index.json", sample().dump().substr(0, 40));
  EXPECT_THROW(verify(dir_.string()), Error);
}

}  // namespace
}  // namespace larql::vindex
