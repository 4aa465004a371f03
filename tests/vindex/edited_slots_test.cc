// edits.json (vindex/edited_slots.h): a hand-written file parses to the values written in it,
// serialises and parses back, merging keeps the later record of a slot, and each malformed variant
// is refused naming what is wrong.
#include "vindex/edited_slots.h"

#include <gtest/gtest.h>

#include "util/error.h"

namespace larql::vindex {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_edited_slots(text, "e.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format) << e.what();
    return e.what();
  }
  return "(parsed)";
}

TEST(EditedSlots, ParsesSortsAndRoundTrips) {
  const auto v = parse_edited_slots(R"({"version": 1, "slots": [
      {"layer": 13, "feature": 40, "op": "insert", "entity": "Zorblax", "relation": "capital", "target": "Berlin"},
      {"layer": 2, "feature": 7, "op": "delete"}]})");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].layer, 2);  // sorted by (layer, feature)
  EXPECT_EQ(v[0].op, "delete");
  EXPECT_TRUE(v[0].entity.empty());
  EXPECT_EQ(v[1].feature, 40);
  EXPECT_EQ(v[1].entity, "Zorblax");
  EXPECT_EQ(v[1].target, "Berlin");
  const auto back = parse_edited_slots(serialize_edited_slots(v));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].relation, "capital");
  EXPECT_EQ(back[0].op, "delete");
}

TEST(EditedSlots, MergeKeepsTheLaterRecord) {
  const std::vector<EditedSlot> a = {{1, 2, "insert", "A", "r", "t"}, {3, 4, "update", "", "", ""}};
  const std::vector<EditedSlot> b = {{1, 2, "delete", "", "", ""}, {0, 9, "insert", "B", "r", "u"}};
  const auto m = merge_edited_slots(a, b);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].layer, 0);
  EXPECT_EQ(m[1].op, "delete");  // (1, 2): b's
  EXPECT_EQ(m[2].op, "update");
}

TEST(EditedSlots, MalformedFilesNameTheProblem) {
  EXPECT_NE(error_of("{").find("e.json: not JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"version": 2, "slots": []})").find("\"version\" must be 1"), std::string::npos);
  EXPECT_NE(error_of(R"({"version": 1})").find("\"slots\" must be an array"), std::string::npos);
  EXPECT_NE(error_of(R"({"version": 1, "slots": [{"layer": -1, "feature": 0, "op": "insert"}]})")
                .find("slots[0]: \"layer\" must be a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"version": 1, "slots": [{"layer": 1, "feature": 0, "op": "move"}]})").find("op \"move\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"version": 1, "slots": [{"layer": 1, "feature": 0, "op": "update", "entity": 3}]})")
                .find("\"entity\" must be a string"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"version": 1, "slots": [{"layer": 1, "feature": 0, "op": "update"},
                                                {"layer": 1, "feature": 0, "op": "delete"}]})")
                .find("layer 1 feature 0 is listed twice"),
            std::string::npos);
}

}  // namespace
}  // namespace larql::vindex
