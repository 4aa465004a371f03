// A vindex's weight_manifest.json as its loader reads it (model/vindex_source.h): every entry's
// "kind" is "tensor" (docs/vindex-format.md "weight_manifest.json"), and an entry of another kind
// — a file of a later spec this larql cannot read — is refused naming the file, the entry, the key
// and the kind it reads, not silently loaded as a tensor. The vindex is the synthetic Gemma 3
// model extracted at level inference (tests/testlib/synthetic_model.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "extract/extract.h"
#include "model/model.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"

namespace larql {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(VindexManifest, AnEntryOfAnUnknownKindIsRefused) {
  auto m = testing::make_synthetic_model(testing::SyntheticSpec{});
  auto model = Model::load(m->path);
  const fs::path dir = fs::path(::testing::TempDir()) / ("larql-manifest-kind-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  extract::ExtractOptions opt;
  opt.level = vindex::ExtractLevel::Inference;
  opt.threads = 1;
  opt.down_top_k = 2;
  const std::string vx = (dir / "m.vindex").string();
  extract::extract_vindex(*model, vx, opt);
  EXPECT_EQ(Model::load(vx)->config().n_layers, model->config().n_layers);  // as extracted: loads

  const fs::path mpath = fs::path(vx) / "weight_manifest.json";
  std::stringstream text;
  text << std::ifstream(mpath).rdbuf();
  json manifest = json::parse(text.str());
  ASSERT_TRUE(manifest.is_array() && manifest.size() > 3);
  ASSERT_EQ(manifest[3]["kind"], "tensor");
  manifest[3]["kind"] = "alien";
  std::ofstream(mpath, std::ios::trunc) << manifest.dump();
  try {
    Model::load(vx);
    ADD_FAILURE() << "a manifest entry of kind \"alien\" was loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format);
    const std::string msg = e.what();
    EXPECT_NE(msg.find(mpath.string() + " entry 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"kind\" = \"alien\" is not supported (this larql reads \"tensor\")"), std::string::npos) << msg;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace larql
