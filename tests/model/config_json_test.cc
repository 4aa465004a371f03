// index.json's model_config (model/config_json.h): a message names the key by its full JSON path —
// the mixture's keys live under model_config.moe (docs/vindex-format.md "Experts"), a layer's under
// model_config.layers[i] — so a user editing the file finds the key the message names.
#include "model/config_json.h"

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace larql {
namespace {

using nlohmann::json;

// A valid two-layer Qwen2-MoE config, as extract writes it.
json moe_config_json() {
  ModelConfig c;
  c.arch = "qwen2moe";
  c.n_layers = 2;
  c.hidden = 8;
  c.ffn = 16;
  c.n_heads = c.n_kv_heads = 1;
  c.head_dim = 8;
  c.vocab = 10;
  c.context_length = 16;
  c.n_experts = 4;
  c.n_experts_used = 2;
  c.expert_ffn = 32;
  c.shared_expert_ffn = 64;
  c.layers.resize(2);
  return json::parse(config_to_json(c));
}

std::string error_of(const json& j) {
  try {
    config_from_json(j.dump(), "/x/m.vindex/index.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted " << j.dump();
  return "";
}

TEST(ConfigJson, MessagesNameTheFullKeyPath) {
  const json ok = moe_config_json();
  EXPECT_EQ(config_from_json(ok.dump(), "test").n_experts, 4);
  json j = ok;
  j["moe"].erase("n_experts");
  EXPECT_EQ(error_of(j), "/x/m.vindex/index.json: model_config.moe has no \"n_experts\"");
  j = ok;
  j["moe"]["n_experts"] = 0;
  EXPECT_EQ(error_of(j), "/x/m.vindex/index.json: model_config.moe.n_experts = 0 is not an integer in [1, 2^31)");
  j = ok;
  j["moe"]["expert_weights_norm"] = 1;
  EXPECT_EQ(error_of(j), "/x/m.vindex/index.json: model_config.moe.expert_weights_norm must be true or false");
  j = ok;
  j["moe"]["n_experts_used"] = 5;
  EXPECT_EQ(error_of(j), "/x/m.vindex/index.json: model_config.moe.n_experts_used = 5 is more than model_config.moe.n_experts = 4");
  j = ok;
  j.erase("hidden");
  EXPECT_EQ(error_of(j), "/x/m.vindex/index.json: model_config has no \"hidden\"");
  j = ok;
  j["layers"][1]["sliding"] = "yes";
  EXPECT_EQ(error_of(j), "/x/m.vindex/index.json: model_config.layers[1].sliding must be true or false");
  j = ok;
  j["layers"][0]["rope_form"] = "spiral";
  EXPECT_EQ(error_of(j), "/x/m.vindex/index.json: model_config.layers[0].rope_form \"spiral\" is not neox or adjacent");
}

}  // namespace
}  // namespace larql
