// The REPL's \help (lql/help.h): every example parses, and the list covers every statement kind,
// every SHOW form, every patch statement and the forms the old prose help called "not built yet"
// (they all run now), so the help cannot fall behind the grammar.
#include "lql/help.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "lql/parser.h"
#include "util/error.h"

namespace larql::lql {
namespace {

TEST(Help, EveryExampleParsesAndEveryFormIsListed) {
  std::set<size_t> kinds;
  std::set<ShowStmt::What> shows;
  std::set<PatchStmt::Op> patches;
  bool infer_compare = false, attention = false, entities_nearest = false, into_patch = false, into_vindex = false,
       into_model = false, pipe = false;
  for (const auto& f : statement_help()) {
    Pipeline p;
    try {
      p = parse_one(f.example);
    } catch (const Error& e) {
      ADD_FAILURE() << f.example << ": " << e.what();
      continue;
    }
    pipe |= p.stages.size() > 1;
    for (const auto& st : p.stages) {
      kinds.insert(st.body.index());
      if (auto* s = std::get_if<ShowStmt>(&st.body)) shows.insert(s->what);
      if (auto* s = std::get_if<PatchStmt>(&st.body)) patches.insert(s->op);
      if (auto* s = std::get_if<InferStmt>(&st.body)) infer_compare |= s->compare;
      if (auto* s = std::get_if<ExplainStmt>(&st.body)) attention |= s->with_attention;
      if (auto* s = std::get_if<SelectStmt>(&st.body))
        entities_nearest |= s->from == SelectStmt::From::Entities && s->nearest.has_value();
      if (auto* s = std::get_if<DiffStmt>(&st.body)) into_patch |= s->into_patch.has_value();
      if (auto* s = std::get_if<CompileStmt>(&st.body)) (s->into_model ? into_model : into_vindex) = true;
    }
  }
  EXPECT_EQ(kinds.size(), std::variant_size_v<StmtBody>);
  EXPECT_EQ(shows.size(), 6u);    // MODELS LAYERS RELATIONS FEATURES ENTITIES PATCHES
  EXPECT_EQ(patches.size(), 4u);  // BEGIN SAVE APPLY REMOVE
  EXPECT_TRUE(infer_compare && attention && entities_nearest && into_patch && into_vindex && into_model && pipe);
}

TEST(Help, TheTextListsEachFormOnceAndNothingThatRunsAsNotBuilt) {
  const std::string h = help_text();
  for (const auto& f : statement_help()) EXPECT_NE(h.find(std::string(f.syntax)), std::string::npos) << f.syntax;
  const std::string rest = h.substr(h.find("Not built yet"));
  for (const char* runs : {"INSERT", "DELETE FROM", "PATCH", "INTO PATCH", "INTO VINDEX", "SHOW PATCHES", "RELATION \""})
    EXPECT_EQ(rest.find(runs), std::string::npos) << runs;
  EXPECT_NE(h.find("\\help"), std::string::npos);
  EXPECT_NE(h.find("\\q"), std::string::npos);
}

}  // namespace
}  // namespace larql::lql
