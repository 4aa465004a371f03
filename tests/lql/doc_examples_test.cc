// Every ```lql block of docs/lql.md parses (the examples are the language's documentation, so
// they must stay true). $LARQL_SOURCE_DIR names the repository (set by CMake for every test).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "lql/parser.h"
#include "util/error.h"

namespace larql::lql {
namespace {

TEST(DocExamplesTest, EveryExampleInDocsLqlParses) {
  const char* root = std::getenv("LARQL_SOURCE_DIR");
  ASSERT_NE(root, nullptr) << "LARQL_SOURCE_DIR is not set";
  std::ifstream in(std::string(root) + "/docs/lql.md");
  ASSERT_TRUE(in.good()) << "docs/lql.md not found under " << root;
  std::string line, block;
  bool inside = false;
  int blocks = 0, statements = 0, line_no = 0, block_line = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!inside && line.rfind("```lql", 0) == 0) {
      inside = true;
      block.clear();
      block_line = line_no + 1;
    } else if (inside && line.rfind("```", 0) == 0) {
      inside = false;
      ++blocks;
      try {
        statements += static_cast<int>(parse_script(block).size());
      } catch (const Error& e) {
        ADD_FAILURE() << "docs/lql.md block at line " << block_line << ": " << e.what();
      }
    } else if (inside) {
      block += line + "\n";
    }
  }
  EXPECT_FALSE(inside) << "an unclosed ```lql block";
  EXPECT_GE(blocks, 5);
  EXPECT_GE(statements, 30);
}

}  // namespace
}  // namespace larql::lql
