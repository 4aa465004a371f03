// The Vindexfile parser (src/vindexfile/vindexfile.h, docs/vindexfile.md): every directive, and
// errors at the line:column counted by hand from the texts below.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "util/error.h"
#include "vindexfile/vindexfile.h"

namespace larql::vindexfile {
namespace {

/// The message of the error parse() throws, or "" when it does not.
std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format) << e.what();
    return e.what();
  }
  return "";
}

/// The error names `where` ("Vindexfile:L:C: ") first and contains `what`.
void expect_error(const std::string& text, const std::string& where, const std::string& what) {
  const std::string m = error_of(text);
  ASSERT_FALSE(m.empty()) << "no error for:\n" << text;
  EXPECT_EQ(m.rfind("Vindexfile:" + where + ": ", 0), 0u) << m;
  EXPECT_NE(m.find(what), std::string::npos) << m;
}

TEST(VindexfileParse, EveryDirective) {
  const Vindexfile vf = parse(
      "# a recipe\n"
      "FROM models/gemma.gguf\n"
      "\n"
      "level Inference\n"
      "DTYPE f32\n"
      "QUANT q4k\n"
      "DOWN_TOP_K 12\n"
      "PATCH \"my patches/facts.vlp\"\n"
      "INSERT (\"Zorblax\", \"capital\", \"Berlin\") MODE KNN\n"
      "INSERT INTO EDGES (entity, relation, target)\n"
      "  # a comment between the lines of a statement\n"
      "    VALUES (\"Quenthar\", \"language\", \"Spanish\") ALPHA 1.5\n"
      "UPDATE EDGES SET target = \"Lyon\" WHERE layer = 2 AND feature = 7\n"
      "DELETE FROM EDGES WHERE layer = 1 AND feature = 3;\n"
      "LABELS DEFAULT\n");
  EXPECT_EQ(*vf.from.value, "models/gemma.gguf");
  EXPECT_EQ(vf.from.pos.line, 2);
  EXPECT_EQ(*vf.level.value, "inference");
  EXPECT_EQ(*vf.dtype.value, "f32");
  EXPECT_EQ(*vf.quant.value, "q4k");
  EXPECT_EQ(*vf.down_top_k.value, 12);
  EXPECT_TRUE(vf.extract_settings());
  ASSERT_EQ(vf.edits.size(), 5u);
  EXPECT_EQ(vf.edits[0].kind, Edit::Kind::Patch);
  EXPECT_EQ(vf.edits[0].path, "my patches/facts.vlp");
  EXPECT_EQ(vf.edits[0].pos.line, 8);

  const auto& ins = std::get<lql::InsertStmt>(vf.edits[1].pipeline.stages.at(0).body);
  EXPECT_EQ(ins.entity, "Zorblax");
  EXPECT_EQ(ins.relation, "capital");
  EXPECT_EQ(ins.target, "Berlin");
  ASSERT_TRUE(ins.mode.has_value());
  EXPECT_EQ(*ins.mode, lql::InsertMode::Knn);
  EXPECT_EQ(vf.edits[1].pos.line, 9);

  const auto& ins2 = std::get<lql::InsertStmt>(vf.edits[2].pipeline.stages.at(0).body);
  EXPECT_EQ(ins2.entity, "Quenthar");
  EXPECT_DOUBLE_EQ(*ins2.alpha, 1.5);
  // ALPHA's number is on line 12: `    VALUES ("Quenthar", "language", "Spanish") ALPHA 1.5`,
  // VALUES at column 5, ALPHA at 48, its number at 54.
  EXPECT_EQ(ins2.alpha_pos.line, 12);
  EXPECT_EQ(ins2.alpha_pos.col, 54);

  EXPECT_TRUE(std::holds_alternative<lql::UpdateStmt>(vf.edits[3].pipeline.stages.at(0).body));
  EXPECT_TRUE(std::holds_alternative<lql::DeleteStmt>(vf.edits[4].pipeline.stages.at(0).body));
  ASSERT_TRUE(vf.labels.has_value());
  EXPECT_TRUE(vf.labels->builtin);
}

TEST(VindexfileParse, ShortInsertKeepsTheFilesColumns) {
  // `INSERT ("a", "b", "c") AT LAYER 3`: AT at column 24, the layer number at 33.
  const Vindexfile vf = parse("FROM x\nINSERT (\"a\", \"b\", \"c\") AT LAYER 3\n");
  const auto& ins = std::get<lql::InsertStmt>(vf.edits.at(0).pipeline.stages.at(0).body);
  EXPECT_EQ(*ins.layer, 3);
  EXPECT_EQ(ins.layer_pos.line, 2);
  EXPECT_EQ(ins.layer_pos.col, 33);
}

