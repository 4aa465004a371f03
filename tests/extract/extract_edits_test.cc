// extract_vindex carries a source vindex's edits.json record (ExtractOptions::edited_slots) on
// the synthetic Gemma 3 model (tests/testlib/synthetic_model.h): the output lists the same slots,
// checksummed, and verify() accepts it; without a record no edits.json is written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "extract/extract.h"
#include "model/model.h"
#include "testlib/synthetic_model.h"
#include "vindex/edited_slots.h"
#include "vindex/index.h"

namespace larql {
namespace {

TEST(ExtractEdits, TheRecordOfEditedSlotsIsCarried) {
  namespace fs = std::filesystem;
  auto m = testing::make_synthetic_model(testing::SyntheticSpec{});
  auto model = Model::load(m->path);
  const fs::path dir = fs::path(::testing::TempDir()) / ("larql-extract-edits-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  extract::ExtractOptions opt;
  opt.threads = 1;
  opt.down_top_k = 2;
  opt.edited_slots = {{1, 3, "insert", "Zorblax", "capital", "Berlin"}, {0, 2, "delete", "", "", ""}};
  const auto with = (dir / "with.vindex").string();
  extract::extract_vindex(*model, with, opt);
  const auto got = vindex::read_edited_slots(with);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].layer, 0);  // sorted by (layer, feature)
  EXPECT_EQ(got[0].op, "delete");
  EXPECT_EQ(got[1].entity, "Zorblax");
  EXPECT_EQ(vindex::read_index(with).checksums.count("edits.json"), 1u);
  EXPECT_TRUE(vindex::verify(with).problems.empty());
  opt.edited_slots.clear();
  const auto without = (dir / "without.vindex").string();
  extract::extract_vindex(*model, without, opt);
  EXPECT_FALSE(fs::exists(fs::path(without) / "edits.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace larql
