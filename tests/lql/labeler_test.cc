// The labelling rule of `larql label` (lql/labeler.h) on hand-made firings, and the shipped
// relation set data/relations.json (>= 8 relations, >= 20 subjects each, one "{}" per template).
#include "lql/labeler.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "util/error.h"
#include "util/text_file.h"

namespace larql::lql {
namespace {

ProbeRelation rel(const std::string& name, int n) {
  ProbeRelation r;
  r.name = name;
  r.template_text = name + " of {}";
  for (int i = 0; i < n; ++i) r.facts.emplace_back(name + std::to_string(i), "o");
  return r;
}

TEST(LabelerTest, LabelsFeaturesThatFireForMostOfOneRelationOnly) {
  // Two relations of 4 prompts. Firings (layer, feature):
  //   A0: (0,1) (0,2) (1,5)   A1: (0,1) (1,5)   A2: (0,1) (0,2)   A3: (0,1)
  //   B0: (0,2) (1,6)         B1: (0,2) (1,6)   B2: (1,6)         B3: (0,3)
  // (0,1): A 4/4, B 0/4 -> A, score 1.    (0,2): A 2/4, B 2/4 -> margin 0: none.
  // (1,5): A 2/4, B 0 -> frac 0.5 >= 0.5, margin 0.5 -> A, score 0.5.
  // (1,6): B 3/4, A 0 -> B, score 0.75.   (0,3): B 1/4 < 0.5: none.
  const std::vector<ProbeRelation> rels = {rel("A", 4), rel("B", 4)};
  Firings f(2);
  f[0] = {{{0, 1}, {0, 2}, {1, 5}}, {{0, 1}, {1, 5}}, {{0, 1}, {0, 2}}, {{0, 1}, {0, 1}}};  // a repeat counts once
  f[1] = {{{0, 2}, {1, 6}}, {{0, 2}, {1, 6}}, {{1, 6}}, {{0, 3}}};
  LabelOptions opt;
  const auto l = choose_labels(rels, f, opt);
  ASSERT_EQ(l.features.size(), 3u);
  ASSERT_NE(l.find(0, 1), nullptr);
  EXPECT_EQ(l.find(0, 1)->relation, "A");
  EXPECT_DOUBLE_EQ(l.find(0, 1)->score, 1.0);
  EXPECT_EQ(l.find(0, 1)->fires, 4);
  EXPECT_EQ(l.find(0, 1)->examples, (std::vector<std::string>{"A0", "A1", "A2"}));
  EXPECT_EQ(l.find(1, 5)->relation, "A");
  EXPECT_DOUBLE_EQ(l.find(1, 5)->score, 0.5);
  EXPECT_EQ(l.find(1, 6)->relation, "B");
  EXPECT_DOUBLE_EQ(l.find(1, 6)->score, 0.75);
  EXPECT_EQ(l.find(1, 6)->examples, (std::vector<std::string>{"B0", "B1", "B2"}));
  EXPECT_EQ(l.find(0, 2), nullptr);
  EXPECT_EQ(l.find(0, 3), nullptr);
  ASSERT_EQ(l.relations.size(), 2u);
  EXPECT_EQ(l.relations[1].subjects, 4);
  // A stricter margin drops (1,5) (0.5) and keeps (1,6) (0.75).
  opt.min_margin = 0.6;
  const auto strict = choose_labels(rels, f, opt);
  EXPECT_EQ(strict.find(1, 5), nullptr);
  EXPECT_NE(strict.find(1, 6), nullptr);
}

TEST(LabelerTest, RelationSetErrorsNameTheEntry) {
  auto error_of = [](const std::string& text) {
    try {
      parse_relations(text, "r.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(parsed)");
  };
  EXPECT_NE(error_of("[").find("r.json: not JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"relations": [{"name": "a", "template": "no hole", "facts": [["x", "y"]]}]})")
                .find("relations[0] (a): the template must hold \"{}\" exactly once"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"relations": [{"name": "a", "template": "{}", "facts": [["x"]]}]})").find("facts[0]"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"relations": [{"name": "a", "template": "{}", "facts": []}]})").find("no facts"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"relations": [{"name": "a", "template": "{}", "facts": [["x", "y"]]},
                                      {"name": "a", "template": "{}", "facts": [["x", "y"]]}]})")
                .find("repeated name"),
            std::string::npos);
  const auto ok = parse_relations(R"({"relations": [{"name": "a", "template": "The {} is", "facts": [["x", "y"]]}]})", "r");
  EXPECT_EQ(ok.at(0).prompt("sky"), "The sky is");
}

TEST(LabelerTest, ShippedRelationSetHasEightRelationsOfTwentySubjects) {
  const char* root = std::getenv("LARQL_SOURCE_DIR");
  ASSERT_NE(root, nullptr);
  const auto rels = parse_relations(read_text_file(std::string(root) + "/data/relations.json", "relations"),
                                    "data/relations.json");
  EXPECT_GE(rels.size(), 8u);
  std::set<std::string> names;
  for (const auto& r : rels) {
    names.insert(r.name);
    EXPECT_GE(r.facts.size(), 20u) << r.name;
    std::set<std::string> subjects;
    for (const auto& [s, o] : r.facts) {
      EXPECT_TRUE(subjects.insert(s).second) << r.name << ": subject " << s << " twice";
      EXPECT_FALSE(o.empty());
    }
  }
  for (const char* n : {"capital-of", "language-of", "currency-of", "continent-of"}) EXPECT_TRUE(names.count(n)) << n;
  // A few facts checked by hand against the file.
  auto object = [&](const std::string& rel_name, const std::string& subject) {
    for (const auto& r : rels)
      if (r.name == rel_name)
        for (const auto& [s, o] : r.facts)
          if (s == subject) return o;
    return std::string("(absent)");
  };
  EXPECT_EQ(object("capital-of", "France"), "Paris");
  EXPECT_EQ(object("currency-of", "Japan"), "yen");
  EXPECT_EQ(object("continent-of", "Kenya"), "Africa");
  EXPECT_EQ(object("language-of", "Brazil"), "Portuguese");
}

}  // namespace
}  // namespace larql::lql