TEST(VindexfileParse, TrailingComments) {
  const Vindexfile vf = parse("FROM a#b.gguf   # the model\nLEVEL all\t# every weight\nLABELS DEFAULT #\n");
  EXPECT_EQ(*vf.from.value, "a#b.gguf");  // '#' inside a word is part of it
  EXPECT_EQ(*vf.level.value, "all");
  EXPECT_TRUE(vf.labels->builtin);
}

/// The ```-fenced blocks of a markdown file that hold a line starting with "FROM " (the example
/// recipes; not the grammar), each with a leading "\n".
std::vector<std::string> recipe_blocks(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::vector<std::string> out;
  std::string line, block;
  bool in = false;
  while (std::getline(f, line)) {
    if (line.rfind("```", 0) == 0) {
      if (in && block.find("\nFROM ") != std::string::npos) out.push_back(block);
      in = !in;
      block = "\n";
      continue;
    }
    if (in) block += line + "\n";
  }
  return out;
}

TEST(VindexfileParse, TheDocsExamplesParse) {
  const char* root = std::getenv("LARQL_SOURCE_DIR");
  ASSERT_NE(root, nullptr) << "LARQL_SOURCE_DIR is not set";
  const auto blocks = recipe_blocks(std::string(root) + "/docs/vindexfile.md");
  ASSERT_GE(blocks.size(), 1u);
  for (const auto& b : blocks) {
    const Vindexfile vf = parse(b.substr(1));
    EXPECT_TRUE(vf.from.given());
    EXPECT_GE(vf.edits.size(), 1u);
  }
}

TEST(VindexfileParse, MinimalAndLineEndings) {
  const Vindexfile vf = parse("\xEF\xBB\xBF" "FROM 'a b.vindex'\r\nLABELS \"DEFAULT\"\r\n");
  EXPECT_EQ(*vf.from.value, "a b.vindex");
  EXPECT_FALSE(vf.extract_settings());
  EXPECT_TRUE(vf.edits.empty());
  ASSERT_TRUE(vf.labels.has_value());
  EXPECT_FALSE(vf.labels->builtin);  // quoted: a file named DEFAULT
  EXPECT_EQ(vf.labels->path, "DEFAULT");
}

