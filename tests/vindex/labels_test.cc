// feature_labels.json (vindex/labels.h): a hand-written file parses to the values written in it,
// serialises and parses back, and each malformed variant is refused naming what is wrong.
#include "vindex/labels.h"

#include <gtest/gtest.h>

#include "util/error.h"

namespace larql::vindex {
namespace {

const char* kGood = R"({
  "version": 1, "model": "m", "top_k": 32, "min_fraction": 0.5, "min_margin": 0.3,
  "relations": [{"name": "capital-of", "template": "The capital of {} is", "subjects": 4},
                {"name": "colour-of", "template": "{} is", "subjects": 2}],
  "features": [{"layer": 1, "feature": 3, "relation": "colour-of", "score": 1.0, "fires": 2, "of": 2, "examples": ["x"]},
               {"layer": 0, "feature": 7, "relation": "capital-of", "score": 0.75, "fires": 3, "of": 4}]
})";

std::string error_of(const std::string& text) {
  try {
    parse_feature_labels(text, "fl.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format) << e.what();
    return e.what();
  }
  return "(parsed)";
}

std::string with(const std::string& from, const std::string& to) {
  std::string s = kGood;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(FeatureLabelsTest, ParsesSortsAndFinds) {
  const FeatureLabels l = parse_feature_labels(kGood);
  EXPECT_EQ(l.model, "m");
  EXPECT_EQ(l.top_k, 32);
  ASSERT_EQ(l.relations.size(), 2u);
  EXPECT_EQ(l.relations[0].template_text, "The capital of {} is");
  ASSERT_EQ(l.features.size(), 2u);
  EXPECT_EQ(l.features[0].layer, 0);  // sorted by (layer, feature)
  ASSERT_NE(l.find(0, 7), nullptr);
  EXPECT_EQ(l.find(0, 7)->relation, "capital-of");
  EXPECT_DOUBLE_EQ(l.find(0, 7)->score, 0.75);
  EXPECT_EQ(l.find(1, 3)->examples, std::vector<std::string>{"x"});
  EXPECT_EQ(l.find(1, 7), nullptr);
  EXPECT_EQ(l.find(0, 3), nullptr);
  const FeatureLabels again = parse_feature_labels(serialize_feature_labels(l));
  ASSERT_EQ(again.features.size(), 2u);
  EXPECT_EQ(again.features[1].relation, "colour-of");
  EXPECT_EQ(again.features[1].fires, 2);
  EXPECT_DOUBLE_EQ(again.min_margin, 0.3);
}

TEST(FeatureLabelsTest, MalformedFilesAreRefusedNamingTheProblem) {
  EXPECT_NE(error_of("{").find("not JSON"), std::string::npos);
  EXPECT_NE(error_of(with("\"version\": 1", "\"version\": 2")).find("version 2"), std::string::npos);
  EXPECT_NE(error_of(with("\"model\": \"m\", ", "")).find("missing \"model\""), std::string::npos);
  EXPECT_NE(error_of(with("\"score\": 0.75", "\"score\": 1.5")).find("outside [0, 1]"), std::string::npos);
  EXPECT_NE(error_of(with("\"layer\": 0", "\"layer\": -1")).find("features[1]: \"layer\""), std::string::npos);
  EXPECT_NE(error_of(with("\"relation\": \"colour-of\"", "\"relation\": \"nope\"")).find("\"nope\" is not in"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"fires\": 3", "\"fires\": 5")).find("fires 5 > of 4"), std::string::npos);
  EXPECT_NE(error_of(with("\"layer\": 0, \"feature\": 7", "\"layer\": 1, \"feature\": 3")).find("labelled twice"),
            std::string::npos);
  EXPECT_NE(error_of(with("\"examples\": [\"x\"]", "\"examples\": [1]")).find("array of strings"), std::string::npos);
}

}  // namespace
}  // namespace larql::vindex