TEST(VindexfileParse, CanonicalTextIgnoresSpellingAndComments) {
  const Vindexfile a = parse("FROM x\nINSERT (\"a\", \"b\", \"c\")\nDELETE FROM EDGES WHERE layer=1 AND feature=2\n");
  const Vindexfile b = parse(
      "FROM x\n"
      "insert into edges (entity, relation, target)\n"
      "   values ('a', 'b', 'c')   -- the same fact\n"
      "delete from edges where layer = 1\n"
      "     and feature = 2\n");
  ASSERT_EQ(a.edits.size(), 2u);
  ASSERT_EQ(b.edits.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(canonical(a.edits[i]), canonical(b.edits[i]));
  const Vindexfile c = parse("FROM x\nINSERT (\"a\", \"b\", \"d\")\n");
  EXPECT_NE(canonical(a.edits[0]), canonical(c.edits[0]));
  EXPECT_EQ(canonical(parse("FROM x\nPATCH f.vlp\n").edits[0]), canonical(parse("FROM x\nPATCH \"f.vlp\"\n").edits[0]));
}

TEST(VindexfileParse, ErrorsNameLineAndColumn) {
  expect_error("", "1:1", "no FROM");
  expect_error("# only a comment\n\n", "1:1", "no FROM");
  expect_error("FROM m.gguf\nLEVL inference\n", "2:1", "unknown directive \"LEVL\"");
  expect_error("FROM m.gguf\nLEVEL fast\n", "2:7", "LEVEL \"fast\" is not one of browse, attention, inference, all");
  expect_error("FROM m.gguf\nDTYPE  f64\n", "2:8", "DTYPE \"f64\"");
  expect_error("FROM m.gguf\nQUANT q2\n", "2:7", "QUANT \"q2\"");
  expect_error("FROM m.gguf\nDOWN_TOP_K 0\n", "2:12", "DOWN_TOP_K \"0\"");
  expect_error("FROM m.gguf\nDOWN_TOP_K 12x\n", "2:12", "not a whole number");
  expect_error("FROM a\nFROM b\n", "2:1", "FROM given twice (first at 1:1)");
  expect_error("FROM a\nLEVEL all\nLEVEL browse\n", "3:1", "LEVEL given twice (first at 2:1)");
  expect_error("LEVEL inference\nFROM x\n", "1:1", "comes before FROM");
  expect_error("FROM \"unterminated\n", "1:6", "unterminated string");
  expect_error("FROM \"a\\qb\"\n", "1:8", "unknown escape \\q");
  expect_error("FROM a b\n", "1:8", "unexpected \"b\"");
  expect_error("FROM a b # c\n", "1:8", "unexpected \"b\"");
  expect_error("FROM\n", "1:5", "FROM needs");
  expect_error("FROM  hf://google/gemma-3-270m\n", "1:7", "remote sources (hf://) are not read");
  expect_error("FROM a\nPATCH\n", "2:6", "PATCH needs");
  // Columns count code points, not bytes: Ü, ï, ø and é are two bytes each in UTF-8.
  expect_error("FROM \"Ünïcødé\" x\n", "1:16", "unexpected \"x\"");
  expect_error("  FROM a\n", "1:3", "there is none");
  expect_error("FROM a\n  b\n", "2:3", "FROM at 1:1 takes one line");
  expect_error("FROM a\nDELETE FROM EDGES WHERE layer = 1 AND feature = 2\nLEVEL all\n", "3:1",
               "LEVEL follows an edit (DELETE at 2:1)");
  expect_error("FROM a\nLABELS x.json\nLABELS DEFAULT\n", "3:1", "LABELS given twice (first at 2:1)");
  expect_error("FROM a\n= b\n", "2:1", "expected a directive, found \"=\"");
  expect_error("FROM a\nFROM:b\n", "2:5", "expected a blank after FROM");
  expect_error(std::string("FROM a\nPATCH b\0c\n", 17), "2:8", "NUL byte");
  expect_error("FROM a\nPATCH b\xff\n", "2:8", "not UTF-8");
}

TEST(VindexfileParse, LqlErrorsKeepTheFilesPositions) {
  // `INSERT ("e", "r")`: the ')' at column 17 where a ',' is due.
  expect_error("FROM a\nINSERT (\"e\", \"r\")\n", "2:1", "at 2:17");
  // `INSERT INTO EDGES (entity, relation, target) VALUS ...`: VALUS at column 46.
  expect_error("FROM a\nINSERT INTO EDGES (entity, relation, target) VALUS (\"a\", \"b\", \"c\")\n", "2:1", "at 2:46");
  // An error on a continuation line, below a comment line: `  MODE FAST`, FAST at column 8.
  expect_error("FROM a\nINSERT (\"e\", \"r\", \"t\")\n  # note\n  MODE FAST\n", "2:1", "at 4:8");
  // A pipe: the second stage, INFER, at column 38.
  expect_error("FROM a\nDELETE FROM EDGES WHERE layer = 1 |> INFER \"x\"\n", "2:38", "no pipes");
  // An LQL error in a string literal, with multi-byte characters before it: the bad escape's
  // column counts code points.
  expect_error("FROM a\nINSERT (\"é\", \"r\\q\", \"t\")\n", "2:1", "at 2:");
}


TEST(VindexfileParse, MangledTextIsAnErrorOrAParseNeverACrash) {
  // Every text cut, spliced and byte-flipped from a valid one: parse() returns or throws
  // larql::Error (nothing else escapes); what parses prints (canonical) without throwing.
  const std::string good =
      "FROM \"m.gguf\"\nLEVEL all\nPATCH p.vlp\nINSERT (\"a\", \"b\", \"c\") AT LAYER 2 MODE KNN\n"
      "UPDATE EDGES SET target = 'x' WHERE layer = 1 AND feature IN (1, 2)\n  AND NOT token LIKE 'a%'\n"
      "DELETE FROM EDGES WHERE layer BETWEEN 1 AND 3;\nLABELS DEFAULT\n# é\n";
  static const char kBytes[] = "FROMINSERT(),\"'\\ \t\n\r#-;|>=é\xff\0abc123";
  const std::string alphabet(kBytes, sizeof kBytes - 1);  // with its NUL byte
  std::mt19937 rng(7);
  int parsed = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string t = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !t.empty(); ++k) {
      const size_t at = rng() % t.size();
      switch (rng() % 3) {
        case 0: t.erase(at, 1 + rng() % 8); break;
        case 1: t.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        default: t[at] = alphabet[rng() % alphabet.size()];
      }
    }
    try {
      const Vindexfile vf = parse(t);
      for (const auto& e : vf.edits) (void)canonical(e);
      ++parsed;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(parsed, 0);
}

}  // namespace
}  // namespace larql::vindexfile
